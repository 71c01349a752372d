"""``fedod-coordinator`` commands against a SQLite file: outputs and exit codes."""

from __future__ import annotations

import json

import pytest

from common.errors import SignatureInvalid
from common.study.signing import SignedConfig, public_key_from_pem, verify_config
from coordinator.cli.main import EXIT_CONFIG, EXIT_OK, EXIT_REFUSED, build_parser, main


def test_help_lists_every_command():
    text = build_parser().format_help()
    for command in ("serve", "migrate", "study", "participant", "member", "rotate-key", "key"):
        assert command in text
    assert "Exit codes" in text


def test_admin_workflow(env, capsys, coord_kit):
    spec = env / "study.json"
    spec.write_text(json.dumps(coord_kit.study_spec("s1")))
    assert main(["study", "create", str(spec), "--json"]) == EXIT_OK
    created = json.loads(capsys.readouterr().out)
    assert created["study_id"] == "s1" and created["version"] == 1
    assert main(["participant", "add", "h1", "--epsilon-cap", "2"]) == EXIT_OK
    token = capsys.readouterr().out.strip()
    assert len(token) >= 40
    assert main(["participant", "add", "h1", "--epsilon-cap", "2"]) == EXIT_REFUSED
    assert "already exists" in capsys.readouterr().err
    assert main(["member", "add", "s1", "h1"]) == EXIT_OK
    assert main(["member", "add", "s1", "ghost"]) == EXIT_REFUSED
    assert main(["participant", "raise-cap", "h1", "--epsilon-cap", "3"]) == EXIT_OK
    assert main(["participant", "revoke", "h1"]) == EXIT_OK
    capsys.readouterr()
    assert main(["participant", "list"]) == EXIT_OK
    assert "h1\trevoked" in capsys.readouterr().out
    assert main(["study", "list"]) == EXIT_OK
    assert "s1\tconfig v1" in capsys.readouterr().out


def test_rotate_key_resigns_every_study(env, capsys, coord_kit):
    spec = env / "study.json"
    spec.write_text(json.dumps(coord_kit.study_spec("s1")))
    main(["study", "create", str(spec), "--json"])
    old = SignedConfig(**json.loads(capsys.readouterr().out)["config"])
    main(["key", "show"])
    old_key = capsys.readouterr().out
    assert main(["rotate-key"]) == EXIT_OK
    assert "re-signed s1 as config version 2" in capsys.readouterr().err
    main(["key", "show"])
    new_key_text = capsys.readouterr().out
    assert new_key_text != old_key
    new_key = public_key_from_pem(new_key_text.split("\n", 1)[1])
    with pytest.raises(SignatureInvalid):
        verify_config(old, new_key)
    from coordinator.config import Settings
    from coordinator.db.engine import make_engine, make_sessionmaker
    from coordinator.services.studies import get_study, signed_config

    with make_sessionmaker(make_engine(Settings().resolved_database_url))() as session:
        config = verify_config(signed_config(get_study(session, "s1")), new_key)
    assert config.version == 2 and config.lsh.seed == coord_kit.config_of(
        old.model_dump()).lsh.seed
    assert list(env.glob("signing_key.pem.retired-*"))


def test_bad_configuration_exits_3(monkeypatch, capsys):
    monkeypatch.setenv("FEDOD_ADMIN_TOKEN", "changeme")
    monkeypatch.delenv("FEDOD_ENV", raising=False)
    assert main(["key", "show"]) == EXIT_CONFIG
    assert "FEDOD_ADMIN_TOKEN" in capsys.readouterr().err


def test_serve_without_admin_token_exits_3(env, capsys):
    assert main(["serve"]) == EXIT_CONFIG


def test_usage_error_exits_2():
    with pytest.raises(SystemExit) as exc:
        main(["participant", "add"])
    assert exc.value.code == 2
