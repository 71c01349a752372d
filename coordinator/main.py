"""The coordinator app: one router per resource under ``/v1``, one error handler."""

from __future__ import annotations

import logging
import logging.config

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from common.errors import FedodError
from coordinator.api.routes import (
    budget,
    cohorts,
    contributions,
    dashboard,
    health,
    keys,
    models,
    online,
    participants,
    secagg,
    studies,
)
from coordinator.config import Settings
from coordinator.db.engine import (
    PoolLimits,
    make_engine,
    make_probe_engine,
    make_sessionmaker,
    sqlite_file,
)
from coordinator.db.sqlite_checkpoint import Checkpointer
from coordinator.keys import KeyStore
from coordinator.logs import log_config
from coordinator.middleware import AccessLogMiddleware, BodyLimitMiddleware, TimeoutMiddleware

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


def _unavailable(request: Request, exc: Exception) -> JSONResponse:
    """The database is down, frozen or every pooled connection is busy: 503, retry later."""
    settings: Settings = request.app.state.settings
    log.warning("database unavailable", extra={"path": request.url.path,
                                                "error": type(exc).__name__})
    return JSONResponse(
        {"detail": "the database is unavailable or busy; retry later"},
        status_code=503,
        headers={"Retry-After": str(settings.retry_after_s)},
    )


async def handle_database_error(request: Request, exc: Exception) -> JSONResponse:
    """Connection failures and pool exhaustion become 503 + ``Retry-After``; the rest 500."""
    is_outage = isinstance(exc, OperationalError | PoolTimeout) or (
        isinstance(exc, DBAPIError) and exc.connection_invalidated
    )
    if is_outage:
        return _unavailable(request, exc)
    log.error("database error", extra={"path": request.url.path, "error": type(exc).__name__})
    return JSONResponse({"detail": "internal database error"}, status_code=500)


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
    url = settings.resolved_database_url
    limits = PoolLimits(settings.db_pool_size, settings.db_max_overflow, settings.db_timeout_s)
    engine = make_engine(url, busy_timeout_ms=settings.sqlite_busy_timeout_ms, limits=limits)
    app.state.settings = settings
    app.state.engine = engine
    app.state.probe_engine = make_probe_engine(url, settings.db_timeout_s)
    app.state.sessionmaker = make_sessionmaker(engine)
    path = sqlite_file(url)  # the file the writer lock guards
    app.state.checkpointer = None if path is None else Checkpointer(path)
    app.state.keys = KeyStore(settings.resolved_signing_key_path)
    app.state.keys.ensure()

    app.include_router(health.router)
    for module in (keys, studies, contributions, models, participants, budget, secagg,
                   online, cohorts):
        app.include_router(module.router, prefix="/v1")
    app.include_router(dashboard.router)
    app.add_exception_handler(FedodError, handle_domain_error)
    app.add_exception_handler(RequestValidationError, handle_validation_error)
    app.add_exception_handler(DBAPIError, handle_database_error)
    app.add_exception_handler(PoolTimeout, handle_database_error)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    app.add_middleware(
        TimeoutMiddleware,
        body_timeout_s=settings.body_timeout_s,
        request_timeout_s=settings.request_timeout_s,
        retry_after_s=settings.retry_after_s,
    )
    app.add_middleware(AccessLogMiddleware)
    return app
