"""Server-rendered HTML for the admin budget dashboard (no JavaScript, no external assets)."""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from html import escape
from pathlib import Path
from string import Template

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from coordinator.models import Aggregate, Contribution, Study, utcnow
from coordinator.round_dashboard import rounds_section
from coordinator.services.ledger import all_budgets, recent_charges
from coordinator.services.studies import study_config

TEMPLATES = Path(__file__).parent / "templates"


@cache
def _template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def fmt(value: Decimal) -> str:
    """A decimal as plain text without exponent or trailing zeros (``1.5``, ``0``)."""
    text = f"{value.normalize():f}"
    return text


def page(title: str, body: str) -> str:
    return _template("base.html").substitute(title=escape(title), body=body)


def login_page(error: str | None = None) -> str:
    message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    return page("Sign in", _template("login.html").substitute(error=message))


def _bar(spent: Decimal, cap: Decimal) -> str:
    share = Decimal(100) if cap == 0 else min(spent / cap * 100, Decimal(100))
    level = "bad" if share >= 100 else "warn" if share >= 80 else ""
    return (
        f'<div class="bar" title="{share:.0f}% of cap"><div class="fill {level}" '
        f'style="width:{share:.1f}%"></div></div><span class="muted"> {share:.0f}%</span>'
    )


def _participant_rows(session: Session) -> tuple[str, int, int, Decimal]:
    rows, active, total = [], 0, Decimal(0)
    for b in all_budgets(session):
        active += b.active
        total += b.epsilon_spent
        name = escape(b.participant)
        status = (
            '<span class="pill">active</span>'
            if b.active
            else ('<span class="pill off">revoked</span>')
        )
        rows.append(
            f'<tr data-participant="{name}"><td>{name}</td><td>{status}</td>'
            f'<td class="num" data-field="epsilon_cap">{fmt(b.epsilon_cap)}</td>'
            f'<td class="num" data-field="epsilon_spent">{fmt(b.epsilon_spent)}</td>'
            f'<td class="num" data-field="epsilon_remaining">{fmt(b.epsilon_remaining)}</td>'
            f"<td>{_bar(b.epsilon_spent, b.epsilon_cap)}</td>"
            f'<td class="num">{fmt(b.delta_spent)} / {fmt(b.delta_cap)}</td></tr>'
        )
    empty = '<tr><td colspan="7" class="empty">No participants enrolled yet.</td></tr>'
    return "".join(rows) or empty, active, len(rows), total


def _study_rows(session: Session) -> tuple[str, int]:
    rows = []
    query = select(Study, Aggregate).join(Aggregate).order_by(Study.id)
    for study, aggregate in session.execute(query):
        cost = study_config(study).release_cost()
        sid = escape(study.id)
        rows.append(
            f'<tr data-study="{sid}"><td>{sid}</td><td class="num">{study.config_version}</td>'
            f'<td class="num">{aggregate.version}</td>'
            f'<td class="num" data-field="contributors">{aggregate.contributors}</td>'
            f'<td class="num">{fmt(cost.epsilon)}</td></tr>'
        )
    empty = '<tr><td colspan="5" class="empty">No studies yet.</td></tr>'
    return "".join(rows) or empty, len(rows)


def _release_rows(session: Session) -> str:
    rows = []
    for entry, name in recent_charges(session, limit=25):
        cost = PrivacyBudget.from_units(entry.eps_units, entry.delta_units)
        rows.append(
            f"<tr><td>{entry.created_at:%Y-%m-%d %H:%M:%S}</td><td>{escape(name)}</td>"
            f"<td>{escape(entry.study_id)}</td><td>{escape(entry.kind)}</td>"
            f'<td class="num">{fmt(cost.epsilon)}</td><td class="num">{fmt(cost.delta)}</td>'
            f'<td class="num">#{entry.contribution_id}</td></tr>'
        )
    return "".join(rows) or '<tr><td colspan="7" class="empty">No releases yet.</td></tr>'


def dashboard_page(session: Session, key_id: str) -> str:
    """The whole dashboard: summary cards, budgets as bars, studies, recent releases."""
    participant_rows, n_active, n_participants, eps_total = _participant_rows(session)
    study_rows, n_studies = _study_rows(session)
    n_releases = session.scalar(select(func.count(Contribution.id))) or 0
    body = _template("dashboard.html").substitute(
        key_id=escape(key_id),
        now=f"{utcnow():%Y-%m-%d %H:%M:%S} UTC",
        n_participants=n_participants,
        n_active=n_active,
        n_studies=n_studies,
        n_releases=n_releases,
        eps_total=fmt(eps_total),
        participant_rows=participant_rows,
        study_rows=study_rows,
        release_rows=_release_rows(session),
    )
    return page("Privacy budget", body + rounds_section(session))


__all__ = ["dashboard_page", "login_page"]
