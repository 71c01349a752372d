"""Model cache (ETag / If-None-Match), offline fallback, CLI exit codes and progress output."""

from __future__ import annotations

import io
import json

import httpx
import numpy as np
import pytest

from common.errors import (
    ConfigDowngrade,
    ConfigVersionConflict,
    CoordinatorUnavailable,
    PayloadInvalid,
    SchemaMismatch,
)
from common.study.config import FeatureSpec, PrivacyParams, new_study_config
from common.wire.encoding import encode_counts
from participant.cli.main import exit_code, main
from participant.client import CoordinatorClient, CoordinatorRefused
from participant.progress import Progress
from participant.scoring.model import fetch_model, model_detectors
from participant.state import StateDir

CONFIG = new_study_config("s1", [FeatureSpec(name="a", lo=0.0, hi=1.0)],
                          privacy=PrivacyParams(epsilon_lsh="1"), n_tables=4)


def model_json(config_version: int = 1, version: int = 3) -> str:
    family = CONFIG.lsh_family()
    counts = family.histogram(np.linspace(0, 1, 50)[:, None])
    lsh = json.loads(encode_counts(counts, n_cells=family.n_cells).model_dump_json())
    return json.dumps({"study_id": "s1", "config_version": config_version, "version": version,
                       "contributors": 2, "lsh": lsh, "grid": None})


def test_model_is_cached_and_revalidated_with_if_none_match(tmp_path):
    seen: list[str | None] = []
    up = {"ok": True}

    def handler(request):
        seen.append(request.headers.get("If-None-Match"))
        if not up["ok"]:
            raise httpx.ConnectError("down")
        if request.headers.get("If-None-Match") == '"s1-3"':
            return httpx.Response(304)
        return httpx.Response(200, text=model_json(), headers={"ETag": '"s1-3"'})

    state = StateDir(tmp_path)
    client = CoordinatorClient("http://c", "t", transport=httpx.MockTransport(handler),
                               sleep=lambda s: None, max_tries=2)
    first = fetch_model(state, client, "s1", CONFIG)
    second = fetch_model(state, client, "s1", CONFIG)
    assert seen == [None, '"s1-3"'] and first == second
    up["ok"] = False
    assert fetch_model(state, client, "s1", CONFIG) == first  # offline: cached model
    scores = model_detectors(CONFIG, first)["lsh"].decision_function(np.array([[0.5]]))
    assert scores.shape == (1,)


def test_model_for_another_config_version_is_refused(tmp_path):
    client = CoordinatorClient("http://c", "t", transport=httpx.MockTransport(
        lambda r: httpx.Response(200, text=model_json(config_version=2))))
    with pytest.raises(ConfigVersionConflict, match="built under config v2"):
        fetch_model(StateDir(tmp_path), client, "s1", CONFIG)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (SchemaMismatch("x"), 3),
        (PayloadInvalid("x"), 3),
        (ConfigDowngrade("x"), 4),
        (CoordinatorUnavailable("x"), 6),
        (CoordinatorRefused("x", status=409, detail="privacy budget exceeded"), 5),
        (CoordinatorRefused("x", status=401, detail="bad token"), 7),
        (ConfigVersionConflict("x"), 7),
        (RuntimeError("bug"), 1),
    ],
)
def test_exit_codes(error, code):
    assert exit_code(error) == code


def test_help_documents_exit_codes(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    out = capsys.readouterr().out
    assert info.value.code == 0
    for line in ("3  data invalid", "4  config or key refused", "5  privacy budget refused",
                 "6  coordinator unavailable"):
        assert line in out


@pytest.mark.parametrize("command", ["ledger", "status"])
def test_ledger_and_status_without_enrolment_exit_2_and_create_nothing(tmp_path, capsys, command):
    assert main(["--state", str(tmp_path / "s"), command]) == 2
    assert "run 'fedod-participant enrol' first" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_progress_writes_one_rewritten_line_to_the_stream():
    stream = io.StringIO()
    bar = Progress("reading x", total=200, stream=stream, interval=0)
    bar.update(100)
    bar.close()
    text = stream.getvalue()
    assert "\rreading x:  50.0% 100 rows" in text and text.endswith("\n")


def test_a_credential_starting_with_a_dash_parses_as_token_equals():
    from participant.cli.parser import build_parser

    args = build_parser("").parse_args(["enrol", "--coordinator", "http://c", "--fingerprint",
                                        "sha256:x", "--token=-abc_", "--epsilon-cap", "1"])
    assert args.token == "-abc_"
