"""`fedod-simulate --json` end to end: real coordinator and hospital processes over HTTP.

The printed numbers must agree with the coordinator's ledger (read from its database after the
run) and with every hospital's own local ledger.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from common.budget import PrivacyBudget
from coordinator.db.tables import Contribution, LedgerEntry, Participant

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def simulation(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    workdir = tmp_path_factory.mktemp("sim")
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulation.main",
            "--json",
            "--workdir",
            str(workdir),
            "--epsilon",
            "4",
            "--hospitals",
            "3",
            "--aggregation",
            "independent",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout), workdir


def test_table_has_every_hospital_with_finite_aucs(simulation: tuple[dict, Path]) -> None:
    result, _ = simulation
    rows = result["hospitals"]
    assert [r["hospital"] for r in rows] == ["general", "clinic-1", "specialist"]
    assert sum(r["records"] for r in rows) == sum(result["split"].values())
    for r in rows:
        for key in ("auc_alone", "auc_federated", "auc_federated_grid", "auc_centralised"):
            assert 0 <= r[key] <= 100 and not math.isnan(r[key]), (r["hospital"], key)
        assert Path(r["scores"]).is_file()
    specialist = rows[-1]
    # Outliers concentrate at the specialist clinic: locally they look normal.
    assert specialist["auc_federated"] > specialist["auc_alone"]


def test_epsilon_matches_coordinator_ledger(simulation: tuple[dict, Path]) -> None:
    result, workdir = simulation
    engine = create_engine(f"sqlite:///{workdir / 'coordinator' / 'coordinator.db'}")
    with Session(engine) as s:
        for row in result["hospitals"]:
            p = s.scalars(select(Participant).where(Participant.name == row["hospital"])).one()
            charged = s.scalar(
                select(func.sum(LedgerEntry.eps_units)).where(LedgerEntry.participant_id == p.id)
            )
            n_contrib = s.scalar(
                select(func.count())
                .select_from(Contribution)
                .where(Contribution.participant_id == p.id)
            )
            spent = PrivacyBudget.from_units(p.eps_spent, p.delta_spent)
            assert n_contrib == 1
            assert charged == p.eps_spent
            assert spent.epsilon == Decimal(row["epsilon_spent"]) == Decimal("4")
            assert Decimal(row["epsilon_cap"]) == PrivacyBudget.from_units(p.eps_cap, 0).epsilon
    engine.dispose()


def test_epsilon_matches_each_local_ledger(simulation: tuple[dict, Path]) -> None:
    result, workdir = simulation
    for row in result["hospitals"]:
        state = workdir / row["hospital"] / "state"
        out = subprocess.run(
            [sys.executable, "-m", "participant.cli.main", "--state", str(state), "--json",
             "ledger"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        local = json.loads(out.stdout)
        assert Decimal(local["epsilon_spent"]) == Decimal(row["epsilon_spent"])
        assert [e["status"] for e in local["entries"]] == ["acknowledged"]


def _not_json(constant: str) -> None:
    raise AssertionError(f"fedod-simulate --json wrote {constant}, which is not JSON")


def test_secure_simulation_reveals_one_sum_over_every_hospital(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Five hospitals default to secure aggregation: one round, one sum, one charge each."""
    from coordinator.db.secagg import Round

    workdir = tmp_path_factory.mktemp("sim-secure")
    out = subprocess.run(
        [sys.executable, "-m", "simulation.main", "--json", "--workdir", str(workdir),
         "--epsilon", "1", "--hospitals", "5"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout, parse_constant=_not_json)  # NaN is not JSON
    assert result["aggregation"] == "secure"
    rows = result["hospitals"]
    assert len(rows) == 5
    for r in rows:
        assert 0 <= r["auc_federated"] <= 100 and r["auc_federated_grid"] is None  # no grid
        assert Decimal(r["epsilon_spent"]) == Decimal("1")
    engine = create_engine(f"sqlite:///{workdir / 'coordinator' / 'coordinator.db'}")
    with Session(engine) as s:
        rounds = s.scalars(select(Round)).all()
        assert [(r.number, r.attempt, r.status) for r in rounds] == [(1, 1, "done")]
        kinds = s.scalars(select(LedgerEntry.kind)).all()
        assert kinds == ["secagg"] * 5
    engine.dispose()
