"""The layout of a participant's state directory: the one module that names its paths (every
other module asks here, through :class:`participant.state.StateDir` or these functions)::

    <state>/
        participant.json          the enrolment (coordinator, pinned keys, caps)
        coordinator_key.pem       the pinned coordinator public key
        identity_key.pem          the long-term secure-aggregation identity key (0600)
        ledger.sqlite3            the local privacy ledger
        lock                      held while an agent releases
        outbox/<key>.json         releases drawn and not yet acknowledged
        studies/<study>/
            config.json           the last verified signed config
            approved.json         the columns the operator approved
            model.json            the cached global model, model.etag its ETag
            cohort_model.json     the released cohort model; cohorts/round-<n>.json the sent
            stream.sqlite3        the stream's position and decisions
            membership.json       the membership certificate held
            membership-version    the highest certificate version verified
            beacon-draw           the beacon draw count last masked under
            rounds/<n>/           noisy.npy (substitute.txt when noise only), unmasked,
                                  attempt-<a>.keys | .roster | .masked

Nothing here touches the disk except the two listings at the end.
"""

from __future__ import annotations

from pathlib import Path

# the state directory's root
ENROLMENT = "participant.json"
COORDINATOR_KEY = "coordinator_key.pem"
IDENTITY_KEY = "identity_key.pem"
LEDGER = "ledger.sqlite3"
LOCK = "lock"
OUTBOX = "outbox"
STUDIES = "studies"
# a study's directory
CONFIG = "config.json"
APPROVED = "approved.json"
MODEL = "model.json"
MODEL_ETAG = "model.etag"
COHORT_MODEL = "cohort_model.json"
COHORTS = "cohorts"
STREAM = "stream.sqlite3"
MEMBERSHIP = "membership.json"
MEMBERSHIP_VERSION = "membership-version"
BEACON_DRAW = "beacon-draw"
ROUNDS = "rounds"
# a round's directory
NOISY = "noisy.npy"
NOISY_TMP = "noisy.tmp.npy"
SUBSTITUTE = "substitute.txt"
UNMASKED = "unmasked"


def outbox_entry(outbox: Path, idempotency_key: str) -> Path:
    return outbox / f"{idempotency_key}.json"


def study_dir(root: Path, study: str) -> Path:
    return root / STUDIES / study


def round_dir(study: Path, number: int) -> Path:
    """``rounds/<number>`` of the study directory ``study``."""
    return study / ROUNDS / str(number)


def cohort_round(study: Path, number: int) -> Path:
    return study / COHORTS / f"round-{number}.json"


def attempt_file(round_: Path, attempt: int, kind: str) -> Path:
    """``attempt-<attempt>.<kind>`` (keys, roster, masked) of a round directory."""
    return round_ / f"attempt-{attempt}.{kind}"


def masked_attempts(round_: Path) -> list[int]:
    """The attempts of the round whose masked frame is stored."""
    return [int(p.name.split("-")[1].split(".")[0]) for p in round_.glob("attempt-*.masked")]


def rounds_with_noisy(study: Path) -> set[int]:
    """The rounds of the study directory ``study`` with a stored noisy vector."""
    root = study / ROUNDS
    return {int(p.parent.name) for p in root.glob(f"*/{NOISY}")} if root.is_dir() else set()
