# --- coordinator fixtures (PostgreSQL test schema, study and release builders) ---------------
import os as _os
import secrets as _secrets
from urllib.parse import quote as _quote

import pytest as _pytest

_DEFAULT_PG = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


def _pg_base_url() -> str:
    return _os.environ.get("FEDOD_TEST_POSTGRES_URL", _DEFAULT_PG)


@_pytest.fixture(scope="session")
def postgres_url():
    """A URL into a fresh PostgreSQL schema of the test database, dropped afterwards.

    Skips when the server is unreachable, except under ``CI=true`` where that fails.
    """
    import sqlalchemy as sa

    base = _pg_base_url()
    engine = sa.create_engine(base)
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
    except sa.exc.OperationalError as exc:
        engine.dispose()
        if _os.environ.get("CI", "").lower() == "true":
            _pytest.fail(f"PostgreSQL at {base} is required under CI: {exc.orig}")
        _pytest.skip(f"PostgreSQL not reachable at {base}")
    schema = f"fedod_t_{_secrets.token_hex(6)}"
    with engine.begin() as conn:
        conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    sep = "&" if "?" in base else "?"
    yield f"{base}{sep}options={_quote(f'-csearch_path={schema}')}"
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
        from common.config import StudyConfig

        return StudyConfig.model_validate_json(signed["payload"])

    @staticmethod
    def release(signed, rng, *, key=None, lsh_values=None, grid_values=None, **override):
        """A ``ContributionCreate`` JSON body of random counts that matches the config.

        Returns ``(body, lsh_values, grid)`` where grid is ``(indices|None, values)`` or None.
        """
        import hashlib

        import numpy as np

        from common.encoding import encode_counts

        config = CoordinatorKit.config_of(signed)
        if lsh_values is None:
            lsh_values = rng.integers(-50, 200, size=config.lsh_cells)
        grid = None
        grid_enc = None
        if config.grid is not None:
            if config.grid_layout == "dense":
                vals = grid_values if grid_values is not None else rng.integers(
                    -5, 50, size=config.grid_cells)
                grid = (None, np.asarray(vals))
            else:
                idx = np.unique(rng.integers(0, config.grid_cells, size=8))
                grid = (idx, rng.integers(1, 50, size=idx.size))
            grid_enc = encode_counts(grid[1], indices=grid[0], n_cells=config.grid_cells)
        cost = config.release_cost()
        body = {
            "idempotency_key": key or _secrets.token_hex(16),
            "config_version": config.version,
            "config_digest": hashlib.sha256(signed["payload"].encode()).hexdigest(),
            "epsilon": f"{cost.epsilon.normalize():f}",
            "delta": f"{cost.delta.normalize():f}",
            "lsh": encode_counts(lsh_values, n_cells=config.lsh_cells).model_dump(mode="json"),
            "grid": grid_enc.model_dump(mode="json") if grid_enc is not None else None,
        }
        body.update(override)
        return body, np.asarray(lsh_values, dtype=np.int64), grid


@_pytest.fixture(scope="session")
def coord_kit():
    """Study and release builders for coordinator tests (see ``CoordinatorKit``)."""
    return CoordinatorKit
