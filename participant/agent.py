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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import ValidationError

from common.budget import PrivacyBudget
from common.config import StudyConfig
from common.errors import BudgetExceeded, ConfigError, SignatureInvalid
from common.noise.planning import config_noise_warning
from common.signing import SignedConfig, key_fingerprint, public_key_from_pem, verify_config
from participant.client import CoordinatorClient, CoordinatorRefused
from participant.data.dataset import DatasetSource, open_source
from participant.data.reader import DataSource, DataSpec
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

if TYPE_CHECKING:  # imported lazily below: OpenDP (via common.release) is slow to import
    from participant.release.contribute import SendResult
    from participant.scoring.score import ScoreSummary


def check_coordinator_url(url: str) -> str:
    """Refuse a coordinator address that is not an http(s) URL (a usage error, not an outage)."""
    parsed = httpx.URL(url) if url.startswith(("http://", "https://")) else None
    if parsed is None or not parsed.host:
        raise ValueError(f"--coordinator {url!r} is not a URL: give it with its scheme, "
                         "e.g. https://coordinator.example.org or http://127.0.0.1:8000")
    return url


class CredentialRefused(CoordinatorRefused):
    """The coordinator does not accept the participant credential (401/403)."""


@dataclass(frozen=True)
class DataOptions:
    """How to read the local file: record key, ignored columns, out-of-bounds policy, and
    (releases only) the most rows one record key may contribute."""

    id_column: str | None = None
    ignore: tuple[str, ...] = ()
    on_out_of_bounds: str = "clip"
    chunk_rows: int = 65_536
    progress: bool = False
    rows_per_id: int | None = None
    engine: str = "inprocess"  # or "dask" (participant.dask.engine)
    scheduler: str | None = None  # Dask scheduler address; None: start a LocalCluster

    def source(self, path: str | Path, config: StudyConfig, *, release: bool = False
               ) -> DataSource | DatasetSource:
        """A file's :class:`DataSource`, or a :class:`DatasetSource` for a directory or glob."""
        spec = DataSpec.from_config(
            config, id_column=self.id_column, ignore=self.ignore,
            on_out_of_bounds=self.on_out_of_bounds,
            rows_per_id=self.rows_per_id if release else None,
            on_bad_row="drop" if release else "error",  # participant.data.reader: one bad row
        )
        source = open_source(path, spec, chunk_rows=self.chunk_rows, progress=self.progress)
        if spec.rows_per_id is not None and (
            isinstance(source, DatasetSource) or self.engine != "inprocess"
        ):
            raise ValueError("--rows-per-id counts a person's rows within one file; give a "
                             "single file with the in-process engine (rows of one person in "
                             "several files or partitions would not be capped)")
        return source

    def engine_kw(self) -> dict[str, Any]:
        """Keyword arguments for the engine's functions (``scheduler`` for Dask)."""
        if self.engine not in ("inprocess", "dask"):
            raise ValueError(f"unknown engine {self.engine!r}; use 'inprocess' or 'dask'")
        return {"scheduler": self.scheduler} if self.engine == "dask" else {}


