"""The dashboard's login session: an HMAC-signed, expiring cookie derived from the admin token.

No server-side state; changing ``FEDOD_ADMIN_TOKEN`` invalidates every session.
"""

from __future__ import annotations

import hashlib
import hmac
import time

COOKIE_NAME = "fedod_admin"


def _mac(admin_token: str, expires: int) -> str:
    key = hashlib.sha256(b"fedod-admin-session\x00" + admin_token.encode()).digest()
    return hmac.new(key, f"admin|{expires}".encode(), hashlib.sha256).hexdigest()


def issue(admin_token: str, max_age_s: int, now: float | None = None) -> str:
    """A cookie value valid for ``max_age_s`` seconds."""
    expires = int((now if now is not None else time.time()) + max_age_s)
    return f"{expires}.{_mac(admin_token, expires)}"


def verify(admin_token: str | None, value: str | None, now: float | None = None) -> bool:
    """True for an unexpired cookie signed with the current admin token."""
    if not admin_token or not value or "." not in value:
        return False
    expires_text, mac = value.split(".", 1)
    if not expires_text.isdigit():
        return False
    expires = int(expires_text)
    if expires < (now if now is not None else time.time()):
        return False
    return hmac.compare_digest(mac, _mac(admin_token, expires))
