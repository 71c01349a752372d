"""Server-rendered HTML for the admin dashboard (no JavaScript, no external assets).

Three pages: the overview (budgets, near-cap warnings, ε over time per participant and per
study, refused attempts, recent releases), one page per participant and one per study, each
with its itemised charges. Every number comes from the ledger tables.
"""

from __future__ import annotations

from decimal import Decimal
from functools import cache
from html import escape
from pathlib import Path
from string import Template
from urllib.parse import quote

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from common.budget import plain_decimal as fmt
from common.errors import NotFound
from common.wire.schemas import BudgetPublic, LedgerEntryPublic
from coordinator.dashboard.charts import cumulative_series, peak_series, step_chart
from coordinator.dashboard.figures import (
    contributors_text,
    cost_html,
    cost_items,
    revoked_contributors,
    spread,
    study_kind,
)
from coordinator.dashboard.secagg import rounds_section
from coordinator.db.tables import Aggregate, Contribution, LedgerEntry, Participant, Study, utcnow
from coordinator.ledger.refusals import refused_attempts
from coordinator.ledger.views import all_budgets, budget_of, entry_public
from coordinator.services.studies import study_config

TEMPLATES = Path(__file__).parents[1] / "templates"


@cache
def _template(name: str) -> Template:
    return Template((TEMPLATES / name).read_text())


def page(title: str, body: str) -> str:
    return _template("base.html").substitute(title=escape(title), body=body)


def login_page(error: str | None = None) -> str:
    message = f'<p class="error" role="alert">{escape(error)}</p>' if error else ""
    return page("Sign in", _template("login.html").substitute(error=message))


def _share(spent: Decimal, cap: Decimal) -> Decimal:
    return Decimal(1) if cap == 0 else min(spent / cap, Decimal(1))


def _bar(spent: Decimal, cap: Decimal, warn: Decimal) -> str:
    share = _share(spent, cap) * 100
    level = "bad" if share >= 100 else "warn" if share >= warn * 100 else ""
    return (
        f'<div class="bar" title="{share:.0f}% of cap"><div class="fill {level}" '
        f'style="width:{share:.1f}%"></div></div><span class="muted"> {share:.0f}%</span>'
    )


def _table(table_id: str, head: list[str], rows: list[str], empty: str) -> str:
    cells = "".join(f'<th class="num">{h[1:]}</th>' if h.startswith("#") else f"<th>{h}</th>"
                    for h in head)
    body = "".join(rows) or f'<tr><td colspan="{len(head)}" class="empty">{empty}</td></tr>'
    return (f'<div class="scroll"><table id="{table_id}"><thead><tr>{cells}</tr></thead>'
            f"<tbody>{body}</tbody></table></div>")


def _link(kind: str, name: str) -> str:
    return f'<a href="/admin/{kind}/{quote(name, safe="")}">{escape(name)}</a>'


def _near_cap(budgets: list[BudgetPublic], warn: Decimal) -> str:
    near = [b for b in budgets if _share(b.epsilon_spent, b.epsilon_cap) >= warn]
    if not near:
        return ""
    items = ", ".join(
        f'<span data-near-cap="{escape(b.participant)}">{_link("participants", b.participant)} '
        f"({fmt(b.epsilon_spent)} of {fmt(b.epsilon_cap)})</span>" for b in near
    )
    return (f'<div class="alert" id="near-cap" role="alert"><strong>Near the cap</strong> '
            f"(≥ {fmt(warn * 100)}% of ε spent): {items}</div>")


def _participant_rows(budgets: list[BudgetPublic], warn: Decimal) -> list[str]:
    rows = []
    for b in budgets:
        name = escape(b.participant)
        status = '<span class="pill">active</span>' if b.active else (
            '<span class="pill off">revoked</span>')
        rows.append(
            f'<tr data-participant="{name}"><td>{_link("participants", b.participant)}</td>'
            f"<td>{status}</td>"
            f'<td class="num" data-field="epsilon_cap">{fmt(b.epsilon_cap)}</td>'
            f'<td class="num" data-field="epsilon_spent">{fmt(b.epsilon_spent)}</td>'
            f'<td class="num" data-field="epsilon_remaining">{fmt(b.epsilon_remaining)}</td>'
            f'<td class="used">{_bar(b.epsilon_spent, b.epsilon_cap, warn)}</td>'
            f'<td class="num">{fmt(b.delta_spent)} / {fmt(b.delta_cap)}</td></tr>'
        )
    return rows


