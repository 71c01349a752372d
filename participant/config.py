"""Participant settings: one ``BaseSettings`` read from ``FEDOD_*`` environment variables.

Command-line flags win over these (``--state``, ``--token``/``--token-file``, ``--send-slot``).
"""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from participant.release.policy import DEFAULT_SEND_SLOT


class Settings(BaseSettings):
    """What ``fedod-participant`` reads from its environment (prefix ``FEDOD_``)."""

    model_config = SettingsConfigDict(env_prefix="FEDOD_", extra="ignore")

    state_dir: str = Field(
        default="~/.fedod-participant",
        description="State directory (credential, pinned key, ledger, stored releases).",
    )
    participant_token: str | None = Field(
        default=None, repr=False, description="Credential for `enrol` instead of --token-file."
    )
    send_slot: float = Field(
        default=DEFAULT_SEND_SLOT, ge=0, allow_inf_nan=False,
        description="Seconds from config fetch to sending a release, whatever the data size "
        "(`contribute`/`run` --send-slot); 0 disables the padding (tests and demos only).",
    )
