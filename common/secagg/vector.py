"""The vector a secure round sums: the LSH tables, then the dense grid (if the study has one).

Each part carries its own noise share, so the revealed sum of each part carries at least one
full discrete Laplace over any ``h_min`` honest shares (:func:`common.noise.sample_noise_share`):

- LSH tables: L1 sensitivity ``m`` (one record falls in one cell of each of the ``m`` tables;
  Li & Pham), scale ``m / epsilon_lsh``;
- dense grid: sensitivity 1 (one record falls in one grid cell; Rauch, Olatunji & Khosla),
  scale ``1 / epsilon_grid``.

The two releases compose to ``epsilon_lsh + epsilon_grid`` (basic composition), which is what
:meth:`common.study.config.StudyConfig.release_cost` charges. A sparse (thresholded) grid has no
secure form: which cells it releases depends on each participant's own noisy counts, which
cannot be summed under masks, so a secure study's grid must be dense.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from common.histograms.hashing import LSHFamily
from common.noise.scale import grid_sensitivity, lsh_sensitivity
from common.secagg.params import AggregationParams
from common.study.params import GridParams, LSHParams, PrivacyParams

__all__ = ["NoiseShare", "SecureStudy", "secure_parts", "noisy_secure_vector",
           "split_secure_sum"]

NoiseShare = Callable[[int, int, Decimal, int], NDArray[np.int64]]
"""``(n_cells, sensitivity, epsilon, h_min) -> one party's noise share per cell``."""


class SecureStudy(Protocol):
    """What a secure round reads of its study: :class:`common.study.config.StudyConfig` has all of
    it (stated here so that this package needs only the parameter sections, not the config
    that assembles them)."""

    study_id: str
    aggregation: AggregationParams | None
    privacy: PrivacyParams
    lsh: LSHParams
    grid: GridParams | None

    @property
    def lsh_cells(self) -> int: ...
    @property
    def grid_cells(self) -> int: ...
    @property
    def secure_cells(self) -> int: ...
    def lsh_family(self) -> LSHFamily: ...


def secure_parts(config: SecureStudy) -> list[tuple[str, int, int, Decimal]]:
    """``(name, cells, sensitivity, epsilon)`` of each part of the secure vector, in order."""
    p = config.privacy
    parts = [("lsh", config.lsh_cells, lsh_sensitivity(config.lsh.n_tables), p.epsilon_lsh)]
    if config.grid is not None:
        parts.append(("grid", config.grid_cells, grid_sensitivity(), p.epsilon_grid))
    return parts


def noisy_secure_vector(
    config: SecureStudy,
    lsh: NDArray[np.int64],
    grid: NDArray[np.int64] | None,
    noise_share: NoiseShare,
) -> NDArray[np.int64]:
    """Exact counts clipped to the public ``max_records``, plus this party's noise share.

    Clipping each cell to ``[0, max_records]`` is 1-Lipschitz per cell, so the sensitivities
    above still hold. Call only after the ledger reserved the release; draw once and store.
    """
    params = config.aggregation
    if params is None or params.h_min is None:
        raise ValueError(f"study {config.study_id} does not use secure aggregation")
    exact = {"lsh": lsh, "grid": grid}
    out = []
    for name, cells, sensitivity, epsilon in secure_parts(config):
        counts = exact[name]
        if counts is None or counts.shape != (cells,):
            raise ValueError(f"the {name} counts must have {cells} cells")
        clipped = np.minimum(counts.astype(np.int64), params.max_records)
        out.append(clipped + noise_share(cells, sensitivity, epsilon, params.h_min))
    return np.concatenate(out).astype(np.int64)


def split_secure_sum(
    config: SecureStudy, total: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.int64] | None]:
    """The revealed sum cut back into the LSH vector and the dense grid (None without one)."""
    sizes = [cells for _, cells, _, _ in secure_parts(config)]
    if total.shape != (sum(sizes),):
        raise ValueError(f"a secure sum has {sum(sizes)} cells, got {total.shape}")
    lsh = total[: sizes[0]]
    return lsh, (total[sizes[0] :] if len(sizes) > 1 else None)
