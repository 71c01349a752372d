"""Streaming mode engine: score each arriving record, ask for labels, release noisy gradients.

Ghassemi, Sarwate & Wright (AISec 2016) as set out in ``docs/ONLINE.md``: each record is mapped
into the ball of radius ``M`` with the study's public bounds (:func:`common.online.params.to_ball`),
scored (margin against the current global weights, plus the LSH/grid models when the study
has them), a private query rule decides whether the reviewer labels it, labelled records'
hinge gradients fill a mini-batch, and a full batch is released once with OpenDP Gaussian
noise to the coordinator, which steps and serves the new weights.

Privacy order (each step durable before the next, :mod:`participant.stream_store`): the epoch
charge is reserved in the participant ledger (cap checked) *before* the epoch's first query
decision; a cap that refuses it stops the stream (:class:`StreamCapReached`) before any
decision or noise of that epoch. A batch's noise is drawn once and its body stored before it
is sent; retries re-send the same bytes.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.budget import PrivacyBudget
from common.config import StudyConfig
from common.errors import BudgetExceeded
from common.online.learner import hinge_gradient
from common.online.params import OnlineParams, to_ball
from common.online.query import bernoulli
from common.online.wire import OnlineGradientCreate, decode_vector, encode_vector
from participant.client import CoordinatorClient
from participant.ledger import Ledger
from participant.stream_store import StreamStore

Vector = NDArray[np.float64]


class StreamCapReached(BudgetExceeded):
    """The next epoch's charge does not fit a cap: the stream stopped before drawing."""


def _budget(value: object, default: PrivacyBudget | None = None) -> PrivacyBudget:
    if isinstance(value, PrivacyBudget):
        return value
    return default or PrivacyBudget.zero()


@dataclass(frozen=True)
class Scored:
    """One scored record, as written to the score output."""

    record_id: str
    scores: dict[str, float]
    queried: bool


