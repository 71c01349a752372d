"""Authentication before validation: ``AuthFirstRoute`` for every authenticated router.

FastAPI parses a JSON body before it solves any dependency (a body that is not JSON is a
422 before the credential is looked at), and validates body models after the dependencies
only when the credential is a dependency; routes that look the caller up themselves (one
database hop for contributions, models, online) see their body validated first. Either way
an anonymous caller could learn from a 422 what a route accepts.

``AuthFirstRoute`` wraps the handler of every route that reads the bearer credential
(``deps.bearer`` anywhere in its dependency tree): a request without a bearer credential is
answered 401 before its body is read; a request whose body or parameters fail validation is
answered 401 (unknown or revoked credential) or 403 (wrong role: the admin token on a
participant route, a participant on an admin route) before the 422, so only a caller allowed
on the route ever sees what is wrong with its body. The valid path costs nothing extra: the
caller is resolved a second time only on the way to a 422, and only where the dependencies
have not resolved it already. The OpenAPI schema is unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials
from fastapi.security.utils import get_authorization_scheme_param
from starlette.concurrency import run_in_threadpool

from coordinator.api.deps import (
    bearer,
    get_caller,
    participant_token,
    require_admin,
    require_participant,
    unauthorized,
)

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def dependency_calls(dependant: Dependant) -> set[object]:
    """Every dependency callable in ``dependant``'s tree."""
    calls: set[object] = set()
    pending = list(dependant.dependencies)
    while pending:
        sub = pending.pop()
        calls.add(sub.call)
        pending.extend(sub.dependencies)
    return calls


def bearer_token(request: Request) -> str | None:
    """The bearer credential as ``deps.bearer`` reads it, or None."""
    scheme, token = get_authorization_scheme_param(request.headers.get("authorization"))
    return token if scheme.lower() == "bearer" and token else None


def check_caller(request: Request, token: str, calls: set[object]) -> None:
    """Raise the 401 or 403 the route's dependencies would raise for ``token``, if any."""
    creds = HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)
    with request.app.state.sessionmaker() as session:
        caller = get_caller(session, request.app.state.settings, creds)
    if require_admin in calls:
        require_admin(caller)
    if require_participant in calls or participant_token in calls:
        require_participant(caller)


def _before_dependencies(exc: RequestValidationError) -> bool:
    """True for the body-is-not-JSON error FastAPI raises before solving any dependency."""
    return any(error.get("type") == "json_invalid" for error in exc.errors())


class AuthFirstRoute(APIRoute):
    """An ``APIRoute`` whose callers are authenticated (and their role checked) before any
    validation error is shown to them."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        calls = dependency_calls(self.dependant)
        if bearer not in calls:
            return handler
        # get_caller as a dependency: FastAPI solved it (and the role checks) before it
        # validated the parameters and body, and holds its session; only a body that is not
        # JSON comes before the dependencies
        checked = get_caller in calls

        async def authenticate_first(request: Request) -> Response:
            token = bearer_token(request)
            if token is None:
                raise unauthorized()
            try:
                return await handler(request)
            except RequestValidationError as exc:
                if not checked or _before_dependencies(exc):
                    await run_in_threadpool(check_caller, request, token, calls)
                raise

        return authenticate_first
