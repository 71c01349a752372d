"""``NoDelayConfig.load``: a server worker freezes its start-up heap once the app is loaded.

The objects alive after start-up (modules, the app, its engine) then stay out of the garbage
collector's full passes (``gc.freeze``): in BENCHMARKS.md (2026-11-25) that gave 11-22 %
more contributions/s at m = 100.
"""

from __future__ import annotations

import gc
import secrets

from coordinator.server import NoDelayConfig


def test_loading_the_app_freezes_what_start_up_left_alive(tmp_path, monkeypatch):
    monkeypatch.setenv("FEDOD_DATABASE_URL", f"sqlite:///{tmp_path / 'c.db'}")
    monkeypatch.setenv("FEDOD_ADMIN_TOKEN", secrets.token_urlsafe(32))
    monkeypatch.setenv("FEDOD_DATA_DIR", str(tmp_path))
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    config = NoDelayConfig("coordinator.main:create_app", factory=True)
    try:
        config.load()
        assert config.loaded
        assert gc.get_freeze_count() > 10_000  # the imported modules and the app at least
    finally:
        gc.unfreeze()  # this test process goes on collecting as before
