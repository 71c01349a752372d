"""The dashboard's login sessions (server-side, revocable).

The cookie holds a random session id; the database keeps only an HMAC of it (keyed by the
admin token) with its expiry. Logout deletes the row, so a copied cookie stops working at
once; changing ``FEDOD_ADMIN_TOKEN`` changes every HMAC and so ends every session.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from sqlalchemy import String, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from coordinator.db.tables import Base, UTCDateTime, utcnow

COOKIE_NAME = "fedod_admin"


class AdminSession(Base):
    """A signed-in dashboard session: the HMAC of its cookie and when it expires."""

    __tablename__ = "admin_sessions"

    id_mac: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


def _mac(admin_token: str, session_id: str) -> str:
    key = hashlib.sha256(b"fedod-admin-session\x00" + admin_token.encode()).digest()
    return hmac.new(key, session_id.encode(), hashlib.sha256).hexdigest()


def issue(session: Session, admin_token: str, max_age_s: int) -> str:
    """Store a new session valid for ``max_age_s`` seconds; return the cookie value."""
    session_id = secrets.token_urlsafe(32)
    now = utcnow()
    session.execute(delete(AdminSession).where(AdminSession.expires_at < now))
    session.add(
        AdminSession(
            id_mac=_mac(admin_token, session_id),
            created_at=now,
            expires_at=now + timedelta(seconds=max_age_s),
        )
    )
    session.commit()
    return session_id


def verify(session: Session, admin_token: str | None, value: str | None) -> bool:
    """True for the cookie of a stored, unexpired session under the current admin token."""
    if not admin_token or not value or len(value) > 128:
        return False
    expires = session.scalar(
        select(AdminSession.expires_at).where(AdminSession.id_mac == _mac(admin_token, value))
    )
    return expires is not None and expires > utcnow()


def revoke(session: Session, admin_token: str | None, value: str | None) -> None:
    """End the session of this cookie (a copy of it stops working too)."""
    if admin_token and value and len(value) <= 128:
        session.execute(delete(AdminSession).where(AdminSession.id_mac == _mac(admin_token, value)))
        session.commit()
