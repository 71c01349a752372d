"""Study config validation, canonical JSON and Ed25519 signing."""

from __future__ import annotations

import base64
import json
import logging
import os
import stat
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from config_kit import NOW, doc, grid_doc, make
from pydantic import ValidationError

from common.budget import PrivacyBudget
from common.errors import ConfigDowngrade, ConfigExpired, SignatureInvalid
from common.study.config import (
    GridParams,
    PrivacyParams,
    StudyConfig,
    canonical_json,
)
from common.study.signing import (
    SignedConfig,
    generate_key,
    key_fingerprint,
    load_private_key,
    public_key_from_pem,
    public_key_pem,
    save_private_key,
    sign_config,
    verify_config,
)

KEY = generate_key()


def resign(payload: dict[str, Any] | bytes) -> SignedConfig:
    raw = payload if isinstance(payload, bytes) else canonical_json(payload)
    return SignedConfig(
        payload=raw.decode(),
        signature=base64.b64encode(KEY.sign(b"fedod-config/1\x00" + raw)).decode(),
        key_id=key_fingerprint(KEY),
    )


def test_canonical_json_form() -> None:
    config = make(
        privacy=PrivacyParams(epsilon_lsh="0.50", epsilon_grid="1", delta_grid=0),
        grid=GridParams(bins=3),
    )
    raw = canonical_json(config)
    assert b" " not in raw and raw.startswith(b'{"expires_at":"2027-11-23T12:00:00Z"')
    assert b'"epsilon_lsh":"0.5"' in raw and b'"delta_grid":"0"' in raw
    assert list(json.loads(raw)) == sorted(json.loads(raw))
    assert StudyConfig.model_validate_json(raw) == config


def test_sign_verify_round_trip() -> None:
    config = make()
    signed = sign_config(config, KEY)
    got = verify_config(signed, KEY.public_key(), newest_seen=1, now=NOW)
    assert got == config
    assert got.release_cost() == PrivacyBudget("0.5")
    assert got.lsh_cells == got.lsh_family().n_cells > 0
    assert len(signed.digest()) == 64


def test_any_flipped_byte_is_refused() -> None:
    signed = sign_config(make(), KEY)
    raw = signed.payload.encode()
    for pos in range(0, len(raw), 7):
        flipped = bytearray(raw)
        flipped[pos] ^= 0x01
        try:
            tampered = signed.model_copy(update={"payload": flipped.decode()})
        except UnicodeDecodeError:
            continue
        with pytest.raises(SignatureInvalid):
            verify_config(tampered, KEY.public_key(), now=NOW)


def test_flipped_signature_and_wrong_key() -> None:
    signed = sign_config(make(), KEY)
    sig = bytearray(base64.b64decode(signed.signature))
    sig[10] ^= 0x80
    bad = signed.model_copy(update={"signature": base64.b64encode(bytes(sig)).decode()})
    with pytest.raises(SignatureInvalid, match="does not verify"):
        verify_config(bad, KEY.public_key(), now=NOW)
    other = generate_key()
    with pytest.raises(SignatureInvalid, match="pinned coordinator key"):
        verify_config(signed, other.public_key(), now=NOW)
    forged = sign_config(make(), other).model_copy(update={"key_id": key_fingerprint(KEY)})
    with pytest.raises(SignatureInvalid, match="does not verify"):
        verify_config(forged, KEY.public_key(), now=NOW)


def test_expired_and_downgrade() -> None:
    signed = sign_config(make(version=3, valid_days=1), KEY)
    with pytest.raises(ConfigExpired, match="fetch a fresh config"):
        verify_config(signed, KEY.public_key(), now=NOW + timedelta(days=1))
    with pytest.raises(ConfigDowngrade, match="older than v4"):
        verify_config(signed, KEY.public_key(), newest_seen=4, now=NOW)
    assert verify_config(signed, KEY.public_key(), newest_seen=3, now=NOW).version == 3


def test_lsh_digest_must_match_seed() -> None:
    d = doc(make())
    d["lsh"]["digest"] = "0" * 64
    with pytest.raises(SignatureInvalid, match="lsh.digest does not match"):
        verify_config(resign(d), KEY.public_key(), now=NOW)
    with pytest.raises(ValueError, match="lsh.digest"):
        sign_config(StudyConfig.model_validate(d), KEY)


def test_non_canonical_payload_refused() -> None:
    raw = json.dumps(doc(make()), indent=1).encode()
    with pytest.raises(SignatureInvalid, match="canonical"):
        verify_config(resign(raw), KEY.public_key(), now=NOW)


def _with(path: str, value: Any) -> dict[str, Any]:
    d = doc(make())
    node = d
    *head, last = path.split(".")
    for part in head:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = value
    return d


