"""The participant's local state directory: enrolment, pinned key, configs, outbox, model cache.

Layout (directory ``0700``, every file ``0600``; nothing here ever leaves the machine)::

    <state>/
        participant.json           coordinator URL, credential, pinned key fingerprint, local cap,
                                   per-release epsilon ceiling
        coordinator_key.pem        coordinator public key, fetched once and checked against the pin
        ledger.sqlite3             local privacy ledger + newest config version seen per study
        lock                       exclusive lock held while a release is being made or sent
        outbox/<key>.json          exact request body of each release, fsync'd before sending
        studies/<study>/config.json  newest verified signed config
        studies/<study>/approved.json  released columns the operator approved (first release
                                   or ``approve``); a config releasing other columns is refused
        studies/<study>/model.json   cached global model; model.etag holds its ETag

Writes are atomic: write a temporary file in the same directory, fsync, rename, fsync the
directory. Permissions are enforced on every write, whatever the process umask. A temporary
file left by a failed write (it may hold a noisy body that was never sent) is overwritten with
zeros, fsync'd and unlinked (:func:`shred`), never just unlinked.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from common.budget import PrivacyBudget
from common.study.delta_floor import MAX_RELEASE_DELTA
from participant import layout

DIR_MODE = 0o700
FILE_MODE = 0o600
DEFAULT_MAX_RELEASE_EPSILON = "2"
"""Per-release epsilon ceiling when ``enrol`` is not given one
(:func:`participant.release.policy.check_ceiling`)."""
DEFAULT_MAX_RELEASE_DELTA = str(MAX_RELEASE_DELTA)
"""Per-release delta ceiling when ``enrol`` is not given one: the largest
delta any valid config may spend in one release (``common.study.delta_floor``)."""
_STUDY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")


class NotEnrolled(Exception):
    """The state directory has no enrolment; run ``fedod-participant enrol`` first."""

    exit_code = 2


@dataclass(frozen=True)
class Enrolment:
    """What ``enrol`` stores: where the coordinator is, how to authenticate, whom to trust."""

    coordinator_url: str
    token: str
    key_fingerprint: str
    epsilon_cap: str
    delta_cap: str = "0"
    max_release_epsilon: str = DEFAULT_MAX_RELEASE_EPSILON
    max_release_delta: str = DEFAULT_MAX_RELEASE_DELTA
    """Most delta one release may spend (``enrol --max-release-delta``); state files written
    before it existed load with the default."""
    consortium_key: str | None = None
    """The consortium's Ed25519 public key (raw, base64): it signs who may be in a secure
    round (``enrol --consortium-key``; ``fedod-consortium``)."""

    @property
    def cap(self) -> PrivacyBudget:
        """The local cap; no coordinator config can raise it."""
        return PrivacyBudget(self.epsilon_cap, self.delta_cap)

    @property
    def ceiling(self) -> PrivacyBudget:
        """Most epsilon and delta one release may spend; no coordinator config can raise it."""
        return PrivacyBudget(self.max_release_epsilon, self.max_release_delta)


def fsync_dir(path: Path) -> None:
    """Flush a directory entry (after a rename) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fsync(fd)


def shred(path: Path) -> None:
    """Overwrite ``path`` with zeros, fsync, then unlink it (missing is fine).

    Best effort on copy-on-write or journalled file systems, where old blocks may survive; the
    state directory is meant for a local, owner-only disk.
    """
    try:
        fd = os.open(path, os.O_WRONLY)
    except FileNotFoundError:
        return
    try:
        _write_all(fd, bytes(os.fstat(fd).st_size))
    finally:
        os.close(fd)
    path.unlink(missing_ok=True)
    fsync_dir(path.parent)


def write_private(path: Path, data: bytes) -> None:
    """Atomically write ``data`` to ``path`` with mode 0600 and fsync it; a temporary file
    left by a failure is shredded."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.fchmod(fd, FILE_MODE)
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        shred(tmp)
        raise
    fsync_dir(path.parent)


def make_private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) if needed and force mode 0700 on it."""
    path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
    os.chmod(path, DIR_MODE)
    return path


def check_study_id(study: str) -> str:
    """Refuse study ids that could escape the state directory."""
    if not _STUDY_RE.match(study):
        raise ValueError(f"invalid study id {study!r}: use letters, digits, '.', '_' or '-'")
    return study


class StateDir:
    """Typed access to one participant state directory."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()

    @property
    def enrolment_path(self) -> Path:
        return self.root / layout.ENROLMENT

    @property
    def key_path(self) -> Path:
        return self.root / layout.COORDINATOR_KEY

    @property
    def ledger_path(self) -> Path:
        return self.root / layout.LEDGER

    @property
    def identity_key_path(self) -> Path:
        return self.root / layout.IDENTITY_KEY

    @property
    def outbox(self) -> Path:
        return make_private_dir(self.root / layout.OUTBOX)

    def study_dir(self, study: str) -> Path:
        return make_private_dir(layout.study_dir(self.root, check_study_id(study)))

    def config_path(self, study: str) -> Path:
        return self.study_dir(study) / layout.CONFIG

    def membership_path(self, study: str) -> Path:
        return self.study_dir(study) / layout.MEMBERSHIP

    def stream_path(self, study: str) -> Path:
        return self.study_dir(study) / layout.STREAM

    def create(self) -> None:
        """Create the directory tree with owner-only permissions."""
        make_private_dir(self.root)
        make_private_dir(self.root / layout.OUTBOX)
        make_private_dir(self.root / layout.STUDIES)

    def is_enrolled(self) -> bool:
        return self.enrolment_path.exists()

    def save_enrolment(self, enrolment: Enrolment, public_key_pem: str) -> None:
        self.create()
        write_private(self.key_path, public_key_pem.encode())
        write_private(self.enrolment_path, json.dumps(asdict(enrolment), indent=2).encode())

    def load_enrolment(self) -> Enrolment:
        if not self.is_enrolled():
            raise NotEnrolled(
                f"no enrolment in {self.root}; run 'fedod-participant enrol' first"
            )
        self.check_permissions()
        return Enrolment(**json.loads(self.enrolment_path.read_text()))

    def load_key_pem(self) -> str:
        return self.key_path.read_text()

    def check_permissions(self) -> None:
        """Tighten the directory and the credential file if someone loosened them."""
        for path, mode in ((self.root, DIR_MODE), (self.enrolment_path, FILE_MODE)):
            if path.exists() and (path.stat().st_mode & 0o777) != mode:
                os.chmod(path, mode)

    def outbox_path(self, idempotency_key: str) -> Path:
        return layout.outbox_entry(self.outbox, idempotency_key)

    def shred_partial_writes(self) -> list[Path]:
        """Shred temporary files a killed agent left in the outbox (never-sent noisy bodies)."""
        leftovers = sorted(self.outbox.glob(".*.tmp"))
        for path in leftovers:
            shred(path)
        return leftovers

    def approved_path(self, study: str) -> Path:
        return self.study_dir(study) / layout.APPROVED

    def load_approved(self, study: str) -> dict[str, Any] | None:
        """The schema the operator approved for ``study`` (None before the first approval)."""
        path = self.approved_path(study)
        return json.loads(path.read_text()) if path.exists() else None

    def save_approved(self, study: str, doc: dict[str, Any]) -> None:
        write_private(self.approved_path(study), json.dumps(doc, indent=2).encode())

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive lock so two agents never release from one ledger at once."""
        self.create()
        fd = os.open(self.root / layout.LOCK, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
