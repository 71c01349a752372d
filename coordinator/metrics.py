"""Prometheus metrics.

With several uvicorn workers, ``fedod-coordinator serve`` sets ``PROMETHEUS_MULTIPROC_DIR``
before the workers start, and ``/metrics`` aggregates every worker's files
(prometheus-client multiprocess mode). A single process uses the default registry.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The only method labels; anything else is counted as ``other``."""


def method_label(method: str) -> str:
    """``method`` if it is a standard one, else ``other`` (bounded label values)."""
    return method if method in METHODS else "other"


REQUESTS = Counter(
    "fedod_http_requests_total", "HTTP requests by route and status", ["method", "route", "status"]
)
LATENCY = Histogram(
    "fedod_http_request_seconds", "HTTP request latency by route", ["method", "route"]
)
CONTRIBUTIONS = Counter(
    "fedod_contributions_total", "Contribution attempts by outcome", ["outcome"]
)
EPSILON_CHARGED = Counter(
    "fedod_epsilon_charged_nano_total", "Epsilon charged to ledgers, in 1e-9 units"
)


def render() -> tuple[bytes, str]:
    """The exposition text for this process, or for all workers in multiprocess mode."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def remove_stale_dirs(data_dir: Path) -> list[Path]:
    """Delete ``prometheus-<pid>`` folders of coordinators that are no longer running.

    ``serve`` removes its own folder when it stops; one killed with SIGKILL leaves it behind.
    """
    removed = []
    for path in data_dir.glob("prometheus-*"):
        pid = path.name.removeprefix("prometheus-")
        if not pid.isdigit() or _alive(int(pid)):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
