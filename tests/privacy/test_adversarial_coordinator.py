"""An adversarial coordinator against real participant processes (docs/TRUST.md).

A test coordinator (a loopback HTTP server in this process, signing every config with its own
Ed25519 key, exactly as the real one does) issues a sequence of configs that each try to turn
one target record into something observable: bounds moved around the target's value, bins and
grid features that isolate it, a sparse grid, a refused out-of-bounds mode, an over-ceiling
epsilon, a label promoted to a feature, a dropped column. Two real ``fedod-participant``
processes hold neighbouring datasets, ``D`` and ``D + target``, and run every config.

What the coordinator observes must not depend on the target:
- whether a POST arrives (and whether the participant asked for a config at all);
- when it arrives: never before the end of the send slot (or of the slots the participant
  reports it needed) after the config GET -- the only wall-clock assertion is that lower
  bound, which the code guarantees; the exact schedule is tested with an injected clock in
  tests/participant/test_policy.py;
- the body: a valid release whose bytes are exactly the canonical encoding of its noisy
  counts (so its size is post-processing of the DP release), with the decompressed size of a
  dense release fixed by the config.
And every release a participant started is charged in its local ledger, once per POST.
"""

from __future__ import annotations

import http.server
import json
import os
import socketserver
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from common.study.config import FeatureSpec, GridParams, PrivacyParams, new_study_config
from common.study.signing import generate_key, key_fingerprint, public_key_pem, sign_config
from common.wire.encoding import decode_counts, encode_counts
from common.wire.schemas import ContributionCreate

EXE = str(Path(sys.executable).with_name("fedod-participant"))
SLOT = 0.5
TARGET_A = 0.97  # the target is the maximum of feature a; everyone else has a <= 0.9
NAMES = ("a", "b", "c", "d")


@dataclass
class Seen:
    """What the coordinator saw from one participant during one run."""

    config_at: float | None = None
    posts: list[tuple[float, bytes]] = field(default_factory=list)


class AdversaryCoordinator:
    """Serves /v1/key, /v1/me and the current signed config; records each release with its time."""

    def __init__(self) -> None:
        self.key = generate_key()
        self.signed = ""
        self.seen: dict[str, Seen] = {}
        coordinator = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _answer(self, code: int, doc: dict | str) -> None:
                body = (doc if isinstance(doc, str) else json.dumps(doc)).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):  # noqa: N802
                who = coordinator.seen.setdefault(self.headers.get("Authorization", ""), Seen())
                if self.path == "/v1/key":
                    return self._answer(200, {"key_id": key_fingerprint(coordinator.key),
                                              "public_key_pem": public_key_pem(coordinator.key)})
                if self.path == "/v1/me":  # enrol checks the credential; a release the budget
                    return self._answer(200, {
                        "participant": "h1",
                        "epsilon_cap": "1000", "delta_cap": "0.5", "epsilon_spent": "0",
                        "delta_spent": "0", "epsilon_remaining": "1000",
                        "delta_remaining": "0.5"})
                who.config_at = time.monotonic()
                return self._answer(200, coordinator.signed)

            def do_POST(self):  # noqa: N802
                at = time.monotonic()
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path == "/v1/me/identity-key":  # enrol registers it; not a release
                    return self._answer(200, {})
                who = coordinator.seen.setdefault(self.headers.get("Authorization", ""), Seen())
                who.posts.append((at, body))
                return self._answer(201, {"id": len(who.posts), "model_version": 1})

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def issue(self, study: str, version: int, features, *, grid=None, eps_lsh="0.5",
              eps_grid="0", delta="0"):
        config = new_study_config(
            study, features, version=version, n_tables=10, grid=grid,
            privacy=PrivacyParams(epsilon_lsh=eps_lsh, epsilon_grid=eps_grid, delta_grid=delta))
        self.signed = sign_config(config, self.key).model_dump_json()
        self.seen = {}
        return config

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def feats(a=(0.0, 1.0), names=NAMES):
    return [FeatureSpec(name=n, lo=a[0] if n == "a" else 0.0, hi=a[1] if n == "a" else 1.0)
            for n in names]


