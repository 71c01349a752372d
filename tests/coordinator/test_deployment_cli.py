"""Admin commands find the deployment like ``serve`` and never start a second one by accident."""

from __future__ import annotations

import pytest

from coordinator.cli.deployment import head_revision
from coordinator.cli.main import EXIT_CONFIG, EXIT_OK, main
from coordinator.db.migrate import upgrade
from coordinator.keys import KeyStore


@pytest.fixture
def data_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FEDOD_DATA_DIR", str(tmp_path / "fedod-data"))
    monkeypatch.delenv("FEDOD_DATABASE_URL", raising=False)
    monkeypatch.delenv("FEDOD_SIGNING_KEY_PATH", raising=False)
    monkeypatch.delenv("FEDOD_ADMIN_TOKEN", raising=False)
    return tmp_path / "fedod-data"


@pytest.mark.parametrize(
    "argv", [["participant", "list"], ["study", "list"], ["member", "add", "s", "p"]]
)
def test_no_database_is_a_configuration_error_that_creates_nothing(data_dir, capsys, argv):
    assert main(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert f"no coordinator database at {data_dir.resolve() / 'coordinator.db'}" in err
    assert "FEDOD_DATA_DIR" in err and "fedod-coordinator migrate" in err
    assert not (data_dir / "coordinator.db").exists()


@pytest.mark.parametrize("argv", [["key", "show"], ["rotate-key"]])
def test_no_key_is_refused_and_no_key_is_created(data_dir, capsys, argv):
    assert main(["migrate"]) == EXIT_OK
    capsys.readouterr()
    assert main(argv) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "no signing key at" in err and "'fedod-coordinator serve' or 'bootstrap'" in err
    assert not (data_dir / "signing_key.pem").exists()


def test_migrate_says_what_it_did(data_dir, capsys):
    assert main(["migrate"]) == EXIT_OK
    assert "created a new coordinator database at" in capsys.readouterr().err
    assert main(["migrate"]) == EXIT_OK
    assert "already at the latest schema" in capsys.readouterr().err


def test_a_schema_behind_is_upgraded_and_reported(data_dir, capsys):
    data_dir.mkdir()
    upgrade(f"sqlite:///{data_dir / 'coordinator.db'}", "0001")
    assert main(["participant", "list"]) == EXIT_OK
    err = capsys.readouterr().err
    if head_revision() == "0001":
        assert err == ""
    else:
        assert f"from schema 0001 to {head_revision()}" in err


def test_key_show_prints_the_existing_key(data_dir, capsys):
    assert main(["migrate"]) == EXIT_OK
    store = KeyStore(data_dir / "signing_key.pem")
    store.ensure()
    capsys.readouterr()
    assert main(["key", "show"]) == EXIT_OK
    assert capsys.readouterr().out.splitlines()[0] == store.key_id()
