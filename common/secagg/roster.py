"""A roster read back: who is in (a bitmap over the certified members), the masking graph its
digest fixes (:mod:`common.secagg.graph`), and the advert frames of the members the reader
needs (the coordinator: all of them; a member: its graph neighbours), each verified under the
identity key the consortium certified for it."""

from __future__ import annotations

import base64
import functools
import hashlib
from dataclasses import dataclass

from common.secagg.graph import MaskingGraph
from common.secagg.messages import AdvertBody, RosterBody, RoundRefused, b64d, b64e
from common.secagg.wire import (
    ACK_TAG_BYTES,
    COMMITMENT_BYTES,
    HEADER_BYTES,
    SEALED_SHARE_BYTES,
    SIGNATURE_BYTES,
    open_advert,
)

__all__ = ["VerifiedRoster", "to_bitmap", "from_bitmap", "adverts_digest", "read_adverts",
           "pack_for", "unpack_for", "decode_bitmap"]


@dataclass(frozen=True)
class VerifiedRoster:
    """A roster whose signature, size and member set have been checked; ``members`` holds the
    verified adverts of those the reader needs; ``beacon``, in a beacon study, the verified
    consortium signature over its digest (:mod:`common.secagg.beacon`) that seeds the graph."""

    body: RosterBody
    digest: str
    names: list[str]
    members: dict[str, AdvertBody]
    beacon: bytes | None = None

    @functools.cached_property
    def graph(self) -> MaskingGraph:
        return MaskingGraph(self.names, self.digest, self.body.degree, self.beacon)

    def holders(self, owner: str) -> list[str]:
        """``owner``'s graph neighbours: they hold its seed's shares (in its masked frame's
        order) and mask with it."""
        return self.graph.neighbours(owner)

    def share_index(self, owner: str, holder: str) -> int:
        """Shamir index of ``holder``'s share of ``owner``'s seed."""
        return self.graph.share_index(owner, holder)

    def shares_size(self) -> int:
        """Bytes after the masked words: the seed commitment, the sealed shares, then the
        roster acknowledgements (one per graph neighbour each)."""
        return COMMITMENT_BYTES + (SEALED_SHARE_BYTES + ACK_TAG_BYTES) * self.graph.degree


def to_bitmap(universe: list[str], names: list[str]) -> str:
    """``names`` (a subset of ``universe``, the certified members) as a base64 bitmap."""
    index = {name: i for i, name in enumerate(sorted(universe))}
    bits = bytearray(-(-len(index) // 8))
    for name in names:
        i = index[name]
        bits[i // 8] |= 1 << (i % 8)
    return b64e(bytes(bits))


def decode_bitmap(universe: list[str], text: str, what: str = "roster bitmap") -> list[str]:
    """The names a base64 bitmap over ``universe`` (sorted) sets, refused unless it is exactly
    as long as the universe needs and its padding bits are zero."""
    ordered = sorted(universe)
    bits = b64d(text)
    if len(bits) != -(-len(ordered) // 8):
        raise RoundRefused(f"{what} is {len(bits)} bytes; {len(ordered)} members need "
                           f"{-(-len(ordered) // 8)}")
    flags = [(bits[i // 8] >> (i % 8)) & 1 for i in range(8 * len(bits))]
    if any(flags[len(ordered):]):
        raise RoundRefused(f"{what} names members beyond the certificate")
    return [name for name, bit in zip(ordered, flags, strict=False) if bit]


def from_bitmap(universe: list[str], body: RosterBody) -> list[str]:
    """The roster's names (sorted), refused unless the bitmap is exactly as long as the
    certificate needs, its padding bits are zero and it names ``body.size`` members."""
    names = decode_bitmap(universe, body.members)
    if len(names) != body.size:
        raise RoundRefused(f"roster bitmap names {len(names)} members, its size says {body.size}")
    return names


def parse_advert(frame: bytes, *, ref: RosterBody, sender: str, identity: str) -> AdvertBody:
    """An advert frame's fields, its signature not checked again."""
    body = frame[HEADER_BYTES:-SIGNATURE_BYTES]
    return AdvertBody(**ref.ref().model_dump(), participant=sender, identity_key=identity,
                      round_key=b64e(body))


def pack_for(roster: VerifiedRoster, me: str, items: dict[str, bytes], skip: int = 0) -> str:
    """``me``'s graph neighbours' items (each without its first ``skip`` bytes: a header
    the reader rebuilds), concatenated in neighbour order, base85 (RFC 1924 alphabet, JSON-safe:
    5 characters per 4 bytes, against base64's 4 per 3): no names, no separators."""
    return base64.b85encode(b"".join(items[name][skip:] for name in roster.holders(me))).decode()


def unpack_for(roster: VerifiedRoster, me: str, text: str, size: int, head: bytes = b""
               ) -> dict[str, bytes] | None:
    """Inverse of :func:`pack_for` (``head`` put back on each item); None unless ``text``
    holds exactly one ``size``-byte item per neighbour."""
    try:
        data = base64.b85decode(text)
    except ValueError:
        return None
    near = roster.holders(me)
    if len(data) != size * len(near):
        return None
    return {name: head + data[i * size:(i + 1) * size] for i, name in enumerate(near)}


def adverts_digest(frames: dict[str, bytes]) -> str:
    return hashlib.sha256(
        b"".join(hashlib.sha256(frames[name]).digest() for name in sorted(frames))).hexdigest()


def read_adverts(body: RosterBody, frames: dict[str, bytes], identities: dict[str, str],
                 *, verified: bool = False) -> dict[str, AdvertBody]:
    """Each advert frame verified under the identity key certified for its sender (raw
    Ed25519, base64); refused if two carry the same X25519 key. ``verified``: the frames
    were verified when they were accepted (the coordinator's own store), only parsed here."""
    members = {
        name: (parse_advert(frame, ref=body, sender=name, identity=identities[name])
               if verified else open_advert(frame, ref=body, sender=name,
                                            identity=b64d(identities[name], size=32)))
        for name, frame in frames.items()
    }
    keys = [m.round_key for m in members.values()]
    if len(set(keys)) != len(keys):
        raise RoundRefused("roster repeats a key")
    return members