# (what the coordinator tries, config kwargs, extra participant flags, released?)
SEQUENCE = [
    ("baseline, LSH only", dict(features=feats()), [], True),
    ("upper bound of a just below the target, clipped",
     dict(features=feats((0.0, 0.95)), grid=GridParams(bins=4, features=["a"]),
          eps_grid="0.5"), [], True),
    ("same bounds, participant asks to refuse out-of-bounds values",
     dict(features=feats((0.0, 0.95))), ["--out-of-bounds", "error"], False),
    ("1024 bins isolating the target's bin of a",
     dict(features=feats((0.96, 0.98)), grid=GridParams(bins=1024, features=["a"]),
          eps_grid="0.5"), [], True),
    ("sparse 1024**3 grid around the target",
     dict(features=feats((0.9, 1.0)), grid=GridParams(bins=1024, features=["a", "b", "c"]),
          eps_grid="0.5", delta="1e-6"), [], True),
    ("grid on other features", dict(features=feats(), grid=GridParams(bins=8, features=["b",
     "c"]), eps_grid="0.5"), [], True),
    ("one almost noiseless release", dict(features=feats(), eps_lsh="3"), [], False),
    ("the ignored label becomes a feature", dict(features=feats(names=(*NAMES, "label"))), [],
     False),
    ("a column dropped from the release", dict(features=feats(names=NAMES[:3])), [], False),
    ("bounds moved again after the refusals", dict(features=feats((0.5, 0.975))), [], True),
]


def write_data(path: Path, target: bool) -> None:
    rng = np.random.default_rng(11)
    X = rng.uniform(0.0, 0.9, size=(300, 4))
    if target:
        X = np.vstack([X[:150], [[TARGET_A, 0.5, 0.5, 0.5]], X[150:]])
    lines = ["pid,a,b,c,d,label"] + [
        f"p{i},{','.join(f'{v:.6f}' for v in row)},{i % 2}" for i, row in enumerate(X)]
    path.write_text("\n".join(lines) + "\n")


DRIVER = """
import contextlib, io, json, sys
from participant.cli.main import main
for line in sys.stdin:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(json.loads(line))
        except SystemExit as exc:
            code = exc.code
    print(json.dumps([code, out.getvalue(), err.getvalue()]), flush=True)
"""


class Participant:
    """One real participant process (``participant.cli.main.main`` driven over a pipe, so the
    imports are paid once); each command is a full CLI invocation inside it."""

    def __init__(self, root: Path, name: str, target: bool, coordinator: AdversaryCoordinator):
        self.state, self.data, self.token = root / name / "state", root / f"{name}.csv", name
        self.data.parent.mkdir(exist_ok=True)
        write_data(self.data, target)
        self.proc = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "FEDOD_SEND_SLOT": str(SLOT)})
        token_file = root / f"{name}.token"
        token_file.write_text(name)
        code, _, err = self.run("enrol", "--coordinator", coordinator.url, "--fingerprint",
                                key_fingerprint(coordinator.key), "--token-file",
                                str(token_file), "--epsilon-cap", "20", "--delta-cap", "1e-4")
        assert code == 0, err

    def send(self, *args: str) -> None:
        argv = ["--state", str(self.state), "--no-progress", "--json", *args]
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()

    def receive(self) -> tuple[int, str, str]:
        line = self.proc.stdout.readline()
        assert line, f"participant process exited with {self.proc.wait()}"
        return tuple(json.loads(line))

    def run(self, *args: str) -> tuple[int, str, str]:
        self.send(*args)
        return self.receive()

    def contribute(self, study: str, flags: list[str]) -> None:
        self.send("contribute", study, str(self.data), "--id-column", "pid",
                  "--ignore-column", "label", *flags)

    def ledger(self) -> dict:
        return json.loads(self.run("ledger")[1])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture
def adversary(tmp_path):
    coordinator = AdversaryCoordinator()
    pair = {"without": Participant(tmp_path, "without", False, coordinator),
            "with": Participant(tmp_path, "with", True, coordinator)}
    yield coordinator, pair
    for participant in pair.values():
        participant.close()
    coordinator.close()


