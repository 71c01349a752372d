"""A roster read back: every member's advert frame verified under its identity key."""

from __future__ import annotations

from dataclasses import dataclass

from common.secagg.messages import AdvertBody, RosterBody, RoundRefused, b64d
from common.secagg.wire import ACK_BYTES, SEALED_SHARE_BYTES, open_advert

__all__ = ["VerifiedRoster", "read_members"]


@dataclass(frozen=True)
class VerifiedRoster:
    """A roster whose every signature and size has been checked."""

    body: RosterBody
    digest: str
    members: dict[str, AdvertBody]

    @property
    def names(self) -> list[str]:
        return sorted(self.members)

    def position(self, name: str) -> int:
        """Shamir index of ``name``'s shares (its roster position + 1)."""
        return self.names.index(name) + 1

    def holders(self, owner: str) -> list[str]:
        """Who holds a share of ``owner``'s seed, in the order of its masked frame."""
        return [n for n in self.names if n != owner]

    def shares_size(self) -> int:
        """Bytes after the masked words: sealed shares, then the roster acknowledgement."""
        return SEALED_SHARE_BYTES * (len(self.members) - 1) + ACK_BYTES


def read_members(body: RosterBody) -> dict[str, AdvertBody]:
    """Each member's advert, verified under the identity key the roster lists for it; refused
    if a name is out of order or repeated, or a key repeated."""
    names = [m.participant for m in body.members]
    if names != sorted(set(names)):
        raise RoundRefused("roster members must be sorted by name, each once")
    members = {
        m.participant: open_advert(
            b64d(m.advert), ref=body, sender=m.participant, identity=b64d(m.identity_key, size=32)
        )
        for m in body.members
    }
    keys = [m.identity_key for m in members.values()] + [m.round_key for m in members.values()]
    if len(set(keys)) != len(keys):
        raise RoundRefused("roster repeats a key")
    return members
