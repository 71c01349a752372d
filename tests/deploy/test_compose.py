"""docker-compose.yml is valid and every service runs a real, correctly-formed fedod command.

`docker-compose config` (Debian's docker-compose; no engine needed) validates the file; each
`fedod-*` command is parsed by the project's own argument parser (so a misspelt option or a
missing required argument fails here) and its subcommand's `--help` is run through the
installed console script; every `FEDOD_` variable set must be a real setting.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coordinator.config import Settings
from participant.config import Settings as ParticipantSettings

ROOT = Path(__file__).resolve().parents[2]
ENV = {"FEDOD_ADMIN_TOKEN": "t" * 43, "POSTGRES_PASSWORD": "p" * 32}
PARTICIPANT_ENV = {f"FEDOD_{field.upper()}" for field in ParticipantSettings.model_fields}


def _compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    if exe is None:
        if os.environ.get("CI"):
            pytest.fail("docker-compose is not installed (apt-get install docker-compose)")
        pytest.skip("docker-compose is not installed")
    clean = {k: v for k, v in os.environ.items() if k not in ENV}
    return subprocess.run([exe, "-f", str(ROOT / "docker-compose.yml"), *args],
                          capture_output=True, text=True, env={**clean, **env}, timeout=60)


@pytest.fixture(scope="module")
def services() -> dict[str, Any]:
    out = _compose("config", env=ENV)
    assert out.returncode == 0, out.stderr
    return yaml.safe_load(out.stdout)["services"]


def test_required_secrets_are_enforced() -> None:
    out = _compose("config", env={"POSTGRES_PASSWORD": "p" * 32})
    assert out.returncode != 0
    assert "FEDOD_ADMIN_TOKEN" in out.stderr


def test_topology(services: dict[str, Any]) -> None:
    assert {"postgres", "coordinator", "init", "general", "clinic-1", "specialist"} <= set(services)
    for name in ("postgres", "coordinator"):
        assert "healthcheck" in services[name], name
    for name, svc in services.items():
        assert svc.get("restart") in {"unless-stopped", "on-failure", "no"}, name
    hospitals = ("general", "clinic-1", "specialist")
    data = [_volume(services[h], "/data") for h in hospitals]
    secrets = [_volume(services[h], "/secrets") for h in hospitals]
    assert len(set(data)) == len(set(secrets)) == 3  # each hospital its own data and credential


def _volume(service: dict[str, Any], target: str) -> str:
    """The volume mounted at ``target`` (compose v1 prints ``source:target[:mode]``)."""
    for v in service["volumes"]:
        source, dest = (v["source"], v["target"]) if isinstance(v, dict) else v.split(":")[:2]
        if dest == target:
            return str(source)
    raise AssertionError(f"nothing mounted at {target}")


def _parser(program: str) -> Any:
    if program == "fedod-coordinator":
        from coordinator.cli.main import build_parser

        return build_parser()
    if program == "fedod-participant":
        from participant.cli.main import main as cli
        from participant.cli.parser import build_parser as participant_parser

        return participant_parser(cli.__doc__ or "")
    if program == "fedod-consortium":
        from participant.consortium.cli import build_parser as consortium_parser

        return consortium_parser()
    if program == "fedod-simulate":
        from simulation.main import build_parser as simulate_parser

        return simulate_parser()
    raise AssertionError(f"{program} is not a fedod command")


def _fedod_commands(services: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(name, svc["command"]) for name, svc in services.items()
            if svc.get("command") and str(svc["command"][0]).startswith("fedod-")]


def test_every_fedod_service_runs_a_valid_cli_invocation(services: dict[str, Any]) -> None:
    commands = _fedod_commands(services)
    assert {name for name, _ in commands} >= {"coordinator", "init", "demo-data", "general",
                                              "consortium-key", "dpo", "membership"}
    for name, argv in commands:
        try:
            args = _parser(argv[0]).parse_args([str(a) for a in argv[1:]])
        except SystemExit as exc:
            pytest.fail(f"service {name}: {' '.join(map(str, argv))} does not parse ({exc})")
        assert args is not None


@pytest.mark.parametrize("program", ["fedod-coordinator", "fedod-participant", "fedod-simulate",
                                     "fedod-consortium"])
def test_console_scripts_answer_help(services: dict[str, Any], program: str) -> None:
    exe = Path(sys.executable).with_name(program)
    for name, argv in _fedod_commands(services):
        if argv[0] != program:
            continue
        sub = [a for a in argv[1:3] if not str(a).startswith("-") and "/" not in str(a)][:1]
        out = subprocess.run([str(exe), *sub, "--help"], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0 and "usage:" in out.stdout, (name, out.stderr)


def test_every_fedod_variable_is_a_real_setting(services: dict[str, Any]) -> None:
    known = {f"FEDOD_{field.upper()}" for field in Settings.model_fields} | PARTICIPANT_ENV
    used = {k for svc in services.values() for k in (svc.get("environment") or {})
            if k.startswith("FEDOD_")}
    assert used, "compose sets no FEDOD_ variable at all"
    assert used <= known, used - known


def test_environment_reference_lists_exactly_the_real_settings() -> None:
    import re

    doc = (ROOT / "deploy" / "ENVIRONMENT.md").read_text()
    documented = set(re.findall(r"`(FEDOD_[A-Z_]+)`", doc))
    known = {f"FEDOD_{field.upper()}" for field in Settings.model_fields} | PARTICIPANT_ENV
    assert documented == known, (documented ^ known)
