"""docs/HTTP_API.md lists exactly the routes the coordinator serves.

The app is built as the other coordinator tests build it; every route the project defines
(API and dashboard, in the OpenAPI schema or not) is a method and a path, and each must be a
row of the document's tables, and each row a route of the app.
"""

from __future__ import annotations

import re
import secrets
import tempfile
from pathlib import Path

from fastapi.routing import APIRoute

from coordinator.config import Settings
from coordinator.main import create_app

DOC = Path(__file__).resolve().parents[2] / "docs" / "HTTP_API.md"
# a table row: | METHOD | `path` | ...
ROW = re.compile(r"^\|\s*(GET|POST|PUT|PATCH|DELETE)\s*\|\s*`([^`]+)`\s*\|")


def _served() -> set[tuple[str, str]]:
    """(method, full path) of every route the project defines in the app."""
    with tempfile.TemporaryDirectory() as data_dir:
        app = create_app(Settings(env="production", admin_token=secrets.token_urlsafe(32),
                                  database_url=f"sqlite:///{data_dir}/c.db", data_dir=data_dir))
        try:
            from fastapi.routing import iter_route_contexts
        except ImportError:  # FastAPI before lazily included routers: app.routes is flat
            routes = [(r.path, r) for r in app.routes if isinstance(r, APIRoute)]
        else:
            routes = [(str(c.path), c.original_route) for c in iter_route_contexts(app.routes)
                      if isinstance(c.original_route, APIRoute)]
        app.state.engine.dispose()
    return {(method, path) for path, route in routes for method in route.methods}


def _documented() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for line in DOC.read_text(encoding="utf-8").splitlines()
            if (m := ROW.match(line))]


def test_every_route_the_app_serves_is_a_row_of_the_http_table() -> None:
    missing = _served() - set(_documented())
    assert not missing, f"routes missing from {DOC.name}: {sorted(missing)}"


def test_every_row_of_the_http_table_is_a_route_the_app_serves() -> None:
    extra = set(_documented()) - _served()
    assert not extra, f"rows of {DOC.name} the app does not serve: {sorted(extra)}"


def test_each_route_is_one_row() -> None:
    rows = _documented()
    assert len(rows) == len(set(rows)), "a method and path appears twice in the table"
