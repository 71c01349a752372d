"""The participant's charged release, written once for every kind of release.

Every release (independent, secure round, cohort round; a stream window's charge) takes the
same steps, each durable before the next::

    reserve in the local ledger (cap re-checked; charged from here on, never refunded)
    ─► read the data, or zeros when it cannot be used ─► draw the noise once
    ─► store the noisy release durably ─► mark the ledger

What differs between the kinds is passed in: how the noisy release is made (``make``: read
or substitute zeros, then noise, see :func:`or_noise_only`), where it is stored (``store``),
the status it ends in (``stored`` for the outbox of an independent release, ``kept`` for a
release its own protocol sends; :mod:`participant.release.ledger`) and whether a failure
before it was stored is marked ``abandoned`` at once. The cost is computed once per release
(:class:`Charge`) and is what the ledger reserves, what the caps are checked against and what
the body claims.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from common.budget import PrivacyBudget
from participant.release.ledger import Ledger, LedgerEntry

T = TypeVar("T")


@dataclass(frozen=True)
class Charge:
    """One release's ledger charge: its key, what it was made under and its one cost."""

    key: str
    study: str
    config_version: int
    config_digest: str
    cost: PrivacyBudget
    cap: PrivacyBudget

    def reserve(self, ledger: Ledger) -> None:
        """Record the release as ``intended`` after checking the cap, atomically."""
        ledger.reserve(idempotency_key=self.key, study=self.study,
                       config_version=self.config_version, config_digest=self.config_digest,
                       cost=self.cost, cap=self.cap)


def or_noise_only(
    from_data: Callable[[], T], without_data: Callable[[], T]
) -> tuple[T, str | None]:
    """``from_data()``, or ``without_data()`` (the release of an empty dataset) when the data
    cannot be used; with the local-only reason in that case. Whether a release goes out must
    not depend on the data."""
    try:
        return from_data(), None
    except Exception as exc:  # noqa: BLE001 - the data must not decide whether it goes out
        return without_data(), f"{type(exc).__name__}: {exc}"


def charged_release(
    ledger: Ledger,
    charge: Charge,
    *,
    make: Callable[[], tuple[T, str | None]],
    store: Callable[[T, str | None], None],
    status: str,
    detail: Callable[[str | None], str | None],
    known: LedgerEntry | None = None,
    abandon_on_failure: bool = False,
) -> tuple[T, str | None]:
    """Reserve ``charge`` (unless ``known``: an earlier run reserved it and the release is
    made under that one charge), make the noisy release once, store it, mark it ``status``.

    ``make`` returns the release and, when it is a noise-only substitute, the reason;
    ``detail`` turns that reason into the ledger's detail. With ``abandon_on_failure`` a
    failure before the release was stored marks it ``abandoned`` (it stays charged);
    otherwise it stays ``intended`` for the next run to settle.
    """
    if known is None:
        charge.reserve(ledger)
    try:
        release, substitute = make()
        store(release, substitute)
    except BaseException as exc:
        if abandon_on_failure:
            ledger.mark(charge.key, "abandoned",
                        detail=f"not stored ({type(exc).__name__}); charged")
        raise
    ledger.mark(charge.key, status, detail=detail(substitute))
    return release, substitute
