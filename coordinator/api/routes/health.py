"""Liveness, readiness (open) and Prometheus metrics (admin token unless FEDOD_METRICS_PUBLIC).

``/healthz`` and ``/readyz`` are ``async`` and never use the thread pool the API's handlers
share, so they answer while every API thread waits on a frozen database: the readiness probe
runs in its own small executor, on its own pool-less engine, under ``FEDOD_DB_TIMEOUT_S``.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from fastapi import APIRouter, HTTPException, Request, Response, status
from fastapi.responses import JSONResponse

from coordinator.api.deps import Credentials, SettingsDep, is_admin_token
from coordinator.db.engine import ping
from coordinator.metrics import render

router = APIRouter(tags=["operations"])
PROBE_EXECUTOR = ThreadPoolExecutor(max_workers=2, thread_name_prefix="fedod-readyz")


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up (never touches the database)."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "database unreachable or too slow"}})
async def readyz(request: Request) -> JSONResponse:
    """The database answers within ``FEDOD_DB_TIMEOUT_S``."""
    settings = request.app.state.settings
    loop = asyncio.get_running_loop()
    probe = loop.run_in_executor(PROBE_EXECUTOR, ping, request.app.state.probe_engine)
    try:
        await asyncio.wait_for(probe, settings.db_timeout_s)
    except Exception as exc:  # noqa: BLE001 - any driver error or the timeout means not ready
        reason = "timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
        return JSONResponse(
            {"detail": f"database unreachable: {reason}"},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": str(settings.retry_after_s)},
        )
    return JSONResponse({"status": "ready"})


@router.get(
    "/metrics",
    response_class=Response,
    responses={401: {"description": "admin token required (unless FEDOD_METRICS_PUBLIC)"}},
)
async def metrics(settings: SettingsDep, creds: Credentials) -> Response:
    """Prometheus exposition text (all workers); needs the admin token by default."""
    token = creds.credentials if creds else None
    if not settings.metrics_public and not is_admin_token(settings, token):
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "metrics need the admin token (or FEDOD_METRICS_PUBLIC=true)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    body, content_type = render()
    return Response(body, media_type=content_type)
