"""``fedod-consortium beacon``: the consortium key as the randomness beacon of sparse masking
graphs (:mod:`common.secagg.beacon`).

In a study whose masking graph can be bad (sparse, ``T >= k``; e.g. n = 1,000 at the defaults)
every attempt of a round waits, after the coordinator signed its roster, until the consortium
key signs that roster; members seed their graph from the signature. This command reads the
attempt waiting, checks its roster names certified members only (a bitmap over the membership
certificate this key signed, ``max(n - D, h_min)`` to ``n`` of them), refuses an attempt above
``A`` (:data:`~common.secagg.beacon.BEACON_ATTEMPTS`) and a second roster for an attempt it
signed already, records the signature in an append-only file (fsynced before it is sent) and
posts it::

    fedod-consortium beacon --key consortium.pem --coordinator https://coord.example.org \\
        --study s1 --record beacon-record.jsonl --once

With the roster signature it signs and posts, for each roster member, its draw count: how
many rosters of the study this key has signed that name it (:mod:`common.secagg.draws`),
counted from the record, which lists each signed roster's members. A retry re-sends the
recorded signature and the same statements (Ed25519 signatures are deterministic). The record
is what keeps the coordinator to ``A`` draws per round and each member to ``G`` draws between
two of its releases: keep it with the key, and never run two beacons on different records for
one key.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from common.secagg.beacon import BeaconRecord, decide, sign_beacon
from common.secagg.draws import draw_counts, sign_draw
from common.secagg.membership import SignedMembership, verify_membership
from common.secagg.messages import RosterBody, RoundRef, RoundRefused, b64e
from common.secagg.params import AggregationParams
from common.secagg.roster import from_bitmap
from common.secagg.schemas import BeaconCreate, BeaconDraw, BeaconPending
from common.study.signing import load_private_key

__all__ = ["BeaconRecordFile", "beacon_for", "add_parser"]


class BeaconRecordFile:
    """The append-only record of every roster this consortium key signed (JSON lines)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @contextmanager
    def locked(self) -> Iterator[list[BeaconRecord]]:
        """The records, under an exclusive lock held until the block ends (two runs never
        both decide to sign for one attempt)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            with open(self.path, encoding="utf-8") as f:
                lines = [line for line in f.read().splitlines() if line.strip()]
            yield [BeaconRecord(**json.loads(line)) for line in lines]
        finally:
            os.close(fd)  # releases the lock

    def append(self, record: BeaconRecord) -> None:
        """Add ``record`` durably (written and fsynced, with the directory entry) before the
        caller sends the signature."""
        line = json.dumps(dataclasses.asdict(record), sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _certified_roster(pending: BeaconPending, membership: SignedMembership,
                      key: Ed25519PrivateKey, now: datetime) -> tuple[str, list[str]]:
    """The roster's digest and members once it is checked: for this attempt, over members
    of the certificate this key signed, of an allowed size."""
    body = membership.body()
    params = AggregationParams(mode="secure", cohort_size=body.cohort_size,
                               max_dropouts=body.max_dropouts, max_colluders=body.max_colluders)
    verify_membership(membership, key.public_key(), study=pending.study_id, params=params,
                      now=now)
    try:
        roster = RosterBody.model_validate_json(pending.roster.payload)
    except ValueError as exc:
        raise RoundRefused(f"the coordinator served a malformed roster: {exc}") from exc
    served = (pending.study_id, pending.round, pending.attempt)
    if (roster.study_id, roster.round, roster.attempt) != served:
        raise RoundRefused(f"the roster is for {roster.round_id}, the coordinator says it "
                           f"waits for {'/'.join(map(str, served))}")
    names = from_bitmap(list(body.members), roster)  # certified members only
    floor = max(params.min_roster, params.require_h_min())
    if not floor <= len(names) <= body.cohort_size:
        raise RoundRefused(f"the roster names {len(names)} members; the certified cohort "
                           f"allows {floor} to {body.cohort_size}")
    return pending.roster.digest(), names


def beacon_for(pending: BeaconPending, membership: SignedMembership, key: Ed25519PrivateKey,
               record: BeaconRecordFile, now: datetime) -> BeaconCreate:
    """The beacon post for ``pending``: the recorded signature if this roster was signed
    before, else a new one, recorded durably first; refused (:class:`RoundRefused`) for a
    roster that is not certified, an attempt above the cap, or a second roster of an attempt."""
    digest, names = _certified_roster(pending, membership, key, now)
    ref = RoundRef(study_id=pending.study_id, round=pending.round, attempt=pending.attempt)
    with record.locked() as records:
        done = decide(records, ref, digest)
        if done is None:
            done = BeaconRecord(ref.study_id, ref.round, ref.attempt, digest,
                                sign_beacon(ref, digest, key), tuple(names))
            record.append(done)  # counted from now on, before any statement is sent
        counts = draw_counts(records, done)
    draws = {m: BeaconDraw(count=c, signature=sign_draw(ref, digest, m, c, key))
             for m, c in counts.items()}
    return BeaconCreate(attempt=ref.attempt, roster_digest=digest, signature=done.signature,
                        consortium_key=b64e(key.public_key().public_bytes_raw()), draws=draws)


def _beacon(args: argparse.Namespace) -> dict[str, Any]:
    from participant.client import CoordinatorClient, check_coordinator_url

    key = load_private_key(args.key)
    membership = SignedMembership.model_validate_json(Path(args.membership).read_text())
    record = BeaconRecordFile(Path(args.record))
    signed: list[dict[str, Any]] = []
    with CoordinatorClient(check_coordinator_url(args.coordinator), None,
                           patience=args.patience) as client:
        while True:
            text = client.get_beacon(args.study)
            if text is not None:
                pending = BeaconPending.model_validate_json(text)
                body = beacon_for(pending, membership, key, record, datetime.now(UTC))
                client.post_beacon(args.study, pending.round, body.model_dump_json().encode())
                done = {"study": args.study, "round": pending.round,
                        "attempt": pending.attempt, "roster_digest": body.roster_digest}
                signed.append(done)
                if not args.once:
                    print(json.dumps(done), flush=True)
            if args.once:
                return {"study": args.study, "signed": signed}
            time.sleep(args.poll)


def add_parser(sub: Any) -> None:
    """Register ``beacon`` on ``fedod-consortium``'s subcommands."""
    p = sub.add_parser(
        "beacon", help="sign the roster of each attempt waiting for the consortium's beacon "
        "(studies with a sparse masking graph that can be bad) and post the signature",
        description="Read the round attempt of STUDY that waits for the consortium's beacon, "
        "check that its roster names only members of the certificate this key signed, refuse "
        "an attempt above the cap and a second roster for one attempt, record the signature "
        "(fsynced) and post it. Safe to run again: a retry re-sends the recorded signature.")
    p.add_argument("--key", required=True, metavar="FILE", help="consortium private key PEM")
    p.add_argument("--coordinator", required=True, metavar="URL",
                   help="the coordinator's address, e.g. https://coordinator.example.org")
    p.add_argument("--study", required=True, metavar="STUDY")
    p.add_argument("--membership", required=True, metavar="FILE",
                   help="the membership certificate of STUDY this key signed (its members "
                   "decode the roster's bitmap)")
    p.add_argument("--record", required=True, metavar="FILE",
                   help="append-only record of the rosters this key signed (created if "
                   "missing; keep it with the key)")
    p.add_argument("--once", action="store_true",
                   help="one pass: sign and post what waits now, then exit (for cron or a "
                   "script); without it, keep watching every --poll seconds")
    p.add_argument("--poll", type=float, default=2.0, metavar="S",
                   help="seconds between reads while watching (2)")
    p.add_argument("--patience", type=float, default=60.0, metavar="S",
                   help="keep retrying an unreachable coordinator for S seconds (60)")
    p.set_defaults(run=_beacon)
