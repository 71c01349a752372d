"""The coordinator app: one router per resource under ``/v1``, one error handler."""

from __future__ import annotations

import logging
import logging.config

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from common.errors import FedodError
from coordinator.api.routes import (
    budget,
    contributions,
    dashboard,
    health,
    keys,
    models,
    participants,
    rounds,
    studies,
)
from coordinator.config import Settings
from coordinator.db import make_engine, make_sessionmaker
from coordinator.keys import KeyStore
from coordinator.logs import log_config
from coordinator.middleware import AccessLogMiddleware, BodyLimitMiddleware

log = logging.getLogger("fedod.errors")


async def handle_domain_error(request: Request, exc: Exception) -> JSONResponse:
    """Every ``common.errors`` exception becomes its status with ``{"detail": message}``."""
    assert isinstance(exc, FedodError)
    if exc.status_code >= 500:
        log.error("domain error", extra={"path": request.url.path, "error": exc.message})
    return JSONResponse({"detail": exc.message}, status_code=exc.status_code)


async def handle_validation_error(request: Request, exc: Exception) -> JSONResponse:
    """Malformed requests: 422 with a one-line description of what is wrong."""
    assert isinstance(exc, RequestValidationError)
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error.get("loc", ()) if p != "body") or "body"
        parts.append(f"{where}: {error.get('msg', 'invalid')}")
    return JSONResponse({"detail": "invalid request: " + "; ".join(parts)}, status_code=422)


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the app for ``settings`` (default: the environment)."""
    if settings is None:
        from coordinator.config import settings as env_settings

        settings = env_settings
    if not settings.admin_token:
        raise RuntimeError("FEDOD_ADMIN_TOKEN is not set; the coordinator needs an admin token")
    logging.config.dictConfig(log_config(settings.log_level, json_lines=settings.log_json))
    app = FastAPI(
        title="fedod coordinator",
        version="1",
        description="Federated, differentially private outlier detection: studies, "
        "participants, contributions, merged models and the epsilon ledger.",
    )
    engine = make_engine(
        settings.resolved_database_url, busy_timeout_ms=settings.sqlite_busy_timeout_ms
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = make_sessionmaker(engine)
    app.state.keys = KeyStore(settings.resolved_signing_key_path)
    app.state.keys.ensure()

    app.include_router(health.router)
    for module in (keys, studies, contributions, models, participants, budget, rounds):
        app.include_router(module.router, prefix="/v1")
    app.include_router(dashboard.router)
    app.add_exception_handler(FedodError, handle_domain_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(AccessLogMiddleware)
    return app
