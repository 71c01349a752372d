"""The whole-file check a release passes before anything reaches the coordinator.

``contribute`` (and ``run`` on an independent study) reads the whole file once, *locally and
before any request*, exactly as the release will read it (:class:`DataSource` with
``on_bad_row="drop"``), against the signed config this state directory last verified
(``studies/<study>/config.json``; re-verified under the pinned key here). A file with a
malformed row is refused there, with every bad column, what is wrong with it and its first
bad rows (exit 3): nothing was sent, nothing charged. ``check-data`` runs the same check.

Why the refusal is private: it happens before the first request of the command, so the
coordinator sees nothing at all, exactly what it sees of an operator who has not run the
command yet. That needs the study's current config stored here, which every command that
fetches it leaves (``config``, ``check-data``, an earlier release). Without it, or when the
config changed since, the file is checked against the fetched config *after* the fetch and
inside the send slot (its reading time hidden as the release's is); a refusal then leaves a
config fetch without a release, as a ``check-data`` run does.

When the release goes ahead, nothing the coordinator sees depends on one row: the file was
found clean, and if it changed since (or a new config version reads other columns), the
release still drops each malformed row as an absent record, so the release of D plus one bad
row is the release of D (``tests/privacy/test_malformed_rows.py``); a file with no records is
released as the histograms of no records (noise only), at the same send slot, at the same
cost. Neither the check's verdict nor any count leaves the machine.
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from common.budget import PrivacyBudget
from common.errors import BudgetExceeded, SchemaMismatch
from participant import layout
from participant.data.spec import DataReport

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    from common.study.config import StudyConfig
    from participant.data.dataset import DatasetSource
    from participant.data.reader import DataSource
    from participant.options import DataOptions
    from participant.release.ledger import Ledger
    from participant.state import StateDir

__all__ = ["check_before_release", "checked_file", "empty_warning", "engine_client",
           "precheck", "refusal", "stored_config"]

log = logging.getLogger("fedod.participant")


def stored_config(study_dir: Path, public_key: Ed25519PublicKey) -> StudyConfig | None:
    """The signed config last fetched for the study, verified again (signature, expiry,
    digest) under the pinned key; ``None`` if there is none or it no longer verifies."""
    from common.errors import FedodError
    from common.study.signing import SignedConfig, verify_config

    path = study_dir / layout.CONFIG
    if not path.is_file():
        return None
    try:
        return verify_config(SignedConfig.model_validate_json(path.read_text()), public_key)
    except (FedodError, ValueError):
        return None


def _shown(rows: list[tuple[int | str, object]]) -> str:
    return ", ".join(str(r) if v is None else f"{r} ({v!r})" for r, v in rows)


def refusal(report: DataReport) -> SchemaMismatch | None:
    """The refusal of a file with malformed rows: every bad column, its problem and first bad
    rows, and the first lines with the wrong number of fields; ``None`` for a clean file."""
    if not report.malformed_rows:
        return None
    lines = [f"  column {name!r}: {report.problems.get(name, 'malformed values')} in "
             f"{n} row(s); first bad rows: {_shown(report.first_bad.get(name, []))}"
             for name, n in report.malformed.items() if name in report.problems]
    if wrong := [n for name, n in report.malformed.items() if name not in report.problems]:
        first = ", ".join(repr(text) for text in report.bad_lines)
        lines.append(f"  {sum(wrong)} line(s) with the wrong number of fields"
                     + (f"; first: {first}" if first else ""))
    return SchemaMismatch(
        f"{report.path}: refused before anything was sent or charged: "
        f"{report.malformed_rows} malformed row(s) (data rows counted from 1, header "
        f"excluded):\n" + "\n".join(lines) + "\nFix or remove these rows and run the command "
        "again ('check-data' shows the same without contacting the coordinator).",
        path=report.path, columns=sorted(report.problems),
    )


def empty_warning(report: DataReport, cost: PrivacyBudget | None) -> str | None:
    """What releasing a file with no records costs and does, or ``None`` when it has some."""
    if report.records:
        return None
    what = f"costs {cost} of your budget, on both ledgers" if cost else "is charged"
    return (f"{report.path} holds 0 records (an empty file, or a header without rows; both "
            f"are read the same way). A release of it is the histograms of no records: noise "
            f"only, it adds nothing to the model but noise, and it {what} like any release "
            f"(it is not refused, so that a missing release never tells the coordinator "
            f"that a file is empty).")


def checked_file(config: StudyConfig, path: str | Path, options: DataOptions, *,
                 drop_malformed: bool = False, dask: Any = None
                 ) -> DataSource | DatasetSource:
    """The file's source after a whole read as a release reads it, refused for a malformed
    row unless ``drop_malformed`` (the Dask engine reads each partition on its workers,
    through ``dask``, a connected client, if given)."""
    source = options.source(path, config, release=True)
    if options.engine_kw():
        from participant.dask.engine import check_dataset

        check_dataset(source, client=dask, **options.engine_kw())
    else:
        for _ in source:
            pass
    if not drop_malformed and (error := refusal(source.report)) is not None:
        raise error
    return source


def precheck(state: StateDir, public_key: Ed25519PublicKey, ledger: Ledger, study: str,
             path: str | Path, options: DataOptions, *, drop_malformed: bool = False,
             dask: Any = None) -> int | None:
    """The check before any request: against the stored signed config, after the checks
    that read no record (options, per-release ceiling, local cap, column roles). Returns the
    config version it checked against; ``None`` when there is no stored config, or the stored
    one fails a check the coordinator's current config may pass (ceiling, cap, column roles,
    header: it may be stale), so the release checks all of it against the fetched config
    instead (:func:`check_before_release`)."""
    from participant.release import policy

    config = stored_config(state.study_dir(study), public_key)
    if config is None:
        return None
    enrolment, cost = state.load_enrolment(), config.release_cost()
    try:  # the stored config may be stale: what it fails, the fetched one may pass
        policy.check_release_request(config, cost, enrolment.ceiling, options)
        ledger.check(cost, enrolment.cap)
        options.source(path, config, release=True)  # the header only
    except (BudgetExceeded, SchemaMismatch):
        return None  # the release checks everything again against the fetched config
    check_before_release(config, path, options, drop_malformed=drop_malformed, dask=dask)
    return config.version


def check_before_release(config: StudyConfig, path: str | Path, options: DataOptions, *,
                         drop_malformed: bool = False, dask: Any = None) -> None:
    """:func:`checked_file`, then the warning (on stderr, before the release) when the file
    holds no records."""
    source = checked_file(config, path, options, drop_malformed=drop_malformed, dask=dask)
    if warning := empty_warning(source.report, config.release_cost()):
        log.warning("warning: %s", warning)


def engine_client(options: DataOptions) -> contextlib.AbstractContextManager[Any]:
    """The Dask client a release uses, connected (a LocalCluster started) *before* the
    release's send slot begins; ``None`` for the in-process engine."""
    if not options.engine_kw():
        return contextlib.nullcontext(None)
    from participant.dask.engine import dask_client

    return dask_client(**options.engine_kw())
