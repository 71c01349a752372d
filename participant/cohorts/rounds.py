"""Take part in a study's private cohort rounds (``fedod-participant cohorts``).

Per round the order is fixed, each step durable before the next::

    verify config ─► checks that read no data (schema, columns, local cap and the
    coordinator's remaining budget for this round) ─► local ledger reserve (charged from
    here on) ─► exact vector over the local records for the round's public state ─► noisy
    vector drawn ONCE, stored (cohorts/round-<r>.json, 0600) ─► POST; a retry or a rerun
    re-sends the stored bytes

A round this participant's local cap cannot pay is refused before any noise is drawn. Once
the coordinator has released the model, the cohorts are printed from it alone (sizes,
centres in feature units, rule paths for the tree) and it is saved for ``score``.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Literal

import numpy as np

from common.budget import PrivacyBudget
from common.cohorts.mechanism import RoundMechanism
from common.cohorts.model import CohortModel
from common.cohorts.protocol import CohortState, RoundProtocol
from common.cohorts.study import protocol_of
from common.errors import BudgetExceeded, ConfigError, Conflict
from common.study.config import StudyConfig
from participant import layout
from participant.agent import Agent
from participant.client import CoordinatorClient
from participant.options import DataOptions
from participant.release import policy
from participant.release.flow import Charge, charged_release
from participant.scoring.cohorts import model_from_doc
from participant.state import Enrolment, write_private

Stop = Literal["drawn"] | None
log = logging.getLogger("fedod.participant")


def _setup(config: StudyConfig) -> RoundProtocol:
    if config.cohorts is None:
        raise ConfigError(f"study {config.study_id!r} has no cohorts section: no cohort rounds")
    return protocol_of(config)


def _exact(protocol: RoundProtocol, state: CohortState, source: Any,
           options: DataOptions) -> np.ndarray:
    """The exact vector (in process, or per partition on Dask); a malformed row is dropped
    and counted locally (:mod:`participant.data.reader`), a failure no row can cause gives zeros
    (the data must not decide whether a release goes out, as in ``contribute``)."""
    total = np.zeros(protocol.size(state), dtype=np.int64)
    try:
        if options.engine_kw():
            from participant.dask.cohorts import exact_vector

            total = exact_vector(source, protocol, state, **options.engine_kw())
        else:
            for chunk in source:
                total += protocol.exact(state, chunk.X)
        report = getattr(source, "report", None)
        if report is not None and (note := report.malformed_note()):
            log.warning("cohort round: %s", note)
    except Exception as exc:  # noqa: BLE001 - the release still goes out, noise only
        log.warning("cohort round: the data could not be used (%s: %s); a noise-only vector "
                    "goes out in its place (local only, not sent)", type(exc).__name__, exc)
        total[:] = 0
    return total


def _check_round(config: StudyConfig, protocol: RoundProtocol, state: CohortState,
                 spent: PrivacyBudget) -> RoundMechanism:
    """Refuse, before anything is read or drawn, a round the signed config does not allow:
    past the method's last round, a malformed public state, a round index or DPM level
    outside the public plan, or one that would take this study's cohort spending past the
    signed cohort budget (epsilon and, with Gaussian noise, the declared delta). Returns the
    round's mechanism: the one object that both noises the round and says its cost
    (:meth:`~common.cohorts.protocol.RoundProtocol.mechanism`)."""
    assert config.cohorts is not None
    number = state.done + 1
    try:
        if not 1 <= number <= protocol.rounds:
            raise ValueError(f"the method has at most {protocol.rounds} rounds")
        mechanism = protocol.mechanism(state)
        cost = mechanism.cost
        protocol.exact(state, np.empty((0, len(config.features))))
    except (KeyError, IndexError, TypeError, ValueError, ArithmeticError) as exc:
        raise ConfigError(f"the coordinator's cohort round {number} of {config.study_id!r} is "
                          f"not one the signed config allows ({exc}); nothing was drawn") from exc
    allowed = config.cohorts.cap()
    if not (spent + cost).fits_within(allowed):
        raise BudgetExceeded(
            f"cohort round {number} would take this study's cohort spending to "
            f"{spent + cost}, past the signed cohort epsilon {allowed.epsilon} (delta "
            f"{allowed.delta}); nothing was drawn",
            spent=spent, asked=cost, cap=allowed, source="signed cohort budget")
    return mechanism


def _draw(agent: Agent, config: StudyConfig, protocol: RoundProtocol, number: int,
          state: CohortState, source: Any, options: DataOptions, enrolment: Enrolment,
          path: Path, client: CoordinatorClient) -> None:
    """Reserve on the local ledger (refusing what the cap cannot pay), read, noise, store."""
    study, prefix = config.study_id, f"cohort-{config.study_id}-"
    key = f"{prefix}{number}"
    with agent.ledger() as ledger:
        earlier = [e for e in ledger.entries(study=study)
                   if e.idempotency_key.startswith(prefix) and e.idempotency_key != key]
        spent = sum((e.cost for e in earlier), PrivacyBudget.zero())
        mechanism = _check_round(config, protocol, state, spent)
        charge = Charge(key, study, config.version, "", mechanism.cost, enrolment.cap)
        policy.check_ceiling(charge.cost, enrolment.ceiling)
        known = ledger.entry(key)
        if known and known.status not in ("intended", "abandoned"):  # those never left
            raise ValueError(f"round {number} of {study!r} was drawn and charged, but its "
                             f"stored vector {path} is gone; it cannot be re-sent (restore "
                             "the state directory from a backup)")
        if not known:
            ledger.check(charge.cost, enrolment.cap)
            policy.check_coordinator_budget(client, charge.cost)

        def make() -> tuple[np.ndarray, str | None]:
            exact = _exact(protocol, state, source, options)  # zeros if the data is unusable
            if clipped := mechanism.clipped(exact):
                log.warning("cohort round %d: %d value(s) were clipped to the study's public "
                            "record bound (aggregation.max_records) before the noise (local "
                            "only, not sent)", number, clipped)
            return mechanism.release(exact), None

        def store(noisy: np.ndarray, _: str | None) -> None:
            body = {"idempotency_key": key, "config_version": config.version,
                    "epsilon": format(charge.cost.epsilon.normalize(), "f"),
                    "delta": format(charge.cost.delta.normalize(), "f"),
                    "values": [int(v) for v in noisy]}
            write_private(path, json.dumps(body, separators=(",", ":")).encode())

        charged_release(ledger, charge, make=make, store=store, status="kept",
                        detail=lambda _: f"cohort round {number}: noisy vector stored locally",
                        known=known)


def _refuse_failed(doc: dict[str, Any], study: str) -> None:
    """A run the coordinator ended ``failed`` (a round that could not be used and not be
    stepped over) releases no model: say why (exit 7) instead of waiting for one."""
    if doc["status"] == "failed":
        reason = (doc["history"] or [{}])[-1].get("detail")
        raise Conflict(f"the cohort run of {study!r} failed and released no model: {reason}")


def _owed(doc: dict[str, Any], name: str) -> int | None:
    """The open round's number if it expects ``name`` and has no release of it yet."""
    current = (doc["history"] or [{}])[-1]
    if doc.get("round") is None or name not in current.get("expected", []):
        return None
    return None if name in current.get("sent", []) else int(doc["round"])


