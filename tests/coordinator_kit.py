"""Shared builders of the coordinator tests and benchmarks: PostgreSQL test schemas, the admin
credential, and study specs and synthetic (noise-free) releases."""

from __future__ import annotations

import os
import secrets
from urllib.parse import quote

DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
ADMIN_TOKEN = "admin-" + secrets.token_urlsafe(24)


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


ADMIN = bearer(ADMIN_TOKEN)


def pg_base_url() -> str:
    return os.environ.get("FEDOD_TEST_POSTGRES_URL", DEFAULT_PG)


def schema_url(prefix: str):
    """Yield a URL into a new, empty schema of the test database; drop the schema after."""
    import sqlalchemy as sa

    base = pg_base_url()
    schema = f"{prefix}_{secrets.token_hex(6)}"
    engine = sa.create_engine(base)
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}options={quote(f'-csearch_path={schema}')}"
    with engine.begin() as conn:
        conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
    engine.dispose()


class CoordinatorKit:
    """Builders for coordinator requests: study specs and synthetic (noise-free) releases."""

    @staticmethod
    def study_spec(study_id="s1", *, n_features=3, n_tables=5, sample_size=32, grid=None,
                   epsilon_lsh="0.5", epsilon_grid="0", delta_grid="0"):
        """A ``StudyCreate`` JSON body."""
        return {
            "study_id": study_id,
            "features": [{"name": f"x{i}", "lo": 0.0, "hi": 1.0} for i in range(n_features)],
            "lsh": {"n_tables": n_tables, "sample_size": sample_size},
            "grid": grid,
            "privacy": {"epsilon_lsh": epsilon_lsh, "epsilon_grid": epsilon_grid,
                        "delta_grid": delta_grid},
            "valid_days": 30,
        }

    @staticmethod
    def config_of(signed):
        """The ``StudyConfig`` inside a served ``SignedConfig`` JSON (signature not checked)."""
        from common.study.config import StudyConfig

        return StudyConfig.model_validate_json(signed["payload"])

    @staticmethod
    def release(signed, rng, *, key=None, lsh_values=None, grid_values=None, **override):
        """A ``ContributionCreate`` JSON body of random noise-free counts of one dataset that
        matches the config (so it passes the poisoning bounds).

        Returns ``(body, lsh_values, grid)`` where grid is ``(indices|None, values)`` or None.
        """
        import hashlib

        import numpy as np

        from common.wire.encoding import encode_counts

        config = CoordinatorKit.config_of(signed)
        records = int(rng.integers(50, 200))  # exact counts of one dataset: what an honest
        # release holds within its noise (common.histograms.release_bounds: every table sums to it)
        if lsh_values is None:
            offsets = config.lsh_family().offsets
            lsh_values = np.concatenate([rng.multinomial(records, np.full(b - a, 1 / (b - a)))
                                         for a, b in zip(offsets[:-1], offsets[1:], strict=True)])
        grid = None
        grid_enc = None
        if config.grid is not None:
            if config.grid_layout == "dense":
                vals = grid_values if grid_values is not None else rng.multinomial(
                    records, np.full(config.grid_cells, 1 / config.grid_cells))
                grid = (None, np.asarray(vals))
            else:
                from common.histograms.cellkeys import key_words, keys_from_ints

                cells = np.unique(rng.integers(0, min(config.grid_cells, 2**62), size=8))
                idx = keys_from_ints(cells.tolist(), key_words(config.grid_cells))
                from common.histograms.release_bounds import release_bounds

                low = release_bounds(config).threshold  # a thresholded release keeps >= T
                grid = (idx, rng.integers(low, low + 50, size=cells.size))
            grid_enc = encode_counts(grid[1], indices=grid[0], n_cells=config.grid_cells)
        cost = config.release_cost()
        body = {
            "idempotency_key": key or secrets.token_hex(16),
            "config_version": config.version,
            "config_digest": hashlib.sha256(signed["payload"].encode()).hexdigest(),
            "epsilon": f"{cost.epsilon.normalize():f}",
            "delta": f"{cost.delta.normalize():f}",
            "lsh": encode_counts(lsh_values, n_cells=config.lsh_cells).model_dump(mode="json"),
            "grid": grid_enc.model_dump(mode="json") if grid_enc is not None else None,
        }
        body.update(override)
        return body, np.asarray(lsh_values, dtype=np.int64), grid
