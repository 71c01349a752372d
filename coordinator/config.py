"""Coordinator settings: one ``BaseSettings`` read from ``FEDOD_*`` environment variables."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

PLACEHOLDER_TOKENS = frozenset(
    {"changeme", "change-me", "admin", "secret", "password", "token", "test", "example"}
)
MIN_ADMIN_TOKEN_LENGTH = 24


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

    @model_validator(mode="after")
    def _refuse_weak_admin_token(self) -> Settings:
        token = self.admin_token
        if token is None or self.env == "development":
            return self
        if token.strip().lower() in PLACEHOLDER_TOKENS or len(token) < MIN_ADMIN_TOKEN_LENGTH:
            raise ValueError(
                f"FEDOD_ADMIN_TOKEN is a placeholder or shorter than {MIN_ADMIN_TOKEN_LENGTH} "
                "characters; generate one with `python -c 'import secrets; "
                "print(secrets.token_urlsafe(32))'` (or set FEDOD_ENV=development locally)"
            )
        return self

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


settings = Settings()
