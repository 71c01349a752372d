"""The dashboard's login throttle, kept in the database so that it holds across workers.

At most ``limit`` failed logins per client address in any ``window_s`` seconds (a sliding
window), whichever uvicorn worker or coordinator replica answers. Each failure is a row of
``login_failures``; a row of ``login_clients`` per address is locked (``SELECT ... FOR
UPDATE`` on PostgreSQL; SQLite serialises writers anyway) while an attempt is judged, so
concurrent attempts of one address are counted one after another and never slip past the
limit together. A throttled attempt is refused whether or not its token is right, so a
guesser learns nothing faster than the limit allows.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import String, delete, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Mapped, Session, mapped_column

from coordinator.db.tables import Base, UTCDateTime, utcnow


class LoginClient(Base):
    """A client address that failed to log in lately (the row its attempts lock)."""

    __tablename__ = "login_clients"

    client: Mapped[str] = mapped_column(String(64), primary_key=True)


class LoginFailure(Base):
    """One failed dashboard login of a client address, kept for the throttle's window."""

    __tablename__ = "login_failures"

    id: Mapped[int] = mapped_column(primary_key=True)
    client: Mapped[str] = mapped_column(String(64), index=True)
    failed_at: Mapped[datetime] = mapped_column(UTCDateTime, index=True)


def _lock_client(session: Session, client: str) -> None:
    """Create the address's row if needed and hold its lock until the transaction ends."""
    insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    locked = None
    while locked is None:  # again if a purge deleted the row between the two statements
        session.execute(insert(LoginClient).values(client=client).on_conflict_do_nothing())
        locked = session.scalar(
            select(LoginClient.client).where(LoginClient.client == client).with_for_update()
        )


def _purge(session: Session, client: str, since: datetime) -> None:
    """Delete failures older than the window and addresses without any (rows others hold
    locked are skipped, so concurrent purges never wait on each other)."""
    stale = select(LoginFailure.id).where(LoginFailure.failed_at <= since)
    session.execute(
        delete(LoginFailure).where(LoginFailure.id.in_(stale.with_for_update(skip_locked=True)))
    )
    idle = select(LoginClient.client).where(
        LoginClient.client != client,
        ~select(LoginFailure.id).where(LoginFailure.client == LoginClient.client).exists(),
    )
    session.execute(
        delete(LoginClient).where(LoginClient.client.in_(idle.with_for_update(skip_locked=True)))
    )


def judge_login(
    session: Session,
    client: str,
    *,
    correct: bool,
    limit: int,
    window_s: int,
    now: datetime | None = None,
) -> int:
    """Count one login attempt of ``client``; return 0 to let it through, else Retry-After.

    A throttled attempt (``limit`` failures already in the last ``window_s`` seconds) is
    refused, right token or not, and not counted; an allowed wrong attempt (``correct``
    False) is counted. ``now`` (default: the clock) is for tests. Commits the session.
    """
    client = client[:64]
    now = now or utcnow()
    since = now - timedelta(seconds=window_s)
    _lock_client(session, client)
    _purge(session, client, since)
    count, oldest = session.execute(
        select(func.count(), func.min(LoginFailure.failed_at)).where(
            LoginFailure.client == client, LoginFailure.failed_at > since
        )
    ).one()
    if count >= limit:
        session.commit()
        return max(1, int(window_s - (now - oldest).total_seconds()) + 1)
    if not correct:
        session.add(LoginFailure(client=client, failed_at=now))
    session.commit()
    return 0
