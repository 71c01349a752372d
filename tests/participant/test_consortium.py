"""fedod-consortium: keygen (0600), sign, verify, show; the key forms --consortium-key takes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg.messages import b64e
from common.study.signing import public_key_pem
from participant.consortium.cli import load_consortium_key, main, raw_key


def test_keygen_sign_verify_show(tmp_path, capsys):
    key = tmp_path / "consortium.pem"
    assert main(["keygen", "--out", str(key)]) == 0
    made = json.loads(capsys.readouterr().out)
    assert key.stat().st_mode & 0o777 == 0o600 and made["fingerprint"].startswith("sha256:")
    assert main(["keygen", "--out", str(key)]) == 1  # never overwritten
    capsys.readouterr()
    members = {f"h{i}": b64e(Ed25519PrivateKey.generate().public_key().public_bytes_raw())
               for i in range(3)}
    (tmp_path / "members.json").write_text(json.dumps({
        "study_id": "s1", "version": 1,
        "expires_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
        "cohort_size": 3, "max_dropouts": 0, "max_colluders": 1, "members": members}))
    assert main(["sign", "--key", str(key), str(tmp_path / "members.json")]) == 0
    (tmp_path / "membership.json").write_text(capsys.readouterr().out)
    assert main(["verify", "--consortium-key", made["public_key"],
                 str(tmp_path / "membership.json")]) == 0
    assert json.loads(capsys.readouterr().out)["members"] == members
    other = raw_key(Ed25519PrivateKey.generate().public_key())
    assert main(["verify", "--consortium-key", other, str(tmp_path / "membership.json")]) == 1
    assert "not signed by the consortium key" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "membership.json")]) == 0
    assert json.loads(capsys.readouterr().out)["verified"] is False


def test_consortium_key_forms(tmp_path):
    key = Ed25519PrivateKey.generate().public_key()
    pem = tmp_path / "pub.pem"
    pem.write_text(public_key_pem(key))
    for form in (raw_key(key), public_key_pem(key), str(pem)):
        assert raw_key(load_consortium_key(form)) == raw_key(key)
    with pytest.raises(ValueError, match="consortium-key"):
        load_consortium_key("not a key")


def test_rotate_signs_the_next_version_with_the_members_new_key(tmp_path, capsys):
    key = tmp_path / "consortium.pem"
    assert main(["keygen", "--out", str(key)]) == 0
    public = json.loads(capsys.readouterr().out)["public_key"]
    members = {f"h{i}": b64e(Ed25519PrivateKey.generate().public_key().public_bytes_raw())
               for i in range(3)}
    (tmp_path / "members.json").write_text(json.dumps({
        "study_id": "s1", "version": 4,
        "expires_at": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
        "cohort_size": 3, "max_dropouts": 0, "max_colluders": 1, "members": members}))
    assert main(["sign", "--key", str(key), str(tmp_path / "members.json")]) == 0
    (tmp_path / "v4.json").write_text(capsys.readouterr().out)
    fresh = b64e(Ed25519PrivateKey.generate().public_key().public_bytes_raw())
    (tmp_path / "h1.json").write_text(json.dumps({"participant": "h1", "identity_key": fresh}))
    assert main(["rotate", "--key", str(key), "--membership", str(tmp_path / "v4.json"),
                 "--identity", str(tmp_path / "h1.json"), "--valid-days", "365",
                 "--out", str(tmp_path / "v5.json")]) == 0
    capsys.readouterr()
    assert main(["verify", "--consortium-key", public, str(tmp_path / "v5.json")]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["version"] == 5 and body["members"] == {**members, "h1": fresh}
    assert main(["rotate", "--key", str(key), "--membership", str(tmp_path / "v5.json"),
                 "--identity", str(tmp_path / "h1.json")]) == 1  # the same key again
    assert "already certified" in capsys.readouterr().err
