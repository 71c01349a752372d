"""The participant agent: the Python API behind ``fedod-participant``.

>>> agent = Agent("~/.fedod-participant")
>>> agent.enrol("https://coord", token, "sha256:...", epsilon_cap="3")   # doctest: +SKIP
>>> agent.contribute("study-1", "records.parquet", id_column="mrn")       # doctest: +SKIP
>>> agent.score("study-1", "records.parquet", "scores.parquet")           # doctest: +SKIP

Safety properties: the coordinator key is pinned at enrolment; every config is verified
against it (signature, expiry, no downgrade, LSH digest) before use; the local ledger and
cap are consulted before any noise is drawn; a stored release is re-sent unchanged.
"""

from __future__ import annotations

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
from common.errors import ConfigError, SignatureInvalid
from common.noise.planning import config_noise_warning
from common.signing import SignedConfig, key_fingerprint, public_key_from_pem, verify_config
from participant.client import CoordinatorClient
from participant.data import DataSource, DataSpec
from participant.ledger import Ledger
from participant.state import Enrolment, StateDir, check_study_id, write_private

log = logging.getLogger("fedod.participant")

if TYPE_CHECKING:  # imported lazily below: OpenDP (via common.release) is slow to import
    from participant.contribute import SendResult
    from participant.scoring import ScoreSummary


@dataclass(frozen=True)
class DataOptions:
    """How to read the local file: record key, ignored columns, out-of-bounds policy."""

    id_column: str | None = None
    ignore: tuple[str, ...] = ()
    on_out_of_bounds: str = "clip"
    chunk_rows: int = 65_536
    progress: bool = False

    def source(self, path: str | Path, config: StudyConfig) -> DataSource:
        spec = DataSpec.from_config(
            config, id_column=self.id_column, ignore=self.ignore,
            on_out_of_bounds=self.on_out_of_bounds,
        )
        return DataSource(path, spec, chunk_rows=self.chunk_rows, progress=self.progress)


@dataclass(frozen=True)
class ContributeOutcome:
    """What ``contribute`` did; ``clipped`` is local information only."""

    sent: list[SendResult] = field(default_factory=list)
    clipped: dict[str, int] = field(default_factory=dict)
    spent: PrivacyBudget = field(default_factory=PrivacyBudget.zero)
    cap: PrivacyBudget = field(default_factory=PrivacyBudget.zero)


class Agent:
    """One participant, bound to one state directory."""

    def __init__(
        self,
        state_dir: str | Path,
        *,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        event_hooks: dict[str, list[Callable[..., Any]]] | None = None,
        max_tries: int = 6,
        timeout: float = 30.0,
    ) -> None:
        self.state = StateDir(state_dir)
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
    ) -> Enrolment:
        """Fetch ``/v1/key``, check it against the pinned fingerprint, store everything."""
        cap = PrivacyBudget(epsilon_cap, delta_cap)
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
        enrolment = Enrolment(
            coordinator_url.rstrip("/"), token, actual,
            f"{cap.epsilon.normalize():f}", f"{cap.delta.normalize():f}",
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

    def check_data(self, study: str, path: str | Path, options: DataOptions) -> DataSource:
        """Read and check the whole file against the study schema (nothing is sent)."""
        config, _ = self.fetch_config(study)
        source = options.source(path, config)
        for _ in source:
            pass
        return source

    def contribute(self, study: str, path: str | Path, options: DataOptions) -> ContributeOutcome:
        """Re-send a stored release if one is pending; otherwise make and send a new one."""
        from participant import contribute as rel

        enrolment = self.state.load_enrolment()
        with self.state.lock(), self.ledger() as ledger, self.client() as client:
            rel.recover(self.state, ledger)
            pending = ledger.entries(study=study, status="stored")
            if pending:
                sent = [rel.send_stored(self.state, ledger, client, e, resent=True)
                        for e in pending]
                return ContributeOutcome(sent, {}, ledger.spent(), enrolment.cap)
            config, signed = self.fetch_config(study, client)
            ledger.check(config.release_cost(), enrolment.cap)
            source = options.source(path, config)
            grid = config.grid_spec()
            exact = rel.exact_histograms(
                source, config.lsh_family(), grid, dense_grid=config.grid_layout == "dense"
            )
            if source.report.rows == 0:
                raise ValueError(f"{path}: no records; nothing to release")
            result = rel.release_and_send(
                self.state, ledger, client, study=study, config=config,
                config_digest=signed.digest(), exact=exact, cap=enrolment.cap,
            )
            return ContributeOutcome([result], source.report.clipped, ledger.spent(),
                                     enrolment.cap)

    def resend_pending(self) -> list[SendResult]:
        """Send every stored-but-unacknowledged release (all studies)."""
        from participant import contribute as rel

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
        from participant.model import fetch_model, model_detectors
        from participant.scoring import score_source

        with self.client() as client:
            config, _ = self.fetch_config(study, client)
            model = fetch_model(self.state, client, study, config)
        detectors = model_detectors(config, model)
        summary = score_source(
            options.source(path, config), detectors, output,
            contamination=contamination, top_k=top_k, progress=options.progress,
        )
        return summary, model

    def spent(self) -> PrivacyBudget:
        with self.ledger() as ledger:
            return ledger.spent()
