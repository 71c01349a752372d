"""The admin dashboard at ``/admin``: a throttled login form, a revocable session, HTML pages."""

from __future__ import annotations

from collections.abc import Callable
from html import escape
from typing import Annotated

from fastapi import APIRouter, Cookie, Form, Request, Response, status
from fastapi.responses import HTMLResponse, RedirectResponse

from common.errors import NotFound
from coordinator.api.deps import KeysDep, ReadSessionDep, SessionDep, SettingsDep, is_admin_token
from coordinator.dashboard import session as admin_session
from coordinator.dashboard.login_throttle import judge_login
from coordinator.dashboard.pages import (
    dashboard_page,
    login_page,
    page,
    participant_page,
    study_page,
)

router = APIRouter(prefix="/admin", include_in_schema=False)

SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
SessionCookie = Annotated[str | None, Cookie(alias=admin_session.COOKIE_NAME)]


def _html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers=SECURITY_HEADERS)


def _redirect(url: str) -> RedirectResponse:
    return RedirectResponse(url, status_code=status.HTTP_303_SEE_OTHER, headers=SECURITY_HEADERS)


@router.get("")
def dashboard(
    session: ReadSessionDep, settings: SettingsDep, keys: KeysDep, cookie: SessionCookie = None
) -> Response:
    """The budget dashboard, or a redirect to the login form."""
    if not admin_session.verify(session, settings.admin_token, cookie):
        return _redirect("/admin/login")
    return _html(dashboard_page(session, keys.key_id(), settings.dashboard_warn_fraction))


def _detail(render: Callable[[], str], session: ReadSessionDep, settings: SettingsDep,
            cookie: str | None) -> Response:
    if not admin_session.verify(session, settings.admin_token, cookie):
        return _redirect("/admin/login")
    try:
        return _html(render())
    except NotFound as exc:
        return _html(page("Not found", f'<main><section><p class="error">{escape(exc.message)}'
                          '</p><a href="/admin">back to the overview</a></section></main>'),
                     status.HTTP_404_NOT_FOUND)


@router.get("/participants/{name}")
def participant_detail(
    name: str, session: ReadSessionDep, settings: SettingsDep, keys: KeysDep,
    cookie: SessionCookie = None,
) -> Response:
    """One participant's budget, ε over time, itemised charges and refused attempts."""
    return _detail(lambda: participant_page(session, keys.key_id(), name,
                                            settings.dashboard_warn_fraction), session, settings,
                   cookie)


@router.get("/studies/{study_id}")
def study_detail(
    study_id: str, session: ReadSessionDep, settings: SettingsDep, keys: KeysDep,
    cookie: SessionCookie = None,
) -> Response:
    """One study's config, contributors, ε over time per participant and charges."""
    return _detail(lambda: study_page(session, keys.key_id(), study_id), session, settings,
                   cookie)


@router.get("/studies/{study_id}/cohorts")
def study_cohorts(
    study_id: str, session: ReadSessionDep, settings: SettingsDep, keys: KeysDep,
    cookie: SessionCookie = None,
) -> Response:
    """One study's cohort rounds and its released cohorts."""
    from coordinator.dashboard.cohorts import cohorts_page

    return _detail(lambda: cohorts_page(session, keys.key_id(), study_id), session, settings,
                   cookie)


@router.get("/login")
def login_form() -> HTMLResponse:
    """The sign-in form."""
    return _html(login_page())


@router.post("/login")
def login(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    token: Annotated[str, Form(max_length=1024)] = "",
) -> Response:
    """Check the admin token and set the session cookie (HttpOnly, SameSite=Strict)."""
    client = request.client.host if request.client else "-"
    correct = is_admin_token(settings, token)
    wait = judge_login(session, client, correct=correct,
                       limit=settings.login_attempts_per_minute, window_s=settings.login_window_s)
    if wait:
        page = login_page(f"Too many failed attempts; try again in {wait} s.")
        throttled = _html(page, status.HTTP_429_TOO_MANY_REQUESTS)
        throttled.headers["Retry-After"] = str(wait)
        return throttled
    if not correct:
        return _html(login_page("That is not the admin token."), status.HTTP_401_UNAUTHORIZED)
    response = _redirect("/admin")
    response.set_cookie(
        admin_session.COOKIE_NAME,
        admin_session.issue(session, settings.admin_token or "", settings.session_max_age_s),
        max_age=settings.session_max_age_s,
        path="/admin",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


@router.post("/logout")
def logout(session: SessionDep, settings: SettingsDep, cookie: SessionCookie = None) -> Response:
    """End the session on the server (copies of the cookie stop working) and drop the cookie."""
    admin_session.revoke(session, settings.admin_token, cookie)
    response = _redirect("/admin/login")
    response.delete_cookie(admin_session.COOKIE_NAME, path="/admin")
    return response
