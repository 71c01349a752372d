"""The dashboard's table of secure aggregation rounds (one row per attempt)."""

from __future__ import annotations

from html import escape

from sqlalchemy.orm import Session

from coordinator.services.secagg.rounds import list_rounds
from coordinator.services.secagg.views import round_public


def rounds_section(session: Session) -> str:
    """``<section>`` listing every round attempt: mode, status, cohort, masked, survivors,
    recovered by (members that sent shares in the recover phase)."""
    rows = []
    for rnd in list_rounds(session):
        r = round_public(session, rnd)
        sid = escape(r.study_id)
        rows.append(
            f'<tr data-round="{sid}/{r.round}/{r.attempt}"><td>{sid}</td>'
            f'<td class="num">{r.round}</td><td class="num">{r.attempt}</td>'
            f"<td>{escape(r.mode)}</td><td>{escape(r.status)}</td>"
            f'<td class="num" data-field="cohort">{r.cohort}</td>'
            f'<td class="num" data-field="masked">{r.masked}</td>'
            f'<td class="num" data-field="survivors">{r.survivors}</td>'
            f'<td class="num" data-field="recovered_by">{r.recovered_by}</td>'
            f"<td>{escape(r.detail or '')}</td></tr>"
        )
    body = "".join(rows) or (
        '<tr><td colspan="10" class="empty">No secure aggregation rounds yet.</td></tr>'
    )
    return (
        '<section><h2>Secure aggregation rounds</h2><div class="scroll"><table id="rounds">'
        "<thead><tr>"
        "<th>Study</th><th>Round</th><th>Attempt</th><th>Mode</th><th>Status</th>"
        "<th>Cohort</th><th>Masked</th><th>Survivors</th>"
        "<th title=\"members whose shares rebuilt the seeds of members lost after masking\">"
        "Recovered by</th><th>Detail</th></tr></thead>"
        f"<tbody>{body}</tbody></table></div></section>"
    )
