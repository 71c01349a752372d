"""The coordinator's Ed25519 signing key: created on first start, reloaded when rotated.

The key lives in one PEM file with owner-only permissions. Every worker process re-reads it
when the file changes (rotation by ``fedod-coordinator rotate-key`` while serving), so all
workers sign with the same key. Rotation keeps the retired key next to it for audit.
"""

from __future__ import annotations

import contextlib
import os
import threading
from datetime import UTC, datetime
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.study.signing import (
    generate_key,
    key_fingerprint,
    load_private_key,
    public_key_pem,
    save_private_key,
)


class KeyStore:
    """Loads (or creates) the signing key at ``path`` and notices when it is replaced."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._key: Ed25519PrivateKey | None = None

    def _write_new(self, key: Ed25519PrivateKey, *, replace: bool) -> None:
        """Write ``key`` atomically: a temp file (0600) then link/rename into place."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        save_private_key(key, tmp)
        os.chmod(tmp, 0o600)
        try:
            if replace:
                os.replace(tmp, self.path)
            else:
                os.link(tmp, self.path)  # fails if another process created it first
        finally:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()

    def ensure(self) -> None:
        """Create the key file if it does not exist yet (safe against concurrent starts)."""
        if not self.path.exists():
            with contextlib.suppress(FileExistsError):
                self._write_new(generate_key(), replace=False)

    def private_key(self) -> Ed25519PrivateKey:
        """The current key, re-read if the file changed since the last call."""
        self.ensure()
        st = self.path.stat()
        stamp = (st.st_ino, st.st_mtime_ns)
        with self._lock:
            if self._key is None or stamp != self._stamp:
                self._key = load_private_key(self.path)
                self._stamp = stamp
            return self._key

    def key_id(self) -> str:
        """Fingerprint of the public key (what participants pin)."""
        return key_fingerprint(self.private_key().public_key())

    def public_pem(self) -> str:
        """The public key as PEM text."""
        pem = public_key_pem(self.private_key().public_key())
        return pem.decode() if isinstance(pem, bytes) else pem

    def rotate(self) -> Path:
        """Replace the key with a fresh one; return where the retired key was kept."""
        self.ensure()
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        retired = self.path.with_name(f"{self.path.name}.retired-{stamp}")
        os.link(self.path, retired)
        self._write_new(generate_key(), replace=True)
        return retired