@pytest.mark.parametrize(
    ("path", "value", "match"),
    [
        ("features.0.lo", 5.0, "must be < hi"),
        ("features.0.hi", 0.0, "must be < hi"),
        ("features.1.name", "x0", "unique"),
        ("features.1.name", "", "at least 1"),
        ("features.1.name", "  ", "blank"),
        ("features.0.lo", "0", "valid number"),
        ("lsh.n_tables", 0, "greater than or equal to 1"),
        ("lsh.n_tables", 1001, "less than or equal to 1000"),
        ("lsh.n_tables", 2.0, "valid integer"),
        ("lsh.seed", "xyz", "pattern"),
        ("privacy.epsilon_lsh", "0", "epsilon_lsh must be > 0"),
        ("privacy.epsilon_lsh", 0.5, "not a float"),
        ("privacy.epsilon_lsh", "-1", ">= 0"),
        ("privacy.epsilon_lsh", "NaN", "finite"),
        ("privacy.epsilon_lsh", "1e-12", "multiple"),
        ("privacy.epsilon_grid", "1", "must be 0 when there is no grid"),
        ("privacy.delta_grid", "0.5", "too large"),
        ("version", 0, "greater than or equal to 1"),
        ("version", 2**70, "less than or equal"),
        ("expires_at", "2026-01-01T00:00:00Z", "after issued_at"),
        ("issued_at", "2026-01-01T00:00:00", "timezone"),
        ("study_id", "bad id!", "pattern"),
        ("surprise", 1, "Extra inputs"),
    ],
)
def test_invalid_configs(path: str, value: Any, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        StudyConfig.model_validate_json(json.dumps(_with(path, value)))


@pytest.mark.parametrize(
    ("grid", "eps", "delta", "match"),
    [
        ({"bins": 4}, "0", "0", "needs epsilon_grid > 0"),
        ({"bins": 10, "cell_limit": 1000}, "1", "0", "released sparsely and needs delta_grid"),
        ({"bins": 4}, "1", "1e-6", "must be 0 for a dense grid"),
        ({"bins": 4, "features": ["x0", "nope"]}, "1", "0", "not in the schema"),
        ({"bins": 4, "features": ["x0", "x0"]}, "1", "0", "distinct"),
        ({"bins": 4, "features": []}, "1", "0", "distinct"),
        ({"bins": 0}, "1", "0", "greater than or equal to 1"),
    ],
)
def test_invalid_grids(grid: dict[str, Any], eps: str, delta: str, match: str) -> None:
    with pytest.raises(ValidationError, match=match):
        StudyConfig.model_validate(grid_doc(grid, eps, delta))


def test_grid_layouts_and_cost() -> None:
    dense = StudyConfig.model_validate(grid_doc({"bins": 3, "features": ["x1", "x3"]}))
    assert dense.grid_cells == 9 and dense.grid_layout == "dense"
    spec = dense.grid_spec()
    assert spec is not None and spec.n_cells == 9 and spec.features == (1, 3)
    sparse = StudyConfig.model_validate(
        grid_doc({"bins": 10, "cell_limit": 1000}, eps="0.25", delta="1e-6")
    )
    assert sparse.grid_cells == 10_000 and sparse.grid_layout == "sparse"
    assert sparse.release_cost() == PrivacyBudget("0.75", "0.000001")
    assert make().grid_spec() is None and make().grid_layout is None


def test_large_epsilon_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="common.study.config"):
        make(privacy=PrivacyParams(epsilon_lsh="11"))
    assert "weak privacy" in caplog.text


def test_keys(tmp_path: Path) -> None:
    path = tmp_path / "coordinator.pem"
    save_private_key(KEY, path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    loaded = load_private_key(path)
    assert key_fingerprint(loaded) == key_fingerprint(KEY.public_key())
    pub = public_key_from_pem(public_key_pem(KEY))
    assert key_fingerprint(pub).startswith("sha256:") and len(key_fingerprint(pub)) == 71
    signed = sign_config(make(), loaded)
    assert verify_config(signed, pub, now=NOW).study_id == "study-1"
    with pytest.raises(ValueError):
        public_key_from_pem("not a pem")


def test_epsilon_decimal_in_model() -> None:
    p = PrivacyParams(epsilon_lsh=Decimal("0.1"), epsilon_grid=1)
    assert p.model_dump(mode="json") == {
        "epsilon_lsh": "0.1",
        "epsilon_grid": "1",
        "delta_grid": "0",
    }
    assert PrivacyParams.model_json_schema()["properties"]["epsilon_lsh"]["type"] == "string"


def test_both_parses_of_a_signed_config_read_left_out_keys_as_signed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The participant's verification and the coordinator's config cache parse canonical
    bytes in the canonical context: a key the signed form left out reads as its signed value
    (``SIGNED_AT``), not as today's default (simulated: a signed ``eta`` of 0.02)."""
    from common.online import OnlineParams
    from common.online.params import SIGNED_AT
    from coordinator.services.studies import parse_config

    monkeypatch.setitem(SIGNED_AT, "eta", 0.02)
    signed = sign_config(make(online=OnlineParams(dim=5, eta=0.02)), KEY)
    assert b'"eta"' not in signed.payload.encode()
    for got in (verify_config(signed, KEY.public_key(), now=NOW),
                parse_config.__wrapped__(signed.payload)):
        assert got.online is not None and got.online.eta == 0.02
    fresh = verify_config(sign_config(make(online=OnlineParams(dim=5)), KEY), KEY.public_key(),
                          now=NOW)
    assert fresh.online is not None and fresh.online.eta == 0.01
