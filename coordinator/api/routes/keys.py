"""The coordinator's public signing key (what participants pin)."""

from __future__ import annotations

from fastapi import APIRouter

from common.wire.schemas import KeyPublic
from coordinator.api.deps import KeysDep

router = APIRouter(tags=["keys"])


@router.get("/key")
def get_key(keys: KeysDep) -> KeyPublic:
    """Current public key and its fingerprint (key id)."""
    return KeyPublic(key_id=keys.key_id(), public_key_pem=keys.public_pem())
