"""Exact privacy budgets: values that compose by summation and never drift past a cap.

A :class:`PrivacyBudget` is an ``(epsilon, delta)`` pair held as :class:`~decimal.Decimal`
quantised to fixed units (epsilon to 1e-9, delta to 1e-18), so ten charges of 0.1 sum to
exactly 1 and a ledger can be stored as two BIGINT columns (:meth:`PrivacyBudget.to_units`).
Floats are refused outright: ``0.1`` as a float is not 0.1.

Composition is basic (sequential) composition: ``(e1, d1) + (e2, d2) = (e1 + e2, d1 + d2)``
(Dwork & Roth, *The Algorithmic Foundations of Differential Privacy*, Thm 3.16).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Context, Decimal, InvalidOperation

__all__ = [
    "EPSILON_QUANTUM",
    "DELTA_QUANTUM",
    "BudgetLike",
    "PrivacyBudget",
    "decimal_field",
    "exact_decimal",
]

EPSILON_QUANTUM = Decimal("1e-9")
DELTA_QUANTUM = Decimal("1e-18")
_MAX_UNITS = 2**63 - 1
_CTX = Context(prec=60)

BudgetLike = Decimal | int | str


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def exact_decimal(value: object, quantum: Decimal, name: str) -> Decimal:
    """Convert ``value`` to a Decimal that is an exact multiple of ``quantum``.

    Raises ``TypeError`` for floats and other types, ``ValueError`` for anything that is not
    a finite, non-negative, exactly representable amount.
    """
    if isinstance(value, bool) or not isinstance(value, Decimal | int | str):
        raise TypeError(
            f"{name} must be a Decimal, int or decimal string, not {type(value).__name__} "
            f"(floats drift; write {name}='0.1' instead of {name}=0.1)"
        )
    try:
        dec = Decimal(value.strip()) if isinstance(value, str) else Decimal(value)
    except InvalidOperation as exc:
        raise ValueError(f"{name} must be a decimal number, got {_show(value)}") from exc
    if not dec.is_finite():
        raise ValueError(f"{name} must be finite, got {_show(value)}")
    if dec < 0:
        raise ValueError(f"{name} must be >= 0, got {_show(value)}")
    if dec.adjusted() > 18:
        raise ValueError(f"{name} is too large to account for exactly, got {_show(value)}")
    quantised = dec.quantize(quantum, context=_CTX)
    if quantised != dec:
        raise ValueError(f"{name} must be a multiple of {quantum}, got {_show(value)}")
    if quantised / quantum > _MAX_UNITS:
        raise ValueError(f"{name} is too large to account for exactly, got {_show(value)}")
    return quantised


def decimal_field(value: object, quantum: Decimal, name: str) -> Decimal:
    """:func:`exact_decimal` for a pydantic field: floats and other types raise ValueError."""
    if isinstance(value, float):
        raise ValueError(f"{name} must be a decimal string such as '0.5', not a float")
    try:
        return exact_decimal(value, quantum, name)
    except TypeError as exc:
        raise ValueError(str(exc)) from exc


def plain_decimal(value: Decimal) -> str:
    """A decimal as plain text, without exponent or trailing zeros (``1.5``, ``0``, ``100``):
    the one number format for epsilon and delta in every output."""
    return f"{value.normalize():f}"


@dataclass(frozen=True, slots=True, init=False)
class PrivacyBudget:
    """An exact ``(epsilon, delta)`` privacy cost or cap.

    Parameters
    ----------
    epsilon : Decimal | int | str
        Non-negative, finite, a multiple of 1e-9. Floats raise ``TypeError``.
    delta : Decimal | int | str, default 0
        In ``[0, 1]``, a multiple of 1e-18. A configured cap or claimed cost should be
        ``< 1`` (validated where it is entered); ``1`` only arises from composition, see
        :meth:`__add__`.
    """

    epsilon: Decimal
    delta: Decimal

    def __init__(self, epsilon: BudgetLike, delta: BudgetLike = 0) -> None:
        eps = exact_decimal(epsilon, EPSILON_QUANTUM, "epsilon")
        dlt = exact_decimal(delta, DELTA_QUANTUM, "delta")
        if dlt > 1:
            raise ValueError(f"delta must be <= 1, got {delta!r}")
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", dlt)

    @classmethod
    def zero(cls) -> PrivacyBudget:
        """The cost of releasing nothing."""
        return cls(Decimal(0), Decimal(0))

    def __add__(self, other: PrivacyBudget) -> PrivacyBudget:
        """Basic composition: sum the epsilons and the deltas.

        The delta sum saturates at 1: every mechanism is (epsilon, 1)-DP, so the total is
        still a true statement, and it can never fit within a cap whose delta is below 1.
        """
        if not isinstance(other, PrivacyBudget):
            return NotImplemented
        return PrivacyBudget(
            self.epsilon + other.epsilon, min(self.delta + other.delta, Decimal(1))
        )

    def fits_within(self, cap: PrivacyBudget) -> bool:
        """True when both coordinates are ``<=`` those of ``cap``."""
        return self.epsilon <= cap.epsilon and self.delta <= cap.delta

    def remaining(self, spent: PrivacyBudget) -> PrivacyBudget:
        """What is left of this cap after ``spent``, floored at zero in each coordinate."""
        return PrivacyBudget(
            max(self.epsilon - spent.epsilon, Decimal(0)), max(self.delta - spent.delta, Decimal(0))
        )

    def to_units(self) -> tuple[int, int]:
        """``(epsilon in 1e-9 units, delta in 1e-18 units)``, for BIGINT storage."""
        return int(self.epsilon / EPSILON_QUANTUM), int(self.delta / DELTA_QUANTUM)

    @classmethod
    def from_units(cls, eps_nano: int, delta_atto: int = 0) -> PrivacyBudget:
        """Inverse of :meth:`to_units`."""
        for name, units in (("eps_nano", eps_nano), ("delta_atto", delta_atto)):
            if isinstance(units, bool) or not isinstance(units, int):
                raise TypeError(f"{name} must be an int, not {type(units).__name__}")
        return cls(
            Decimal(eps_nano).scaleb(-9, context=_CTX),
            Decimal(delta_atto).scaleb(-18, context=_CTX),
        )

    def __str__(self) -> str:
        return f"(epsilon={plain_decimal(self.epsilon)}, delta={plain_decimal(self.delta)})"