def run_both(coordinator, pair, study, flags):
    """Run both participants on the current config at once; return what each run showed."""
    for participant in pair.values():
        participant.contribute(study, flags)
    return {k: (*p.receive(), coordinator.seen.get(f"Bearer {k}", Seen()))
            for k, p in pair.items()}


def check_body(body: bytes, config) -> int:
    """A valid release whose bytes are the canonical encoding of its counts; returns the
    decompressed size of a dense LSH vector (fixed by the config)."""
    doc = ContributionCreate.model_validate_json(body)
    assert doc.config_version == config.version
    for enc, cells in ((doc.lsh, config.lsh_cells), (doc.grid, config.grid_cells)):
        if enc is None:
            continue
        idx, values = decode_counts(enc, expected_cells=cells)
        again = encode_counts(values, indices=idx, n_cells=cells)
        assert again.model_dump() == enc.model_dump()  # nothing but the counts shapes the bytes
    return config.lsh_cells * np.dtype(doc.lsh.dtype).itemsize


def observe(attempt: str, results, config, released: bool) -> None:
    shapes = set()
    for name, (code, out, err, seen) in results.items():
        assert len(seen.posts) == (1 if released else 0), (attempt, name, code, err)
        if released:
            assert seen.config_at is not None, (attempt, name, err)
            assert code == 0, err
            posted_at, body = seen.posts[0]
            slots = json.loads(out)["send_slots"]  # 1 unless reading outlasted the slot
            assert slots >= 1 and posted_at - seen.config_at >= SLOT * slots  # never early
            shapes.add(check_body(body, config))
        else:
            assert code != 0 and ("nothing was read" in err.lower() or "always clips" in err), err
    assert len(shapes) <= 1


def test_what_the_coordinator_sees_does_not_depend_on_the_target(adversary):
    coordinator, pair = adversary
    codes: dict[str, list[int]] = {k: [] for k in pair}
    for version, (attempt, kwargs, flags, released) in enumerate(SEQUENCE, start=1):
        config = coordinator.issue("adv", version, **kwargs)
        results = run_both(coordinator, pair, "adv", flags)
        observe(attempt, results, config, released)
        for name, (code, *_rest) in results.items():
            codes[name].append(code)
    assert codes["with"] == codes["without"]  # even the local outcomes agree
    posts = sum(released for *_x, released in SEQUENCE)
    for participant in pair.values():  # every release started was charged, once per POST
        ledger = participant.ledger()
        assert len(ledger["entries"]) == posts
        assert all(e["status"] == "acknowledged" for e in ledger["entries"])
        charged = sum(float(e["epsilon"]) for e in ledger["entries"])
        assert float(ledger["epsilon_spent"]) == pytest.approx(charged)


CRASH_GRID = dict(features=feats((0.965, 1.0)), grid=GridParams(bins=1024), eps_grid="0.5",
                  delta="1e-6")
"""1024**4 cells; a record in bin >= 2 of a has a cell index >= 2**31. Only the target is."""


def test_a_config_that_makes_the_target_crash_is_charged_and_still_posts(adversary):
    coordinator, pair = adversary
    config = coordinator.issue("crash", 1, **CRASH_GRID)
    results = run_both(coordinator, pair, "crash", [])
    for name, (_code, _out, err, seen) in results.items():
        assert len(seen.posts) == 1, (name, err)
        assert seen.posts[0][0] - seen.config_at >= SLOT
        check_body(seen.posts[0][1], config)
        (entry,) = pair[name].ledger()["entries"]
        assert entry["status"] == "acknowledged" and float(entry["epsilon"]) == 1


def test_a_valid_file_is_never_replaced_by_a_noise_only_substitute(adversary):
    coordinator, pair = adversary
    coordinator.issue("crash", 1, **CRASH_GRID)
    results = run_both(coordinator, pair, "crash", [])
    for name, (code, _out, err, _seen) in results.items():
        assert code == 0, (name, err)
        (entry,) = pair[name].ledger()["entries"]
        assert not (entry["detail"] or "").startswith("noise-only substitute"), entry