def _study_rows(session: Session) -> list[str]:
    rows = []
    for study, aggregate in session.execute(select(Study, Aggregate).join(Aggregate)
                                            .order_by(Study.id)):
        config = study_config(study)
        revoked = min(revoked_contributors(session, study.id), aggregate.contributors)
        note = f' <span class="muted">({revoked} revoked)</span>' if revoked else ""
        rows.append(
            f'<tr data-study="{escape(study.id)}"><td>{_link("studies", study.id)}</td>'
            f'<td data-field="kind">{escape(study_kind(config))}</td>'
            f'<td class="cost" data-field="cost">{cost_html(config)}</td>'
            f'<td class="num"><span data-field="contributors">{aggregate.contributors}</span>'
            f'{note}</td><td class="num">{study.config_version}</td>'
            f'<td class="num">{aggregate.version}</td></tr>'
        )
    return rows


Charge = tuple[LedgerEntryPublic, str]
"""One ledger entry and the name of the participant charged."""


def _charges_of(budgets: list[BudgetPublic]) -> list[Charge]:
    """The itemised charges the budgets already carry, newest first."""
    charges = [(e, b.participant) for b in budgets for e in b.entries]
    return sorted(charges, key=lambda c: (c[0].created_at, c[0].contribution_id, c[0].kind),
                  reverse=True)


def _study_charges(session: Session, study_id: str) -> list[Charge]:
    """Every charge for one study, newest first."""
    query = (select(LedgerEntry, Participant.name)
             .join(Participant, Participant.id == LedgerEntry.participant_id)
             .where(LedgerEntry.study_id == study_id).order_by(LedgerEntry.id.desc()))
    return [(entry_public(entry), name) for entry, name in session.execute(query)]


def _charge_rows(charges: list[Charge]) -> list[str]:
    return [
        f"<tr><td>{entry.created_at:%Y-%m-%d %H:%M:%S}</td>"
        f'<td>{_link("participants", name)}</td><td>{_link("studies", entry.study_id)}</td>'
        f'<td>{escape(entry.kind)}</td><td class="num">{fmt(entry.epsilon)}</td>'
        f'<td class="num">{fmt(entry.delta)}</td><td class="num">#{entry.contribution_id}</td>'
        "</tr>"
        for entry, name in charges
    ]


def _charges_table(charges: list[Charge], table_id: str = "releases") -> str:
    head = ["Time (UTC)", "Participant", "Study", "Kind", "#ε", "#δ", "#Contribution"]
    return _table(table_id, head, _charge_rows(charges), "No releases yet.")


def _refusals_table(session: Session, **where: object) -> str:
    rows = []
    for r, name in refused_attempts(session, **where):  # type: ignore[arg-type]
        asked = PrivacyBudget.from_units(r.eps_units, r.delta_units)
        rows.append(
            f"<tr><td>{r.created_at:%Y-%m-%d %H:%M:%S}</td>"
            f'<td>{_link("participants", name)}</td><td>{_link("studies", r.study_id)}</td>'
            f'<td class="num">{fmt(asked.epsilon)}</td><td>{escape(r.reason)}</td></tr>'
        )
    head = ["Time (UTC)", "Participant", "Study", "#ε asked", "Reason"]
    return _table("refused", head, rows, "No refused attempts.")


ALL_STUDIES = "all studies"
"""The participant page's panel of its total over every study: the figure its cap bounds."""


def _chart(charges: list[Charge], *, by: str, title: str, cap: Decimal | None = None) -> str:
    rows = [(name if by == "participant" else entry.study_id, entry.created_at, entry.epsilon)
            for entry, name in charges]
    if cap is None:
        return step_chart(cumulative_series(rows), title=title)
    total = cumulative_series((ALL_STUDIES, t, eps) for _, t, eps in rows)
    return step_chart(total + cumulative_series(rows), title=title, cap=cap, capped=ALL_STUDIES)


def _header(title: str, key_id: str, back: bool) -> str:
    nav = '<a class="back" href="/admin">← overview</a>' if back else ""
    return _template("header.html").substitute(
        title=escape(title), key_id=escape(key_id), now=f"{utcnow():%Y-%m-%d %H:%M:%S} UTC",
        nav=nav)