def describe(model: CohortModel, names: list[str]) -> list[dict[str, Any]]:
    """The released cohorts, largest first: size, centre per feature, rule path."""
    order = sorted(range(model.k), key=lambda i: -float(model.masses[i]))
    return [{"cohort": i, "size": round(float(model.masses[i]), 1),
             "centre": {n: float(v) for n, v in zip(names, model.centroids[i], strict=True)},
             "rule": model.describe(i, names) if model.rules else None} for i in order]


def run_cohorts(agent: Agent, study: str, data: str | Path, options: DataOptions, *,
                approve_schema: bool = False, wait: float = 600.0, poll: float = 0.2,
                send_slot: float = policy.DEFAULT_SEND_SLOT,
                stop_after: Stop = None) -> dict[str, Any]:
    """Send every cohort round this participant owes, then return the released cohorts.

    A new vector goes out ``send_slot`` seconds after the round's state was read, however
    long reading the data took (``participant.release.policy.send_schedule``); a re-send goes
    at once.

    Each request keeps retrying a busy coordinator for up to ``wait`` seconds.

    ``stop_after="drawn"`` leaves right after a round's noisy vector was stored, before it
    is sent (a drill: the next run re-sends those bytes).
    """
    policy.send_schedule(0.0, send_slot, 0.0)  # validate before fetching anything
    options.engine_kw()  # an unknown engine is a usage error before anything is fetched
    enrolment = agent.state.load_enrolment()
    with agent.state.lock(), agent.client(patience=wait) as client:
        config, _ = agent.fetch_config(study, client)
        protocol = _setup(config)
        name = client.participant_name()
        folder = agent.state.study_dir(study) / layout.COHORTS
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        sent: list[int] = []
        give_up = time.monotonic() + wait
        while True:
            doc = client.get_cohorts(study)
            _refuse_failed(doc, study)
            model = model_from_doc(doc)
            if model is not None:
                write_private(agent.state.study_dir(study) / layout.COHORT_MODEL,
                              model.to_json().encode())
                names = [f.name for f in config.features]
                return {"study": study, "participant": name, "method": doc["method"],
                        "rounds": doc["rounds"], "sent": sent,
                        "cohorts": describe(model, names)}
            number = _owed(doc, name)
            if number is None:
                if time.monotonic() > give_up:
                    raise TimeoutError(f"no cohort round of {study!r} to send and no model "
                                       f"released within {wait} s (status: {doc['status']}); "
                                       "run the command again later")
                time.sleep(poll)
                continue
            path = layout.cohort_round(agent.state.study_dir(study), number)
            if not path.exists():
                anchor = agent.clock()
                # the study's release ceiling, checked as before every release kind; the
                # round's own cost is checked against it in _draw
                source = agent.checked_source(study, data, options, config, enrolment,
                                              approve_schema, config.release_cost())
                state = CohortState(number - 1, doc["state"])
                _draw(agent, config, protocol, number, state, source, options, enrolment, path,
                      client)
                if stop_after == "drawn":
                    return {"stopped_after": "drawn", "round": number}
                send_at, _ = policy.send_schedule(anchor, send_slot, agent.clock())
                if (pause := send_at - agent.clock()) > 0:
                    agent.sleep(pause)
            client.post_cohort_round(study, number, path.read_bytes())
            sent.append(number)
            give_up = time.monotonic() + wait  # the wait counts from the last progress
