"""Liveness, readiness and Prometheus metrics (open, no credential)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse

from coordinator.db import ping
from coordinator.metrics import render

router = APIRouter(tags=["operations"])


@router.get("/healthz")
def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get("/readyz", responses={503: {"description": "database unreachable"}})
def readyz(request: Request) -> JSONResponse:
    """The database answers."""
    try:
        ping(request.app.state.engine)
    except Exception as exc:  # noqa: BLE001 - any driver error means not ready
        return JSONResponse(
            {"detail": f"database unreachable: {type(exc).__name__}"},
            status_code=status.HTTP_503_SERVICE_UNAVAILABLE,
        )
    return JSONResponse({"status": "ready"})


@router.get("/metrics", response_class=Response)
def metrics() -> Response:
    """Prometheus exposition text (all workers)."""
    body, content_type = render()
    return Response(body, media_type=content_type)