def dashboard_page(session: Session, key_id: str, warn: Decimal = Decimal("0.8")) -> str:
    """The overview: cards, near-cap warnings, budgets, charts, studies, refusals, releases."""
    budgets = all_budgets(session)
    charges = _charges_of(budgets)
    head = ["Participant", "Status", "#ε cap", "#ε spent", "#ε remaining", "Used", "#δ spent / cap"]
    body = _template("dashboard.html").substitute(
        header=_header("fedod · privacy budget", key_id, back=False),
        near_cap=_near_cap(budgets, warn),
        n_participants=len(budgets), n_active=sum(b.active for b in budgets),
        n_studies=session.scalar(select(func.count(Study.id))) or 0,
        n_releases=session.scalar(select(func.count(Contribution.id))) or 0,
        eps_max=fmt(spread([b.epsilon_spent for b in budgets])[0]),
        eps_median=fmt(spread([b.epsilon_spent for b in budgets])[1]),
        participants=_table("participants", head, _participant_rows(budgets, warn),
                            "No participants enrolled yet."),
        chart_participants=_chart(charges, by="participant",
                                  title="ε spent over time, per participant"),
        chart_studies=step_chart(
            peak_series((e.study_id, name, e.created_at, e.epsilon) for e, name in charges),
            title="Highest ε one participant has spent, per study"),
        studies=_table("studies", ["Study", "Kind", "What a participant pays",
                                   "#Contributors", "#Config version", "#Model version"],
                       _study_rows(session), "No studies yet."),
        refused=_refusals_table(session),
        releases=_charges_table(charges[:25]),
        rounds=rounds_section(session),
    )
    return page("Privacy budget", body)


def participant_page(session: Session, key_id: str, name: str,
                     warn: Decimal = Decimal("0.8")) -> str:
    """One participant: cap, spent, ε over time against the cap, charges, refusals."""
    participant = session.scalar(select(Participant).where(Participant.name == name))
    if participant is None:
        raise NotFound(f"no participant named {name!r}")
    b = budget_of(session, participant)
    charges = _charges_of([b])
    facts = (f'<p>ε spent <b id="p-spent">{fmt(b.epsilon_spent)}</b> of cap '
             f'<b id="p-cap">{fmt(b.epsilon_cap)}</b> ({fmt(b.epsilon_remaining)} remaining); '
             f"δ {fmt(b.delta_spent)} of {fmt(b.delta_cap)}. "
             f"{_bar(b.epsilon_spent, b.epsilon_cap, warn)}</p>")
    body = _template("detail.html").substitute(
        header=_header(f"participant {name}", key_id, back=True),
        near_cap=_near_cap([b], warn), facts=facts,
        chart=_chart(charges, by="study", title=f"ε spent over time by {name}, per study",
                     cap=b.epsilon_cap),
        charges=_charges_table(charges), refused=_refusals_table(
            session, participant_id=participant.id))
    return page(f"Participant {name}", body)


def study_page(session: Session, key_id: str, study_id: str) -> str:
    """One study: config, contributors, ε over time per participant, charges, refusals."""
    study = session.get(Study, study_id)
    if study is None:
        raise NotFound(f"no study {study_id!r}")
    config = study_config(study)
    aggregate = session.get(Aggregate, study_id)
    charges = _study_charges(session, study_id)
    contributors = aggregate.contributors if aggregate else 0
    who = contributors_text(contributors, revoked_contributors(session, study_id))
    costs = "; ".join(text for _, text in cost_items(config))
    facts = (f"<p>{escape(study_kind(config))} study, config v{study.config_version}, "
             f"{len(config.features)} features, {config.lsh.n_tables} LSH tables, grid: "
             f"{config.grid_layout or 'none'}. Each participant pays {escape(costs)}. "
             f"Model v{aggregate.version if aggregate else 0} from "
             f'<b id="contributors">{escape(who)}</b>.</p>')
    if config.cohorts is not None:
        facts += (f'<p><a id="cohorts-link" href="/admin/studies/{quote(study_id, safe="")}'
                  f'/cohorts">Private cohorts ({escape(config.cohorts.method)})</a></p>')
    body = _template("detail.html").substitute(
        header=_header(f"study {study_id}", key_id, back=True), near_cap="", facts=facts,
        chart=_chart(charges, by="participant",
                     title=f"ε spent over time on {study_id}, per participant"),
        charges=_charges_table(charges), refused=_refusals_table(session, study_id=study_id))
    return page(f"Study {study_id}", body)


__all__ = ["dashboard_page", "login_page", "participant_page", "study_page"]
