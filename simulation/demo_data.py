"""Demo data for the multi-hospital simulation: a real dataset, split the way hospitals differ.

The default dataset is the Wisconsin Diagnostic Breast Cancer data that ships inside
scikit-learn (569 records, 30 features), turned into an outlier benchmark the usual way
(Campos et al.): all benign records are inliers, a seeded subsample of malignant ones are the
outliers. Nothing is downloaded.

The split mirrors the motivating case of the LSH iTables paper: one large general hospital,
smaller clinics, and one specialist clinic where the unusual cases concentrate, so that
*locally* they no longer look unusual. Only the federated model, which sees the whole
population, shows them for what they are.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

DEFAULT_OUTLIERS = 60
LABEL_COLUMN = "label"
ID_COLUMN = "record_id"


@dataclass(frozen=True)
class Dataset:
    """Feature names, records and labels (1 = outlier)."""

    name: str
    features: list[str]
    X: NDArray[np.float64]
    y: NDArray[np.int8]


@dataclass(frozen=True)
class Hospital:
    """One simulated hospital: its name, kind and the row indices it holds."""

    name: str
    kind: str
    rows: NDArray[np.int64]


def _snake(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()


def load_breast_cancer_outliers(seed: int, n_outliers: int = DEFAULT_OUTLIERS) -> Dataset:
    """Benign records as inliers plus ``n_outliers`` seeded malignant records as outliers."""
    from sklearn.datasets import load_breast_cancer

    data = load_breast_cancer()
    malignant = np.flatnonzero(data.target == 0)
    benign = np.flatnonzero(data.target == 1)
    rng = np.random.default_rng(seed)
    picked = np.sort(rng.choice(malignant, size=min(n_outliers, malignant.size), replace=False))
    rows = np.concatenate([benign, picked])
    y = np.concatenate([np.zeros(benign.size), np.ones(picked.size)]).astype(np.int8)
    features = [_snake(str(n)) for n in data.feature_names]
    return Dataset("sklearn breast cancer (WDBC)", features, data.data[rows].astype(float), y)


def load_csv_dataset(path: Path, label_column: str = LABEL_COLUMN) -> Dataset:
    """A CSV with a header, numeric feature columns and a 0/1 ``label_column``."""
    with path.open(newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if header is None or label_column not in header:
            raise ValueError(f"{path}: needs a header with a {label_column!r} column")
        rows = list(reader)
    if not rows:
        raise ValueError(f"{path}: no records")
    label_at = header.index(label_column)
    features = [h for i, h in enumerate(header) if i != label_at]
    try:
        table = np.array([[float(v) for v in row] for row in rows])
    except ValueError as exc:
        raise ValueError(f"{path}: every value must be numeric ({exc})") from exc
    y = table[:, label_at]
    if not np.isin(y, (0, 1)).all():
        raise ValueError(f"{path}: column {label_column!r} must be 0 or 1")
    X = np.delete(table, label_at, axis=1)
    if not np.isfinite(X).all():
        raise ValueError(f"{path}: features must be finite numbers")
    return Dataset(path.name, features, X, y.astype(np.int8))


def _nice(v: float, up: bool) -> float:
    """``v`` rounded outward to one significant digit, printed without float residue."""
    if v == 0:
        return 0.0
    d = Decimal(repr(v))
    exponent = d.adjusted()
    digits = d.scaleb(-exponent).to_integral_value(ROUND_CEILING if up else ROUND_FLOOR)
    return float(f"{digits}e{exponent}")


def _nice_floor(v: float) -> float:
    return _nice(v, up=False)


def _nice_ceil(v: float) -> float:
    return _nice(v, up=True)


def study_bounds(X: NDArray[np.float64]) -> list[tuple[float, float]]:
    """The study's public feature bounds, as a study designer would publish them.

    In a real study these come from clinical reference ranges, never from the participants'
    data. The simulation stands in for that published schema by rounding the pooled range
    outward to one significant digit; no participant computes or sends it.
    """
    out = []
    for lo, hi in zip(X.min(axis=0), X.max(axis=0), strict=True):
        a, b = _nice_floor(float(lo)), _nice_ceil(float(hi))
        out.append((a, b if b > a else a + 1.0))
    return out


def split_hospitals(
    X: NDArray[np.float64], y: NDArray[np.int8], n_hospitals: int, seed: int
) -> list[Hospital]:
    """Split records unevenly: a large general hospital, clinics and one specialist clinic.

    The general hospital receives most inliers (82 %) and few outliers (10 %). The smaller
    hospitals are referral centres that receive *kinds* of unusual cases: the outliers are
    ordered by distance to a seeded one (in standardised feature space); the specialist
    clinic (the last hospital) takes the nearest 50 %, the clinics the next 40 %, on top of a
    small share of inliers each. Locally those cases are common and alike, so they hide among
    each other; only the population-wide model shows them as rare. Needs >= 2 hospitals.
    """
    if n_hospitals < 2:
        raise ValueError("the simulation needs at least 2 hospitals")
    rng = np.random.default_rng(seed)
    inliers = rng.permutation(np.flatnonzero(y == 0))
    clinics = n_hospitals - 2
    small_in = [0.10 / clinics] * clinics if clinics else []
    small_out = [0.40 / clinics] * clinics if clinics else []
    inlier_share = np.array([0.82 if clinics else 0.92, *small_in, 0.08])
    outlier_share = np.array([0.10 if clinics else 0.40, *small_out, 0.50])
    parts_in = np.split(inliers, (np.cumsum(inlier_share)[:-1] * inliers.size).astype(int))
    parts_out = _cluster_outliers(X, np.flatnonzero(y == 1), outlier_share, rng)
    names = ["general"] + [f"clinic-{i + 1}" for i in range(clinics)] + ["specialist"]
    kinds = ["general hospital"] + ["clinic"] * clinics + ["specialist clinic"]
    return [
        Hospital(name, kind, np.sort(np.concatenate([a, b])).astype(np.int64))
        for name, kind, a, b in zip(names, kinds, parts_in, parts_out, strict=True)
    ]


def _cluster_outliers(
    X: NDArray[np.float64],
    outliers: NDArray[np.int64],
    shares: NDArray[np.float64],
    rng: np.random.Generator,
) -> list[NDArray[np.int64]]:
    """Outliers by distance to a seeded one: the last hospital takes the nearest, the ones
    before it the next; the general hospital (index 0) gets what is left."""
    Z = (X - X.mean(axis=0)) / np.where(X.std(axis=0) > 0, X.std(axis=0), 1.0)
    sizes = np.floor(shares * outliers.size).astype(int)
    sizes[0] = outliers.size - sizes[1:].sum()
    left = list(rng.permutation(outliers))
    parts: list[NDArray[np.int64]] = [np.empty(0, np.int64)] * len(shares)
    centre = Z[left[0]]
    left.sort(key=lambda r: float(np.sum((Z[r] - centre) ** 2)))
    for h in range(len(shares) - 1, 0, -1):
        parts[h], left = np.array(left[: sizes[h]], dtype=np.int64), left[sizes[h] :]
    parts[0] = np.array(left, dtype=np.int64)
    return parts


def write_hospital_csv(path: Path, data: Dataset, rows: NDArray[np.int64]) -> None:
    """Write one hospital's records with a record id and the label (kept for evaluation)."""
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow([ID_COLUMN, *data.features, LABEL_COLUMN])
        for r in rows:
            writer.writerow([f"r{r:06d}", *(repr(float(v)) for v in data.X[r]), int(data.y[r])])
