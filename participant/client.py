"""HTTP client for the coordinator's /v1 API, with bounded retries.

Retried (same request bytes every time): connection errors, timeouts, a dropped connection,
5xx, 408 and 429 (honouring ``Retry-After`` up to the cap). Backoff is exponential with full
jitter, ``min(cap, base * 2**attempt) * U(0.5, 1]``, at most ``max_tries`` attempts; then
:class:`~common.errors.CoordinatorUnavailable`. Any other 4xx is final and raises
:class:`CoordinatorRefused` with the coordinator's ``detail``. ``sleep`` is injectable so tests
do not wait.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from common.budget import PrivacyBudget
from common.errors import CoordinatorUnavailable, FedodError

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_jitter = random.SystemRandom()


@dataclass(frozen=True)
class CoordinatorBudget:
    """The coordinator's view of this participant's budget (``GET /v1/me``)."""

    cap: PrivacyBudget
    spent: PrivacyBudget
    remaining: PrivacyBudget


class CoordinatorRefused(FedodError):
    """The coordinator answered with a final 4xx; ``status`` and ``detail`` say why."""

    def __init__(self, message: str, *, status: int, detail: str, **context: object) -> None:
        super().__init__(message, status=status, detail=detail, **context)
        self.status = status
        self.detail = detail

    @property
    def is_budget(self) -> bool:
        return self.status == 409 and "budget" in self.detail.lower()


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    detail = body.get("detail") if isinstance(body, dict) else body
    return detail if isinstance(detail, str) else str(detail)[:500]


class CoordinatorClient:
    """Thin, retrying wrapper around the coordinator routes a participant uses."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 30.0,
        max_tries: int = 6,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        sleep: Callable[[float], None] = time.sleep,
        event_hooks: dict[str, list[Callable[..., Any]]] | None = None,
    ) -> None:
        headers = {"User-Agent": "fedod-participant/0.1"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=timeout,
            transport=transport,
            event_hooks=event_hooks,
        )
        self.max_tries = max_tries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.sleep = sleep

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> CoordinatorClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def backoff(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 0)."""
        if retry_after is not None:
            try:
                return min(self.backoff_cap, max(0.0, float(retry_after)))
            except ValueError:
                pass
        return float(min(self.backoff_cap, self.backoff_base * 2**attempt)) * (
            0.5 + 0.5 * _jitter.random()
        )

    def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201, 204),
    ) -> httpx.Response:
        """Send one request, retrying transient failures with the *same* bytes."""
        if content is not None:
            headers = {"Content-Type": "application/json", **(headers or {})}
        last = "no attempt made"
        for attempt in range(self.max_tries):
            retry_after = None
            try:
                response = self._http.request(method, path, content=content, headers=headers)
            except httpx.TransportError as exc:  # connect/read/write errors, timeouts, drops
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code in ok:
                    return response
                if response.status_code not in RETRY_STATUS:
                    detail = _detail(response)
                    raise CoordinatorRefused(
                        f"coordinator refused {method} {path}: HTTP {response.status_code}: "
                        f"{detail}",
                        status=response.status_code,
                        detail=detail,
                    )
                last = f"HTTP {response.status_code}: {_detail(response)}"
                retry_after = response.headers.get("Retry-After")
            if attempt + 1 < self.max_tries:
                self.sleep(self.backoff(attempt, retry_after))
        raise CoordinatorUnavailable(
            f"coordinator at {self.base_url} unavailable for {method} {path} after "
            f"{self.max_tries} tries (last: {last}); nothing is lost, run the command again "
            f"later (a stored release is re-sent unchanged)",
            url=self.base_url,
            path=path,
            tries=self.max_tries,
            last=last,
        )

    def get_key(self) -> dict[str, Any]:
        """``GET /v1/key`` -> KeyPublic JSON."""
        return self.request("GET", "/v1/key").json()  # type: ignore[no-any-return]

    def get_config(self, study: str) -> str:
        """``GET /v1/studies/{study}/config`` -> SignedConfig JSON text."""
        return self.request("GET", f"/v1/studies/{study}/config").text

    def post_contribution(self, study: str, body: bytes) -> dict[str, Any]:
        """``POST /v1/studies/{study}/contributions`` with the stored body bytes."""
        resp = self.request("POST", f"/v1/studies/{study}/contributions", content=body)
        return resp.json()  # type: ignore[no-any-return]

    def get_model(self, study: str, etag: str | None = None) -> tuple[str | None, str | None]:
        """``GET /v1/studies/{study}/model`` -> (JSON text or None if 304, ETag)."""
        headers = {"If-None-Match": etag} if etag else None
        resp = self.request(
            "GET", f"/v1/studies/{study}/model", headers=headers, ok=(200, 304)
        )
        if resp.status_code == 304:
            return None, etag
        return resp.text, resp.headers.get("ETag")

    def me(self) -> dict[str, Any]:
        """``GET /v1/me`` -> BudgetPublic JSON (the coordinator's ledger for us)."""
        return self.request("GET", "/v1/me").json()  # type: ignore[no-any-return]

    def budget(self) -> CoordinatorBudget:
        """Our cap, spent and remaining budget as the coordinator's ledger has them."""
        me = self.me()
        cap, spent, remaining = (
            PrivacyBudget(str(me[f"epsilon_{k}"]), str(me[f"delta_{k}"]))
            for k in ("cap", "spent", "remaining")
        )
        return CoordinatorBudget(cap, spent, remaining)
