"""Streaming mode engine: score each arriving record, ask for labels, release on the schedule.

As set out in ``docs/ONLINE.md`` (DP-FTRL by default, FLMB as the baseline): each record is
mapped into the ball of ``M`` with the study's public bounds (:func:`common.online.params.to_ball`),
scored (margin against the current global weights, plus the LSH/grid models when the study
has them), and a private query rule decides whether the reviewer labels it.

Learning follows the signed config's public schedule: calendar windows of ``window_slots``
slots. A window's charge is reserved in the participant ledger (both caps checked) *before* its
first query decision (:mod:`participant.online.charge`); a cap that refuses it stops the stream
(``StreamCapReached``) before any decision or noise of that window. When the window ends (the
injectable clock says so), its unused slots are padded with empty records and exactly one
release is made: the window's queried slots as one batch
(:func:`common.online.schedule.window_batch`): DP-FTRL adds it as a leaf of this member's tree
and releases the prefix increment (tree kept in the store), FLMB noises it once; stored, then
sent; retries re-send the same bytes. Records beyond the window's slots are scored with the
current models and never learnt from. A window in which no record arrived is charged and
released like any other: skipping it would reveal it.

Centring (the config's ``centre_window``, docs/ONLINE.md): in that window no record is queried
and no label asked; its single release is the noisy sum of its used slots' records (unused
slots are empty records) through the same path (charge before the window, noise drawn once at
its end, stored, re-sent byte for byte). Once the coordinator serves a centre, every record is
centred on it before scoring, querying and its gradient (``OnlineParams.rows``); before that
records are used uncentred.
Windows before the centring window are outside the schedule: records are scored only, nothing
is charged or released.

**A centre that is already fixed** (the coordinator has stepped) when the centring window
opens: the window is skipped (nothing charged, kept, queried or released; a decision on the
coordinator's state only). A late centring release is charged there as here and not added;
an older coordinator's 409 ("the centre is fixed") marks it refused, never re-sent.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from common.budget import PrivacyBudget
from common.errors import ConfigError
from common.online.factor import prefix_sums
from common.online.params import OnlineParams, to_ball
from common.online.query import bernoulli
from common.online.schedule import centre_batch, window_batch
from common.online.wire import CENTRE_FIXED, OnlineGradientCreate, decode_vector, encode_vector
from common.study.config import StudyConfig
from participant.client import CoordinatorClient, CoordinatorRefused
from participant.online.charge import StreamConfigChanged, reserve_window
from participant.online.notes import window_key
from participant.online.store import StreamStore
from participant.release.flow import Charge
from participant.release.ledger import Ledger

__all__ = ["Scored", "Streamer"]

Vector = NDArray[np.float64]
Refetch = Callable[[], tuple[StudyConfig, str]]


@dataclass(frozen=True)
class Scored:
    """One scored record, as written to the score output."""

    record_id: str
    scores: dict[str, float]
    queried: bool


class Streamer:
    """One study's stream; the caller holds the state lock and closes ``store``.

    ``now`` returns the current schedule window (wall clock, or ticks in tests and replays);
    ``refetch`` fetches and verifies the newest signed config (after a 409 on a release)."""

    def __init__(self, config: StudyConfig, config_digest: str, store: StreamStore,
                 ledger: Ledger, client: CoordinatorClient, cap: PrivacyBudget,
                 detectors: dict[str, Any], now: Callable[[], int],
                 refetch: Refetch | None = None) -> None:
        if config.online is None:
            raise ValueError(f"study {config.study_id} has no online section: it does not "
                             "stream (ask the coordinator's operator for one)")
        self.config, self.digest, self.store = config, config_digest, store
        self.params: OnlineParams = config.online
        self.ledger, self.client, self.cap, self.detectors = ledger, client, cap, detectors
        self.now, self.refetch = now, refetch
        self.rule, self.noise = self.params.rule(), self.params.noise()
        self.centre_noise = self.params.centre_noise()
        self.cost = self.params.epoch_cost()  # each window's charge and its release's claim
        self.lo, self.hi = np.asarray(config.lo), np.asarray(config.hi)
        self.stream_id = store.stream_id()

    def resume(self) -> None:
        """After a restart: send stored releases, use kept labels of awaiting records, pick up
        the newest weights, then close every window that ended meanwhile."""
        if self.params.algorithm == "ftrl":
            self._prefix()  # a stored state of another mechanism stops it before anything
        self.send_stored()
        for record_id, label in self.store.parked_for_awaiting():
            self.label(record_id, label)
        self.refresh_weights()
        self.advance()

    # --- per record ---------------------------------------------------------------------
    def consume(self, record_id: str, x: NDArray[np.floating]) -> Scored | None:
        """Score and decide one record; None if it was consumed before (a restart)."""
        if self.store.seen(record_id):
            return None
        self.advance()
        window, _, used = self.store.window()
        row = np.asarray(x, dtype=np.float64)[None, :]
        z = to_ball(row, self.lo, self.hi, self.params.radius_x)
        centre = None if self.params.centre_window is None else self.store.centre()
        feats = self.params.rows(z, centre)[0]
        w, _ = self.store.weights("average" if self.params.average else "weights")
        margin = float(w @ feats)
        scores = {"online": margin}
        for name, det in self.detectors.items():
            scores[name] = float(det.decision_function(row)[0])
        open_slot = window >= 0 and used < self.params.window_slots
        slot = used if open_slot and not self.store.skipped(window) else None
        centring = slot is not None and self.params.is_centre(window)
        queried = slot is not None and not centring and bernoulli(self.rule.probability(margin))
        self.store.decide(record_id, queried, z[0] if centring else feats, scores, window, slot,
                          keep=centring)
        if queried and (label := self.store.parked_label(record_id)) is not None:
            self.label(record_id, label)
        return Scored(record_id, scores, queried)

    def label(self, record_id: str, label: int) -> bool:
        """Keep a reviewer's label (+1 outlier, -1 inlier) if its record awaits one."""
        if self.store.awaiting(record_id) is None:
            if not self.store.seen(record_id):
                self.store.park_label(record_id, label)
            return False
        self.store.use_label(record_id, label)
        return True

    # --- the schedule -------------------------------------------------------------------
    def advance(self) -> None:
        """Bring the stream to the clock's window: close every open window that has ended
        (padding, one release each) and open the next (its charge first)."""
        now = self.now()
        while True:
            window, closed, _ = self.store.window()
            if window < 0:
                if self.params.before_centre(now):
                    return  # the schedule starts with the centring window
                self._open(now)
            elif closed == window:
                self._open(window + 1)
            elif window < now:
                self._close(window)
            else:
                return

    def _open(self, window: int) -> None:
        key = window_key(self.stream_id, window)
        charged = self.ledger.entries(study=self.config.study_id)
        if not any(e.idempotency_key == key for e in charged):
            if self.params.is_centre(window) and self.refresh_weights() > 0:
                self.store.open_window(window, skipped=True)  # the centre is fixed already
                return
            self._charge(window, key)  # else: charged before a kill, not yet recorded here
        self.store.open_window(window)

    def _charge(self, window: int, key: str) -> None:
        """Reserve the window in the local ledger after checking both caps
        (:func:`participant.online.charge.reserve_window`)."""
        charge = Charge(key, self.config.study_id, self.config.version, self.digest,
                        self.cost, self.cap)
        reserve_window(charge, window, unsent=len(self.store.stored_releases()),
                       client=self.client, ledger=self.ledger)

    def _close(self, window: int) -> None:
        """The window ended: pad, form its one batch, noise it once, store it, send it."""
        if self.store.skipped(window):
            self.store.close_skipped(window)
            return
        _, _, used = self.store.window()
        w, version = self.store.weights()
        state: dict[str, str] = {}
        if self.params.is_centre(window):
            total, count = centre_batch(self.store.window_records(window), self.params.dim,
                                        self.params.window_slots, self.params.radius_x)
        else:
            total, count = window_batch(w, self.store.window_queried(window),
                                        self.params.window_slots - used, self.rule)
        self.store.durable()  # the window's decisions are final before noise is drawn
        if self.params.is_centre(window):
            noisy = self.centre_noise.release(total)
        elif self.params.algorithm == "ftrl":  # the window is a leaf of this member's tree
            tree = self._prefix()
            noisy = tree.increment(total)
            state["tree"] = tree.to_json()
        else:
            noisy = self.noise.release(total)
        key = secrets.token_urlsafe(24)
        body = OnlineGradientCreate(
            idempotency_key=key, config_version=self.config.version,
            config_digest=self.digest, weights_version=version, window=window, count=count,
            noisy_sum=encode_vector(noisy), epsilon=self.cost.epsilon, delta=self.cost.delta)
        self.store.close_window(window, key, body.model_dump_json(), **state)
        self.ledger.mark(window_key(self.stream_id, window), "kept", detail=f"stream window "
                         f"{window}: charged once for its slots, closed, its release stored")
        self.send_stored()

    def _prefix(self) -> Any:
        """This member's prefix sums, restored from the stream file (ConfigError, exit 4, if
        they were made by another mechanism or size than the config's)."""
        try:
            return prefix_sums(self.params.prefix, self.params.dim, self.params.block,
                               self.noise, self.store.get("tree"))
        except ValueError as exc:
            raise ConfigError(f"{exc}. Move this study's stream.sqlite3 aside to start a new "
                              "stream, or have the study re-signed with the stream's old "
                              "prefix and sizes (e.g. prefix: tree)") from exc

    # --- sending ------------------------------------------------------------------------
    def send_stored(self) -> int:
        """Send every stored release (same noisy bytes on every retry), then refresh the
        weights; returns how many the coordinator answered. A release refused for a stale
        config is re-wrapped under the new one when the online section is unchanged;
        otherwise the stream stops. A centring release refused because the centre is fixed
        is marked refused and never re-sent."""
        answered = 0
        for key, body in self.store.stored_releases():
            answered += 1
            try:
                try:
                    self._post(body)
                except CoordinatorRefused as exc:
                    if exc.status != 409 or exc.is_budget or "config" not in exc.detail:
                        raise
                    self._post(self._rewrap(key, body, exc))
            except CoordinatorRefused as exc:
                if exc.status == 409 and CENTRE_FIXED in exc.detail:
                    self.store.refuse(key)  # also after a re-wrap under a new config
                    continue
                raise
            self.store.acknowledge(key)
        if answered:
            self.refresh_weights()
        return answered

    def _post(self, body: str) -> None:
        self.client.post_online_gradient(self.config.study_id, body.encode())

    def _rewrap(self, key: str, body: str, exc: CoordinatorRefused) -> str:
        """The same noisy release (same key, sum, count, window, claim) under the newest
        config, when its online section is the one the release was made under."""
        if self.refetch is None:
            raise exc
        config, digest = self.refetch()
        if config.online != self.params:
            raise StreamConfigChanged(
                f"study {config.study_id}: the coordinator re-signed the config as version "
                f"{config.version} with a different online section; this stream's stored "
                f"releases and open window were made under version {self.config.version} and "
                "cannot continue under it. Move studies/<study>/stream.sqlite3 aside to start "
                "a new stream (its charges stay in your ledger).",
                old_version=self.config.version, new_version=config.version) from exc
        self.config, self.digest = config, digest
        doc = json.loads(body) | {"config_version": config.version, "config_digest": digest}
        new = OnlineGradientCreate.model_validate(doc).model_dump_json()
        self.store.replace_release(key, new)
        return new

    def refresh_weights(self) -> int:
        """Pick up the coordinator's newest online weights and centre; return the served
        model's version (its number of steps)."""
        doc = self.client.get_online_model(self.config.study_id)
        if self.params.centre_window is not None and doc.get("centre") is not None:
            self.store.set_centre(decode_vector(doc["centre"], self.params.dim))
        if int(doc["version"]) > self.store.weights()[1]:
            self.store.set_weights(decode_vector(doc["weights"], self.params.dim),
                                   decode_vector(doc["average"], self.params.dim),
                                   int(doc["version"]))
        return int(doc["version"])
