"""``fedod-consortium``: the consortium's data-protection officer certifies who may be in a
study's secure rounds (:mod:`common.secagg.membership`).

The consortium key is the hospitals' side's: the coordinator never holds it, so it cannot
invent members. Every hospital pins its public key at enrolment
(``fedod-participant enrol --consortium-key``) and sends the DPO its identity public key
(``fedod-participant identity``)::

    fedod-consortium keygen --out consortium.pem          # once; prints the public key
    fedod-consortium sign --key consortium.pem members.json > membership.json
    fedod-consortium certify --key consortium.pem --study study.json \
        --identity general.json --identity clinic.json --out membership.json
    fedod-consortium verify --consortium-key PUB membership.json
    # the coordinator's admin uploads it: PUT /v1/studies/<id>/membership
    fedod-consortium beacon --key consortium.pem --coordinator URL --study ID \
        --membership membership.json --record beacon-record.jsonl [--once]
    # studies whose sparse masking graph can be bad: sign each round attempt's roster
    # (participant.consortium.beacon, common.secagg.beacon)

``members.json`` is a :class:`~common.secagg.membership.MembershipBody`: study_id, version,
expires_at, cohort_size, max_dropouts, max_colluders and members (name -> identity key).
``certify`` builds and signs it from the study spec and the identity files the hospitals sent
(``fedod-participant identity --json``, or ``run --identity-out``), waiting for them if asked.
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import ValidationError

from common.errors import FedodError
from common.secagg.membership import (
    MembershipBody,
    SignedMembership,
    rotate_membership,
    sign_membership,
    verify_membership,
)
from common.secagg.messages import b64e
from common.secagg.params import AggregationParams
from common.study.signing import (
    generate_key,
    key_fingerprint,
    load_private_key,
    public_key_from_pem,
    save_private_key,
)
from participant.consortium import beacon

if TYPE_CHECKING:
    from participant.agent import Agent
    from participant.state import Enrolment

__all__ = ["load_consortium_key", "pin_consortium_key", "raw_key", "certify", "main"]


def raw_key(key: Ed25519PublicKey) -> str:
    """The raw 32-byte public key, base64 (the form pinned and printed)."""
    return b64e(key.public_bytes_raw())


def load_consortium_key(text: str) -> Ed25519PublicKey:
    """A consortium public key given as raw base64, as PEM, or as the path of a PEM file."""
    path = Path(text)
    if len(text) < 4096 and path.is_file():
        text = path.read_text()
    if "-----BEGIN" in text:
        return public_key_from_pem(text)
    try:
        raw = base64.b64decode(text.strip(), validate=True)
        return Ed25519PublicKey.from_public_bytes(raw)
    except (binascii.Error, ValueError) as exc:
        raise ValueError(
            "--consortium-key must be the consortium's Ed25519 public key: raw base64 "
            "(44 characters, as 'fedod-consortium keygen' prints it), PEM, or a PEM file"
        ) from exc


def pin_consortium_key(agent: Agent, text: str) -> Enrolment:
    """Store the consortium's public key next to the pinned coordinator key (``enrol`` and
    ``run --consortium-key``)."""
    e = dataclasses.replace(agent.state.load_enrolment(),
                            consortium_key=raw_key(load_consortium_key(text)))
    agent.state.save_enrolment(e, agent.state.load_key_pem())
    return e


def certify(
    study: str,
    params: AggregationParams,
    members: dict[str, str],
    key: Ed25519PrivateKey,
    *,
    expires_at: datetime,
    version: int = 1,
) -> SignedMembership:
    """Sign the membership of ``study``: ``members`` (name -> raw identity key, base64),
    exactly ``params.cohort_size`` of them, certified for ``params``'s (n, D, T)."""
    body = MembershipBody(
        study_id=study, version=version, expires_at=expires_at,
        cohort_size=params.cohort_size or 0, max_dropouts=params.max_dropouts,
        max_colluders=params.max_colluders, members=members,
    )
    return sign_membership(body, key)


def _keygen(args: argparse.Namespace) -> dict[str, str]:
    out = Path(args.out)
    if out.exists() and not args.keep_existing:
        raise FileExistsError(f"{out} exists; refusing to overwrite a consortium key "
                              "(--keep-existing reuses it)")
    if not out.exists():
        save_private_key(generate_key(), out)
    key = load_private_key(out)
    public = raw_key(key.public_key())
    if args.public_out:
        Path(args.public_out).write_text(public + "\n")
    return {"private_key": str(out), "public_key": public, "fingerprint": key_fingerprint(key)}


def _identities(paths: list[str], wait: float) -> dict[str, str]:
    """name -> identity key from the hospitals' identity files (``{"participant": ...,
    "identity_key": ...}``), waiting up to ``wait`` seconds for the files to appear."""
    give_up = time.monotonic() + wait
    while missing := [p for p in paths if not Path(p).is_file()]:
        if time.monotonic() > give_up:
            raise FileNotFoundError(f"no identity file at {', '.join(missing)} after {wait:g} s")
        time.sleep(0.5)
    members = {}
    for path in paths:
        doc = json.loads(Path(path).read_text())
        members[str(doc["participant"])] = str(doc["identity_key"])
    return members


