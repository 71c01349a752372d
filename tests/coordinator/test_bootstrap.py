"""`fedod-coordinator bootstrap`: idempotent set-up from files (the compose init step)."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

from coordinator.cli.main import main
from coordinator.services.participants import authenticate

FEATURES = [{"name": n, "lo": 0, "hi": 1} for n in ("a", "b")]


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Path]:
    monkeypatch.setenv("FEDOD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("FEDOD_DATABASE_URL", raising=False)
    monkeypatch.delenv("FEDOD_SIGNING_KEY_PATH", raising=False)
    spec = tmp_path / "study.json"
    spec.write_text(json.dumps({"study_id": "boot", "features": FEATURES,
                                "lsh": {"n_tables": 5, "sample_size": 8},
                                "privacy": {"epsilon_lsh": "1"}}))
    argv = ["bootstrap", "--study", str(spec), "--participant", "h1", "--participant", "h2",
            "--epsilon-cap", "3", "--secrets-dir", str(tmp_path / "secrets")]
    return argv, tmp_path


def test_creates_once_and_writes_private_working_credentials(setup, capsys) -> None:
    argv, root = setup
    assert main(argv) == 0
    tokens = {h: (root / "secrets" / h / "token").read_text().strip() for h in ("h1", "h2")}
    assert main(argv) == 0
    assert "nothing (already set up)" in capsys.readouterr().err
    engine = create_engine(f"sqlite:///{root / 'data' / 'coordinator.db'}")
    with Session(engine) as session:
        for name, token in tokens.items():
            assert authenticate(session, token).name == name
    engine.dispose()
    for h in ("h1", "h2"):
        for f in ("token", "fingerprint"):
            assert stat.S_IMODE((root / "secrets" / h / f).stat().st_mode) == 0o600
        assert (root / "secrets" / h / "fingerprint").read_text().startswith("sha256:")
    assert (root / "secrets" / "h1" / "token").read_text().strip() == tokens["h1"]


def test_existing_participant_without_token_file_is_refused(setup, capsys) -> None:
    argv, root = setup
    assert main(argv) == 0
    (root / "secrets" / "h2" / "token").unlink()
    assert main(argv) == 1
    assert "credential cannot be shown again" in capsys.readouterr().err
