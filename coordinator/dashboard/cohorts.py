"""The dashboard's cohorts page of a study: rounds, contributors and the released cohorts."""

from __future__ import annotations

from html import escape

from sqlalchemy.orm import Session

from common.budget import plain_decimal as fmt
from common.cohorts.marks import CentreMark
from common.cohorts.model import CohortModel
from common.errors import NotFound
from coordinator.dashboard.pages import _header, _table, page
from coordinator.db.tables import Study
from coordinator.services import cohorts, cohorts_views


def _round_rows(session: Session, study_id: str) -> list[str]:
    rows = []
    for rnd in cohorts_views.rounds_of(session, study_id):
        sent = cohorts.senders(session, study_id, rnd.number)
        waiting = sorted(set(cohorts.expected(rnd)) - set(sent))
        rows.append(
            f'<tr data-round="{rnd.number}"><td class="num">{rnd.number}</td>'
            f"<td>{escape(rnd.status)}</td>"
            f'<td class="num" data-field="expected">{len(cohorts.expected(rnd))}</td>'
            f'<td class="num" data-field="sent">{len(sent)}</td>'
            f"<td>{escape(', '.join(waiting) or '-')}</td>"
            f"<td>{escape(rnd.detail or '')}</td></tr>")
    return rows


def _cohort_rows(model: CohortModel, names: list[str], marks: tuple[CentreMark, ...]) -> list[str]:
    rows = []
    for i in sorted(range(model.k), key=lambda c: -float(model.masses[c])):
        centre = ", ".join(f"{escape(n)} {v:.4g}"
                           for n, v in zip(names, model.centroids[i], strict=True))
        rule = escape(model.describe(i, names)) if model.rules else "nearest centre"
        flags = " ".join(marks[i].flags)
        note = (f'<br><span class="marked" data-marks="{flags}">{escape(marks[i].describe())}'
                "</span>" if flags else "")
        rows.append(f'<tr data-cohort="{i}" data-marks="{flags}"><td class="num">{i}</td>'
                    f'<td class="num" data-field="size">{float(model.masses[i]):.0f}</td>'
                    f"<td>{centre}{note}</td><td>{rule}</td></tr>")
    return rows


def cohorts_page(session: Session, key_id: str, study_id: str) -> str:
    """Method and budget split, one row per round (expected, sent, waiting for), and the
    released cohorts (noisy sizes, centres in feature units) once the run is done."""
    study = session.get(Study, study_id)
    if study is None:
        raise NotFound(f"no study {study_id!r}")
    config, params, protocol = cohorts.cohort_setup(study)
    result = cohorts_views.result_of(session, study_id)
    rounds = _round_rows(session, study_id)
    last = cohorts_views.rounds_of(session, study_id)[-1] if rounds else None
    status = ("done" if result else "not started" if last is None
              else "failed (the last round says why)" if last.status == "failed"
              else f"round {len(rounds)} open")
    first = protocol.cost(protocol.start()).epsilon
    facts = (f"<p>{escape(params.describe())} (at most {protocol.rounds} rounds); each "
             f"participant spends at most ε "
             f"{fmt(params.epsilon)} in all ({fmt(first)} in round 1). "
             f'Status: <b id="cohort-status">{escape(status)}</b>.</p>')
    names = [f.name for f in config.features]
    if result:
        model = CohortModel.from_json(result.model)
        public = cohorts_views.cohorts_public(session, study)
        marks = tuple(CentreMark.from_flags(f) for f in public.marks or [[]] * model.k)
        table = _table("cohorts", ["#Cohort", "#Size (noisy)", "Centre", "Rule"],
                       _cohort_rows(model, names, marks), "")
        table += ('<p class="muted note">A cohort marked "not a finding" was set by the noise, '
                  "not by the records: its noisy size is within 2 standard deviations of the "
                  "public count noise, its centre never moved from its public start, or it sits "
                  "on a corner of the study's box (docs/COHORTS.md).</p>")
    else:
        table = '<p class="empty">No cohort model released yet.</p>'

    body = (_header(f"study {study_id} · cohorts", key_id, back=True)
            + f"<main><section>{facts}</section><section><h2>Rounds</h2>"
            + _table("cohort-rounds", ["#Round", "Status", "#Expected", "#Sent",
                                       "Waiting for", "Detail"], rounds,
                     "The admin has not started the cohort rounds.")
            + f"</section><section><h2>Released cohorts</h2>{table}</section></main>")
    return page(f"Study {study_id} cohorts", body)