@dataclass(frozen=True)
class ContributeOutcome:
    """What ``contribute`` did; everything but ``sent`` is local information only.

    ``send_slots``: how many send slots the release waited (1 when reading the data fitted
    in the slot; 0 without a slot or for a re-send).
    """

    sent: list[SendResult] = field(default_factory=list)
    clipped: dict[str, int] = field(default_factory=dict)
    spent: PrivacyBudget = field(default_factory=PrivacyBudget.zero)
    cap: PrivacyBudget = field(default_factory=PrivacyBudget.zero)
    dropped: int = 0
    send_slots: int = 0


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
        self.sleep, self.clock = sleep, clock
        self._client_kw: dict[str, Any] = dict(
            transport=transport, sleep=sleep, event_hooks=event_hooks,
            max_tries=max_tries, timeout=timeout,
        )

    def client(self, url: str | None = None, token: str | None = None) -> CoordinatorClient:
        if url is None:
            enrolment = self.state.load_enrolment()
            url, token = enrolment.coordinator_url, enrolment.token
        return CoordinatorClient(url, token, **self._client_kw)

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
            key_doc = client.get_key()
        pem = key_doc["public_key_pem"]
        actual = key_fingerprint(public_key_from_pem(pem))
        if actual != fingerprint.lower():
            raise SignatureInvalid(
                f"the coordinator at {coordinator_url} presented key {actual}, not the pinned "
                f"{fingerprint}; check the fingerprint with the coordinator's operator",
                actual=actual,
            )
        with self.client(coordinator_url, token) as client:
            try:
                client.me()
            except CoordinatorRefused as exc:
                if exc.status not in (401, 403):
                    raise
                raise CredentialRefused(
                    f"the coordinator at {coordinator_url} does not accept this credential "
                    f"(HTTP {exc.status}: {exc.detail}). Check that the token file holds the "
                    "credential the coordinator's operator gave you for this participant, "
                    "and that it was not revoked; nothing was stored.",
                    status=exc.status, detail=exc.detail) from exc
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
        if warning:
            log.warning("study %s: %s", study, warning)
        write_private(self.state.study_dir(study) / "config.json", text.encode())
        return config, signed

    def check_data(
        self, study: str, path: str | Path, options: DataOptions
    ) -> DataSource | DatasetSource:
        """Read and check the whole file against the study schema (nothing is sent)."""
        config, _ = self.fetch_config(study)
        source = options.source(path, config)
        if options.engine_kw():
            from participant.dask.engine import check_dataset

            return check_dataset(source, **options.engine_kw())
        for _ in source:
            pass
        return source

    def approve(self, study: str) -> dict[str, Any]:
        """Fetch the study config and approve the columns it releases (operator decision)."""
        config, _ = self.fetch_config(study)
        doc = policy.schema_doc(config)
        self.state.save_approved(study, doc)
        return doc

    def contribute(
        self, study: str, path: str | Path, options: DataOptions, *,
        send_slot: float = policy.DEFAULT_SEND_SLOT, approve_schema: bool = False,
    ) -> ContributeOutcome:
        """Re-send a stored release if one is pending; otherwise make and send a new one.

        Every refusal happens before a record is read; from the ledger reservation on, the
        release is charged and sent ``send_slot`` seconds after the config was fetched.
        """
        from participant.release import contribute as rel
        enrolment = self.state.load_enrolment()
        with self.state.lock(), self.ledger() as ledger, self.client() as client:
            rel.recover(self.state, ledger)
            pending = ledger.entries(study=study, status="stored")
            if pending:
                sent = [rel.send_stored(self.state, ledger, client, e, resent=True)
                        for e in pending]
                return ContributeOutcome(sent, {}, ledger.spent(), enrolment.cap)
            policy.send_schedule(0.0, send_slot, 0.0)  # validate before fetching anything
            config, signed = self.fetch_config(study, client)
            anchor = self.clock()
            ledger.check(config.release_cost(), enrolment.cap)
            self._check_coordinator_budget(client, config.release_cost())
            source = self._checked_source(study, path, options, config, enrolment,
                                          approve_schema)
            entry, substitute = rel.make_release(
                self.state, ledger, study=study, config=config, config_digest=signed.digest(),
                source=source, cap=enrolment.cap, rows_per_id=options.rows_per_id,
                counter=self._counter(options),
            )
            send_at, slots = policy.send_schedule(anchor, send_slot, self.clock())
            if (wait := send_at - self.clock()) > 0:
                self.sleep(wait)
            result = rel.send_stored(self.state, ledger, client, entry, resent=False)
            if substitute is not None:
                raise rel.ReleaseSubstituted.after(path, entry, substitute)
            return ContributeOutcome([result], source.report.clipped, ledger.spent(),
                                     enrolment.cap, source.report.dropped, slots)

    @staticmethod
    def _check_coordinator_budget(client: CoordinatorClient, cost: PrivacyBudget) -> None:
        """Refuse, before any noise is drawn, a release the coordinator's ledger would refuse
        (it would still count as spent here: its noisy bytes would have left)."""
        there = client.budget()
        if not cost.fits_within(there.remaining):
            raise BudgetExceeded(
                f"the coordinator's ledger has {there.remaining} left of your cap there "
                f"{there.cap} (spent there: {there.spent}); this release costs {cost}. Nothing "
                "was drawn or sent, and nothing was spent. Ask the coordinator's administrator "
                "to raise your cap.",
                spent=there.spent, asked=cost, cap=there.cap)

    @staticmethod
    def _counter(options: DataOptions) -> Callable[..., Any] | None:
        """The exact-histogram function of the chosen engine (None: in-process)."""
        engine_kw = options.engine_kw()
        if not engine_kw:
            return None
        from participant.dask.engine import exact_histograms as on_dask

        return functools.partial(on_dask, **engine_kw)

    def _checked_source(
        self, study: str, path: str | Path, options: DataOptions, config: StudyConfig,
        enrolment: Enrolment, approve_schema: bool,
    ) -> DataSource | DatasetSource:
        """Every check a release passes before reading a record (participant.release.policy)."""
        policy.check_release_options(config, on_out_of_bounds=options.on_out_of_bounds,
                                     id_column=options.id_column,
                                     rows_per_id=options.rows_per_id)
        policy.check_ceiling(config.release_cost(), enrolment.ceiling)
        policy.check_column_roles(config, options.id_column, options.ignore)
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
            rel.recover(self.state, ledger)
            return [rel.send_stored(self.state, ledger, client, e, resent=True)
                    for e in ledger.entries(status="stored")]

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
        from participant.cohorts.columns import fetch_cohorts
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
