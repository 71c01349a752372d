"""Coordinator settings: one ``BaseSettings`` read from ``FEDOD_*`` environment variables."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_TOKENS = frozenset(
    {"changeme", "change-me", "admin", "secret", "password", "token", "test", "example"}
)
MIN_ADMIN_TOKEN_LENGTH = 24
MIN_ADMIN_TOKEN_BITS = 56
"""Least empirical entropy (Shannon bits per character x length) an admin token must show."""


def token_entropy_bits(token: str) -> float:
    """Empirical entropy of ``token``: its character distribution's Shannon bits x length.

    A lower estimate for random tokens (``secrets.token_urlsafe(32)`` shows about 200 bits)
    and near zero for repeated or patterned ones (24 times the same letter: 0 bits).
    """
    n = len(token)
    if n == 0:
        return 0.0
    return -n * sum(c / n * math.log2(c / n) for c in Counter(token).values())


class Settings(BaseSettings):
    """Everything the coordinator reads from its environment (prefix ``FEDOD_``)."""

    model_config = SettingsConfigDict(env_prefix="FEDOD_", extra="ignore")

    env: Literal["production", "development"] = "production"
    data_dir: Path = Path("fedod-data")
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default sqlite:///<data_dir>/coordinator.db"
    )
    admin_token: str | None = Field(default=None, repr=False)
    signing_key_path: Path | None = Field(
        default=None, description="Ed25519 PEM; default <data_dir>/signing_key.pem"
    )
    max_body_bytes: int = Field(default=8 * 1024 * 1024, ge=1024)
    max_decoded_bytes: int = Field(default=256 * 1024 * 1024, ge=1024)
    sqlite_busy_timeout_ms: int = Field(default=30_000, ge=0)
    session_max_age_s: int = Field(default=8 * 3600, ge=60)
    dashboard_warn_fraction: Decimal = Field(
        default=Decimal("0.8"), gt=0, le=1,
        description="Dashboard warns about participants that spent this share of their cap",
    )
    log_level: str = "INFO"
    log_json: bool = True
    db_pool_size: int = Field(default=5, ge=1, description="connections per worker")
    db_max_overflow: int = Field(default=0, ge=0, description="extra connections per worker")
    db_reserved_connections: int = Field(
        default=10, ge=0, description="PostgreSQL connections left to other clients"
    )
    db_timeout_s: float = Field(
        default=5.0, gt=0, description="wait for a pooled connection or a new one, then 503"
    )
    request_timeout_s: float = Field(
        default=30.0, gt=0, description="a handler that has not answered by then gets 503"
    )
    retry_after_s: int = Field(default=5, ge=1, description="Retry-After of a 503")
    limit_concurrency: int = Field(
        default=2048, ge=1, description="connections + requests per worker before 503"
    )
    header_timeout_s: float = Field(default=10.0, gt=0, description="to send request headers")
    body_timeout_s: float = Field(default=30.0, gt=0, description="between two body chunks")
    keep_alive_timeout_s: float = Field(
        default=20.0, gt=0, description="idle keep-alive; above clients' own (httpx: 5 s)"
    )
    max_header_bytes: int = Field(default=16 * 1024, ge=1024)
    forwarded_allow_ips: str = Field(
        default="127.0.0.1", description="proxies whose X-Forwarded-* headers are trusted"
    )
    login_attempts_per_minute: int = Field(
        default=10, ge=1, description="failed logins per client address, across all workers"
    )
    login_window_s: int = Field(
        default=60, ge=1, description="the sliding window of FEDOD_LOGIN_ATTEMPTS_PER_MINUTE"
    )
    metrics_public: bool = False

    @model_validator(mode="after")
    def _refuse_weak_admin_token(self) -> Settings:
        token = self.admin_token
        if token is None or self.env == "development":
            return self
        if (
            token.strip().lower() in PLACEHOLDER_TOKENS
            or len(token) < MIN_ADMIN_TOKEN_LENGTH
            or token_entropy_bits(token) < MIN_ADMIN_TOKEN_BITS
        ):
            raise ValueError(
                f"FEDOD_ADMIN_TOKEN is a placeholder, shorter than {MIN_ADMIN_TOKEN_LENGTH} "
                f"characters or too regular (under {MIN_ADMIN_TOKEN_BITS} bits of entropy); "
                "generate one with `python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'` (or set FEDOD_ENV=development locally)"
            )
        return self

    @property
    def connections_per_worker(self) -> int:
        """Most PostgreSQL connections one worker opens: its pool plus the readiness probe."""
        return self.db_pool_size + self.db_max_overflow + 1

    @property
    def resolved_database_url(self) -> str:
        """The configured URL, or a SQLite file in the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'coordinator.db').resolve()}"

    @property
    def resolved_signing_key_path(self) -> Path:
        """The configured key path, or ``<data_dir>/signing_key.pem``."""
        return self.signing_key_path or self.data_dir / "signing_key.pem"


def describe_settings_error(exc: ValidationError) -> str:
    """One line per problem, naming the variable, never echoing the rejected value."""
    parts = []
    for error in exc.errors():
        where = "FEDOD_" + "_".join(str(p) for p in error.get("loc", ())).upper()
        message = str(error.get("msg", "invalid")).removeprefix("Value error, ")
        parts.append(message if where == "FEDOD_" else f"{where}: {message}")
    return "; ".join(parts)



def __getattr__(name: str) -> Settings:
    """``coordinator.config.settings``: the environment's settings, read on first use.

    Lazy so that importing this module never fails (and never echoes a rejected value).
    """
    if name == "settings":
        value = Settings()
        globals()["settings"] = value
        return value
    raise AttributeError(name)
