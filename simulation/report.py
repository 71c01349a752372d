"""Results of the multi-hospital simulation: per-hospital AUCs and the printed table."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.metrics import roc_auc_score

from common.detectors import LSHiTables
from simulation import demo_data as dd


@dataclass
class HospitalResult:
    """One row of the simulation table."""

    hospital: str
    kind: str
    records: int
    outliers: int
    auc_alone: float
    auc_federated: float
    auc_federated_grid: float
    auc_federated_combined: float
    auc_centralised: float
    epsilon_spent: str
    epsilon_cap: str
    scores: str


def json_ready(value: Any) -> Any:
    """``value`` with every non-finite float (an AUC that cannot be computed, no grid) as
    ``None``, so that ``json.dumps`` writes valid JSON (``null``, never ``NaN``)."""
    if isinstance(value, float):
        return value if np.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_ready(v) for v in value]
    return value


def auc(y: np.ndarray, score: np.ndarray) -> float:
    if len(set(y.tolist())) < 2:
        return float("nan")
    return round(100 * float(roc_auc_score(y, score)), 1)


def read_scores(path: Path, keys: list[str]) -> dict[str, np.ndarray]:
    """Per-detector federated scores from a hospital's score file, in ``keys`` order."""
    with path.open(newline="") as fh:
        rows = {row[dd.ID_COLUMN]: row for row in csv.DictReader(fh)}
    cols = [c for c in ("score_lsh", "score_grid", "outlier_score") if c in next(iter(
        rows.values()), {})]  # no grid scores under secure aggregation (LSH tables only)
    return {c: np.array([float(rows[k][c]) for k in keys]) for c in cols}


def evaluate(data: dd.Dataset, hospitals: list[dd.Hospital], outs: list[Path],
             budgets: dict[str, dict[str, Any]], seed: int) -> list[HospitalResult]:
    """One row per hospital: AUC of its federated score file against non-private LSH iTables
    fitted on its own data alone and on the pooled data, and its epsilon spent / cap as the
    coordinator's ledger reports it (``budgets``: ``GET /v1/admin/budget`` by participant)."""
    central = LSHiTables(random_state=seed).fit(data.X)
    rows = []
    for h, out in zip(hospitals, outs, strict=True):
        y = data.y[h.rows]
        fed = read_scores(out, [f"r{r:06d}" for r in h.rows])
        auc_fed = {col: auc(y, fed[col]) for col in fed}
        alone = LSHiTables(random_state=seed).fit(data.X[h.rows])
        rows.append(
            HospitalResult(
                hospital=h.name,
                kind=h.kind,
                records=int(h.rows.size),
                outliers=int(y.sum()),
                auc_alone=auc(y, alone.decision_function(data.X[h.rows])),
                auc_federated=auc_fed["score_lsh"],
                auc_federated_grid=auc_fed.get("score_grid", float("nan")),
                auc_federated_combined=auc_fed["outlier_score"],
                auc_centralised=auc(y, central.decision_function(data.X[h.rows])),
                epsilon_spent=budgets[h.name]["epsilon_spent"],
                epsilon_cap=budgets[h.name]["epsilon_cap"],
                scores=str(out),
            )
        )
    return rows


def format_table(rows: list[HospitalResult]) -> str:
    """The table a person reads: one line per hospital."""
    head = (
        "hospital",
        "kind",
        "records",
        "outliers",
        "AUC alone",
        "AUC federated",
        "(grid)",
        "(combined)",
        "AUC centralised",
        "epsilon spent/cap",
    )
    body = [
        (
            r.hospital,
            r.kind,
            str(r.records),
            str(r.outliers),
            f"{r.auc_alone:.1f}",
            f"{r.auc_federated:.1f}",
            "-" if r.auc_federated_grid != r.auc_federated_grid else f"{r.auc_federated_grid:.1f}",
            f"{r.auc_federated_combined:.1f}",
            f"{r.auc_centralised:.1f}",
            f"{r.epsilon_spent}/{r.epsilon_cap}",
        )
        for r in rows
    ]
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in (head, *body)
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
