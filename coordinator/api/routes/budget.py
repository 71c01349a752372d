"""The admin budget API: every participant's cap, spending and itemised ledger."""

from __future__ import annotations

from fastapi import APIRouter

from common.wire.schemas import BudgetPublic
from coordinator.api.auth_route import AuthFirstRoute
from coordinator.api.deps import AdminDep, ReadSessionDep
from coordinator.ledger.views import all_budgets

router = APIRouter(prefix="/admin", tags=["budget"], route_class=AuthFirstRoute)


@router.get("/budget")
def get_budgets(session: ReadSessionDep, _: AdminDep) -> list[BudgetPublic]:
    """Per participant: cap, spent, remaining and every charge."""
    return all_budgets(session)