def _certify(args: argparse.Namespace) -> dict[str, object]:
    from common.study.spec import load_study_spec

    spec = load_study_spec(Path(args.study).read_text())
    params = spec.aggregation
    if params is None or params.mode != "secure":
        raise ValueError(f"{args.study}: the study does not use secure aggregation")
    return _written(certify(spec.study_id, params, _identities(args.identity, args.wait),
                            load_private_key(args.key), version=args.version,
                            expires_at=datetime.now(UTC) + timedelta(days=args.valid_days)),
                    args.out)


def _written(signed: SignedMembership, out: str | None) -> dict[str, object]:
    """The certificate as printed, also written to ``out`` when given."""
    doc = signed.model_dump()
    if out:
        Path(out).write_text(json.dumps(doc, indent=2, default=str))
    return doc


def _rotate(args: argparse.Namespace) -> dict[str, object]:
    [(member, identity)] = _identities([args.identity], 0.0).items()
    current = SignedMembership.model_validate_json(Path(args.membership).read_text())
    return _written(rotate_membership(
        current, load_private_key(args.key), member=member, identity_key=identity,
        expires_at=datetime.now(UTC) + timedelta(days=args.valid_days)), args.out)


def _sign(args: argparse.Namespace) -> dict[str, object]:
    body = MembershipBody.model_validate_json(Path(args.members).read_text())
    signed = sign_membership(body, load_private_key(args.key))
    return signed.model_dump()


def _verify(args: argparse.Namespace) -> dict[str, object]:
    signed = SignedMembership.model_validate_json(Path(args.membership).read_text())
    body = signed.body()
    params = AggregationParams(mode="secure", cohort_size=body.cohort_size,
                               max_dropouts=body.max_dropouts, max_colluders=body.max_colluders)
    verify_membership(signed, load_consortium_key(args.consortium_key), study=body.study_id,
                      params=params, now=datetime.now(UTC))
    return {"verified": True, **json.loads(signed.payload)}


def _show(args: argparse.Namespace) -> dict[str, object]:
    signed = SignedMembership.model_validate_json(Path(args.membership).read_text())
    return {"verified": False, "digest": signed.digest(), **json.loads(signed.payload)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fedod-consortium",
        description="Certify the members of a study's secure rounds with the consortium key "
        "(kept by the hospitals' data-protection officer, never by the coordinator).")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("keygen", help="create the consortium key (private PEM, mode 0600); "
                       "print its public key (pin it with 'enrol --consortium-key') and "
                       "fingerprint")
    p.add_argument("--out", required=True, metavar="FILE")
    p.add_argument("--public-out", metavar="FILE",
                   help="also write the public key (base64) to FILE, for the hospitals")
    p.add_argument("--keep-existing", action="store_true",
                   help="reuse the key at --out if it exists (rerun-safe set-up)")
    p.set_defaults(run=_keygen)
    p = sub.add_parser("certify", help="build the members file from the study spec and the "
                       "hospitals' identity files, sign it and print the certificate")
    p.add_argument("--key", required=True, metavar="FILE", help="consortium private key PEM")
    p.add_argument("--study", required=True, metavar="SPEC",
                   help="the study spec (StudyCreate JSON) whose aggregation is certified")
    p.add_argument("--identity", action="append", required=True, metavar="FILE",
                   help="a member's identity file (repeat for each member)")
    p.add_argument("--wait", type=float, default=0.0, metavar="S",
                   help="wait up to S seconds for the identity files to appear (0)")
    p.add_argument("--valid-days", type=int, default=30, metavar="N",
                   help="days until the certificate expires (30)")
    p.add_argument("--version", type=int, default=1, help="certificate version (1)")
    p.add_argument("--out", metavar="FILE", help="also write the certificate to FILE")
    p.set_defaults(run=_certify)
    p = sub.add_parser("rotate", help="rotate (or revoke) one member's identity key: the "
                       "certificate's next version with the member's new key from its "
                       "identity file; upload it, and every member that verifies it refuses "
                       "the older versions (and so the old key) from then on")
    p.add_argument("--key", required=True, metavar="FILE", help="consortium private key PEM")
    p.add_argument("--membership", required=True, metavar="FILE",
                   help="the current certificate (signed by this key)")
    p.add_argument("--identity", required=True, metavar="FILE",
                   help="the member's identity file with its NEW identity key")
    p.add_argument("--valid-days", type=int, default=30, metavar="N",
                   help="days until the new certificate expires (30)")
    p.add_argument("--out", metavar="FILE", help="also write the certificate to FILE")
    p.set_defaults(run=_rotate)
    p = sub.add_parser("sign", help="sign a members file (study_id, version, expires_at, "
                       "cohort_size, max_dropouts, max_colluders, members: name -> identity "
                       "key) into a membership certificate (JSON on stdout)")
    p.add_argument("--key", required=True, metavar="FILE", help="consortium private key PEM")
    p.add_argument("members", metavar="MEMBERS_JSON")
    p.set_defaults(run=_sign)
    p = sub.add_parser("verify", help="check a certificate's signature and expiry and print it")
    p.add_argument("--consortium-key", required=True, metavar="KEY",
                   help="public key: base64, PEM, or a PEM file")
    p.add_argument("membership", metavar="MEMBERSHIP_JSON")
    p.set_defaults(run=_verify)
    p = sub.add_parser("show", help="print a certificate WITHOUT checking its signature")
    p.add_argument("membership", metavar="MEMBERSHIP_JSON")
    p.set_defaults(run=_show)
    beacon.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from common.cli import quiet_broken_pipe

    return quiet_broken_pipe(lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result = args.run(args)
    except (FedodError, ValidationError, ValueError, OSError) as exc:
        print(f"fedod-consortium: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
