"""The participant agent: the Python API behind ``fedod-participant``.

>>> agent = Agent("~/.fedod-participant")
>>> agent.enrol("https://coord", token, "sha256:...", epsilon_cap="3")   # doctest: +SKIP
>>> agent.contribute("study-1", "records.parquet", id_column="mrn")       # doctest: +SKIP
>>> agent.score("study-1", "records.parquet", "scores.parquet")           # doctest: +SKIP

Safety properties: the coordinator key is pinned at enrolment; every config is verified
against it (signature, expiry, no downgrade, LSH digest) before use; the local ledger and
cap, the per-release ceiling and the approved schema are consulted before any record is read;
once the data is read the release is charged and goes out (noise-only if the data failed), at
a send slot that does not depend on the data; a stored release is re-sent unchanged.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from common.budget import PrivacyBudget
from common.errors import ConfigError, SignatureInvalid
from common.noise.planning import config_noise_warning
from common.study.config import StudyConfig
from common.study.signing import SignedConfig, key_fingerprint, public_key_from_pem, verify_config
from participant.client import CoordinatorClient, check_coordinator_url
from participant.data.dataset import DatasetSource
from participant.data.reader import DataSource
from participant.options import DataOptions
from participant.release import policy
from participant.release.ledger import Ledger
from participant.state import (
    DEFAULT_MAX_RELEASE_DELTA,
    DEFAULT_MAX_RELEASE_EPSILON,
    Enrolment,
    StateDir,
    check_study_id,
    write_private,
)

log = logging.getLogger("fedod.participant")

__all__ = ["Agent", "DataOptions"]

if TYPE_CHECKING:  # imported lazily below: OpenDP (via common.histograms.release) is slow to import
    from participant.release.contribute import ContributeOutcome, SendResult
    from participant.scoring.score import ScoreSummary


class Agent:
    """One participant, bound to one state directory."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        event_hooks: dict[str, list[Callable[..., Any]]] | None = None,
        max_tries: int = 6,
        timeout: float = 30.0,
    ) -> None:
        self.state = StateDir(state_dir)
        self._warned: set[tuple[str, int]] = set()
        self.sleep, self.clock = sleep, clock
        self._client_kw: dict[str, Any] = dict(
            transport=transport, sleep=sleep, clock=clock, event_hooks=event_hooks,
            max_tries=max_tries, timeout=timeout,
        )

    def client(self, url: str | None = None, token: str | None = None, *,
               patience: float = 0.0) -> CoordinatorClient:
        """A client of the enrolled coordinator (or ``url``); ``patience``: seconds a request
        keeps retrying a busy or unreachable coordinator (participant.client_transport)."""
        if url is None:
            enrolment = self.state.load_enrolment()
            url, token = enrolment.coordinator_url, enrolment.token
        return CoordinatorClient(url, token, patience=patience, **self._client_kw)

    def ledger(self) -> Ledger:
        self.state.create()
        return Ledger(self.state.ledger_path)

    def enrol(
        self,
        coordinator_url: str,
        token: str,
        fingerprint: str,
        *,
        epsilon_cap: str,
        delta_cap: str = "0",
        max_release_epsilon: str | None = None,
        max_release_delta: str | None = None,
    ) -> Enrolment:
        """Fetch ``/v1/key``, check it against the pinned fingerprint, store everything.

        ``max_release_epsilon`` (default: 2, or the cap if smaller) and ``max_release_delta``
        (default: 1e-4) are the per-release ceiling.
        """
        cap = PrivacyBudget(epsilon_cap, delta_cap)
        ceiling = PrivacyBudget(max_release_epsilon or min(
            PrivacyBudget(DEFAULT_MAX_RELEASE_EPSILON).epsilon, cap.epsilon))
        if ceiling.epsilon <= 0:
            raise ValueError(f"the per-release ceiling must be > 0, got {max_release_epsilon}")
        max_delta = PrivacyBudget(0, max_release_delta or DEFAULT_MAX_RELEASE_DELTA).delta
        check_coordinator_url(coordinator_url)
        if not fingerprint.startswith("sha256:"):
            fingerprint = "sha256:" + fingerprint
        with self.client(coordinator_url) as client:
            pem, actual = client.pinned_key(fingerprint, coordinator_url)
        with self.client(coordinator_url, token) as client:
            client.check_credential(coordinator_url)
        enrolment = Enrolment(
            coordinator_url.rstrip("/"), token, actual,
            f"{cap.epsilon.normalize():f}", f"{cap.delta.normalize():f}",
            f"{ceiling.epsilon.normalize():f}",
            max_release_delta=f"{max_delta.normalize():f}",
        )
        self.state.save_enrolment(enrolment, pem)
        self.ledger().close()
        return enrolment

    def public_key(self) -> Any:
        enrolment = self.state.load_enrolment()
        key = public_key_from_pem(self.state.load_key_pem())
        if key_fingerprint(key) != enrolment.key_fingerprint:
            raise SignatureInvalid(
                f"stored coordinator key in {self.state.key_path} does not match the pinned "
                "fingerprint; re-enrol"
            )
        return key

    def fetch_config(self, study: str, client: CoordinatorClient | None = None) -> tuple[
        StudyConfig, SignedConfig
    ]:
        """Fetch and verify the study config; persist it and its version as newest seen."""
        check_study_id(study)
        key = self.public_key()
        if client is None:
            with self.client() as own:
                text = own.get_config(study)
        else:
            text = client.get_config(study)
        try:
            signed = SignedConfig.model_validate_json(text)
        except ValidationError as exc:
            raise SignatureInvalid(f"coordinator sent a malformed signed config: {exc}") from exc
        with self.ledger() as ledger:
            config = verify_config(signed, key, newest_seen=ledger.newest_seen(study))
            if config.study_id != study:
                raise ConfigError(f"asked for study {study!r}, got a config for "
                                  f"{config.study_id!r}")
            ledger.see_config(study, config.version)
        warning = config_noise_warning(config)
        if warning and (study, config.version) not in self._warned:  # once per command
            self._warned.add((study, config.version))
            log.warning("warning: study %s: %s", study, warning)
        write_private(self.state.config_path(study), text.encode())
        return config, signed

    def check_data(
        self, study: str, path: str | Path, options: DataOptions
    ) -> DataSource | DatasetSource:
        """Read and check the whole file against the study schema as a release reads it
        (nothing is sent): every bad column and its first bad rows in one refusal."""
        from participant.release.precheck import checked_file

        config, _ = self.fetch_config(study)
        return checked_file(config, path, options)

    def approve(self, study: str) -> dict[str, Any]:
        """Fetch the study config and approve the columns it releases (operator decision)."""
        config, _ = self.fetch_config(study)
        doc = policy.schema_doc(config)
        self.state.save_approved(study, doc)
        return doc

    def contribute(
        self, study: str, path: str | Path, options: DataOptions, *,
        send_slot: float = policy.DEFAULT_SEND_SLOT, approve_schema: bool = False,
        drop_malformed: bool = False,
    ) -> ContributeOutcome:
        """Re-send a stored release if one is pending; otherwise check the whole file
        locally (:func:`participant.release.precheck.precheck`), then make and send a new one.

        Every refusal happens before the ledger reservation; from it on, the release is
        charged and sent ``send_slot`` seconds after the config was fetched.
        """
        from participant.release import contribute as rel
        from participant.release import precheck as pre
        enrolment = self.state.load_enrolment()
        policy.send_schedule(0.0, send_slot, 0.0)  # validate before fetching anything
        check = {"drop_malformed": drop_malformed}
        with (self.state.lock(), self.ledger() as ledger, self.client() as client,
              pre.engine_client(options) as dask):  # a LocalCluster starts before the slot
            checked = None  # a pending stored release is only re-sent: no file is read
            if not ledger.entries(study=study, status="stored"):
                checked = pre.precheck(self.state, self.public_key(), ledger, study, path,
                                       options, dask=dask, **check)
            if sent := rel.resend_stored(self.state, ledger, client, study):
                return rel.ContributeOutcome(sent, {}, ledger.spent(), enrolment.cap)
            config, signed = self.fetch_config(study, client)
            anchor = self.clock()
            cost = config.release_cost()  # once: charged, checked and claimed in the body
            ledger.check(cost, enrolment.cap)
            policy.check_coordinator_budget(client, cost)
            source = self.checked_source(study, path, options, config, enrolment,
                                         approve_schema, cost)
            if checked != config.version:  # no stored config, or it changed: check now
                pre.check_before_release(config, path, options, dask=dask, **check)
            entry, substitute = rel.make_release(
                self.state, ledger, study=study, config=config, config_digest=signed.digest(),
                source=source, cost=cost, cap=enrolment.cap, rows_per_id=options.rows_per_id,
                counter=(functools.partial(counter, client=dask)
                         if (counter := options.counter()) else None),
            )
            send_at, slots = policy.send_schedule(anchor, send_slot, self.clock())
            if (wait := send_at - self.clock()) > 0:
                self.sleep(wait)
            result = rel.send_stored(self.state, ledger, client, entry, resent=False)
            if substitute is not None:
                raise rel.ReleaseSubstituted.after(path, entry, substitute)
            return rel.ContributeOutcome([result], source.report.clipped, ledger.spent(),
                                         enrolment.cap, source.report.dropped, slots)

    def checked_source(
        self, study: str, path: str | Path, options: DataOptions, config: StudyConfig,
        enrolment: Enrolment, approve_schema: bool, cost: PrivacyBudget,
    ) -> DataSource | DatasetSource:
        """Every check a release of ``cost`` passes before reading a record
        (:mod:`participant.release.policy`); the file's source, its header read."""
        policy.check_release_request(config, cost, enrolment.ceiling, options)
        schema = policy.check_schema(self.state.load_approved(study), config,
                                     approve=approve_schema)
        source = options.source(path, config, release=True)  # reads the header only
        if schema is not None:
            self.state.save_approved(study, schema)
        return source

    def resend_pending(self) -> list[SendResult]:
        """Send every stored-but-unacknowledged release (all studies)."""
        from participant.release import contribute as rel
        with self.state.lock(), self.ledger() as ledger, self.client() as client:
            return rel.resend_stored(self.state, ledger, client)

    def score(
        self,
        study: str,
        path: str | Path,
        output: str | Path,
        options: DataOptions,
        *,
        contamination: float | None = None,
        top_k: int | None = None,
    ) -> tuple[ScoreSummary, Any]:
        """Score local records with the global model; returns the summary and the model."""
        from common.detectors.combine import study_weights
        from participant.scoring.cohorts import fetch_cohorts
        from participant.scoring.model import fetch_model, model_detectors
        from participant.scoring.score import score_source

        engine_kw = options.engine_kw()
        if engine_kw:
            from participant.dask.engine import score_dataset as score_source

        with self.client() as client:
            config, _ = self.fetch_config(study, client)
            model = fetch_model(self.state, client, study, config)
            cohorts = fetch_cohorts(self.state.study_dir(study), client, config)
        detectors = model_detectors(config, model)
        if cohorts is not None:  # the released cohort model joins as a third detector
            from common.detectors import CentroidDetector

            detectors["centroid"] = CentroidDetector.from_model(cohorts.model)
        summary = score_source(
            options.source(path, config), detectors, output, contamination=contamination,
            top_k=top_k, progress=options.progress, cohorts=cohorts,
            weights=study_weights(config, detectors), **engine_kw,
        )
        return summary, model

    def spent(self) -> PrivacyBudget:
        with self.ledger() as ledger:
            return ledger.spent()
