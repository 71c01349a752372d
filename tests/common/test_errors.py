"""The error tree matches CONTRACTS.md and messages carry their context."""

from __future__ import annotations

import pytest

from common import errors
from common.budget import PrivacyBudget

TREE = [
    (errors.InvalidInput, errors.FedodError, 422),
    (errors.SchemaMismatch, errors.InvalidInput, 422),
    (errors.PayloadInvalid, errors.InvalidInput, 422),
    (errors.PayloadTooLarge, errors.PayloadInvalid, 413),
    (errors.NotFound, errors.FedodError, 404),
    (errors.Conflict, errors.FedodError, 409),
    (errors.BudgetExceeded, errors.Conflict, 409),
    (errors.ConfigVersionConflict, errors.Conflict, 409),
    (errors.IdempotencyConflict, errors.Conflict, 409),
    (errors.ConfigError, errors.FedodError, 422),
    (errors.SignatureInvalid, errors.ConfigError, 422),
    (errors.ConfigExpired, errors.ConfigError, 422),
    (errors.ConfigDowngrade, errors.ConfigError, 422),
    (errors.CoordinatorUnavailable, errors.FedodError, 503),
]


@pytest.mark.parametrize(("cls", "parent", "status"), TREE)
def test_tree_and_status(cls: type[errors.FedodError], parent: type, status: int) -> None:
    assert issubclass(cls, parent)
    assert cls.status_code == status


def test_context_is_kept() -> None:
    exc = errors.PayloadInvalid("digest mismatch; re-encode the counts", field="lsh")
    assert str(exc) == "digest mismatch; re-encode the counts"
    assert exc.context == {"field": "lsh"}


def test_budget_exceeded_says_spent_asked_cap() -> None:
    spent, asked, cap = PrivacyBudget("0.9"), PrivacyBudget("0.2"), PrivacyBudget(1)
    exc = errors.BudgetExceeded(spent=spent, asked=asked, cap=cap, participant="h1")
    assert exc.spent == spent and exc.asked == asked and exc.cap == cap
    assert exc.context["participant"] == "h1"
    with pytest.raises(errors.Conflict, match=r"spent \(epsilon=0.9.*asks \(epsilon=0.2.*cap"):
        raise exc