class Streamer:
    """One study's stream; the caller holds the state lock and closes ``store``."""

    def __init__(self, config: StudyConfig, config_digest: str, store: StreamStore,
                 ledger: Ledger, client: CoordinatorClient, cap: PrivacyBudget,
                 detectors: dict[str, Any]) -> None:
        if config.online is None:
            raise ValueError(f"study {config.study_id} has no online section: it does not "
                             "stream (ask the coordinator's operator for one)")
        self.config, self.digest, self.store = config, config_digest, store
        self.params: OnlineParams = config.online
        self.ledger, self.client, self.cap, self.detectors = ledger, client, cap, detectors
        self.rule, self.noise = self.params.rule(), self.params.noise()
        self.lo, self.hi = np.asarray(config.lo), np.asarray(config.hi)
        self.stream_id = store.stream_id()

    def resume(self) -> None:
        """After a restart: send stored releases, use kept labels of awaiting records, release
        a batch that was full, and pick up the newest weights."""
        self.send_stored()
        for record_id, label in self.store.parked_for_awaiting():
            self.label(record_id, label)
        self.maybe_release()  # a batch filled just before a kill
        self.refresh_weights()

    # --- per record ---------------------------------------------------------------------
    def consume(self, record_id: str, x: NDArray[np.floating]) -> Scored | None:
        """Score and decide one record; None if it was consumed before (a restart)."""
        if self.store.seen(record_id):
            return None
        self._open_epoch(self.store.num("seq") // self.params.epoch_records)
        z = to_ball(np.asarray(x, dtype=np.float64)[None, :], self.lo, self.hi,
                    self.params.radius_x)[0]
        w, _ = self.store.weights("average" if self.params.average else "weights")
        margin = float(w @ z)
        scores = {"online": margin}
        row = np.asarray(x, dtype=np.float64)[None, :]
        for name, det in self.detectors.items():
            scores[name] = float(det.decision_function(row)[0])
        queried = bernoulli(self.rule.probability(margin))
        self.store.decide(record_id, queried, z, scores,
                          records_scheme=self.params.scheme == "records")
        if queried and (label := self.store.parked_label(record_id)) is not None:
            self.label(record_id, label)
        self.maybe_release()
        return Scored(record_id, scores, queried)

    def label(self, record_id: str, label: int) -> bool:
        """Use a reviewer's label (+1 outlier, -1 inlier) if its record awaits one."""
        z = self.store.awaiting(record_id)
        if z is None:
            if not self.store.seen(record_id):
                self.store.park_label(record_id, label)
            return False
        w, _ = self.store.weights()
        self.store.use_label(record_id, label, hinge_gradient(w, z, label))
        self.maybe_release()
        return True

    # --- epochs, batches, releases ------------------------------------------------------
    def _open_epoch(self, epoch: int) -> None:
        if epoch <= int(self.store.get("epoch", -1)):
            return
        key = f"stream-{self.stream_id}-e{epoch}"
        charged = self.ledger.entries(study=self.config.study_id)
        if not any(e.idempotency_key == key for e in charged):
            self._charge(epoch, key)  # else: charged before a kill, not yet recorded here
        self.store.open_epoch(epoch)

    def _charge(self, epoch: int, key: str) -> None:
        """Reserve the epoch in the local ledger, after checking both caps."""
        cost = self.params.epoch_cost()
        unclaimed = self.store.num("epochs_unclaimed") + 1
        there = self.client.budget()
        owed = PrivacyBudget.from_units(*(u * unclaimed for u in cost.to_units()))
        try:
            if not owed.fits_within(there.remaining):
                raise BudgetExceeded(
                    f"the coordinator's ledger has {there.remaining} left of your cap there",
                    spent=there.spent, asked=owed, cap=there.cap)
            self.ledger.reserve(idempotency_key=key, study=self.config.study_id,
                                config_version=self.config.version, config_digest=self.digest,
                                cost=cost, cap=self.cap)
        except BudgetExceeded as exc:
            raise StreamCapReached(
                f"privacy cap reached: epoch {epoch} of this stream (records from "
                f"{epoch * self.params.epoch_records} on) costs {cost} and does not fit "
                f"({exc}). The stream stopped before deciding or noising any record of it; "
                "its position is kept.", spent=_budget(exc.context.get("spent")),
                asked=cost, cap=_budget(exc.context.get("cap"), self.cap)) from exc
        self.ledger.mark(key, "acknowledged",
                         detail=f"stream epoch {epoch}: charged once for its records")

    def maybe_release(self) -> None:
        """Close the batch when full: release it (noise drawn here, once) and send it."""
        total, count = self.store.pending()
        full = (self.store.num("since_update") if self.params.scheme == "records" else count)
        if full < self.params.batch:
            return
        if count == 0:
            self.store.reset_batch()
            return
        epochs = self.store.num("epochs_unclaimed")
        eps, delta = self.params.epoch_cost().to_units()
        cost = PrivacyBudget.from_units(eps * epochs, delta * epochs)
        self.store.durable()  # the labels in this batch are spent before noise is drawn
        key = secrets.token_urlsafe(24)
        body = OnlineGradientCreate(
            idempotency_key=key, config_version=self.config.version,
            config_digest=self.digest, weights_version=self.store.weights()[1], count=count,
            noisy_sum=encode_vector(self.noise.release(total)), epochs=epochs,
            epsilon=cost.epsilon, delta=cost.delta)
        self.store.store_release(key, body.model_dump_json())
        self.send_stored()

    def send_stored(self) -> int:
        """Send every stored release (same bytes on every retry), then refresh the weights."""
        sent = 0
        for key, body in self.store.stored_releases():
            self.client.request("POST", f"/v1/studies/{self.config.study_id}/online/gradients",
                                content=body.encode())
            self.store.acknowledge(key)
            sent += 1
        if sent:
            self.refresh_weights()
        return sent

    def refresh_weights(self) -> None:
        """Pick up the coordinator's newest online weights."""
        doc = json.loads(self.client.request(
            "GET", f"/v1/studies/{self.config.study_id}/online/model").text)
        if int(doc["version"]) > self.store.weights()[1]:
            self.store.set_weights(decode_vector(doc["weights"], self.params.dim),
                                   decode_vector(doc["average"], self.params.dim),
                                   int(doc["version"]))
