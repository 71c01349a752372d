"""Retrying HTTP to the coordinator, under :class:`participant.client.CoordinatorClient`.

Retried (same request bytes every time): connection errors, timeouts, a dropped connection,
5xx, 408 and 429 (honouring ``Retry-After`` up to the cap, plus up to half of it again at
random so that a cohort does not return at one instant). Backoff is exponential with full
jitter, ``min(cap, base * 2**attempt) * U(0.5, 1]``, at least ``max_tries`` attempts and on
until ``patience`` seconds (on the injectable ``clock``) have passed since the first; then
:class:`~common.errors.CoordinatorUnavailable`. A command that waits on others anyway (a secure
round) sets ``patience``, so that a coordinator busy with a whole cohort is waited out. Any
other 4xx is final and raises :class:`CoordinatorRefused` with the coordinator's ``detail``.
``sleep`` is injectable so tests do not wait. A connection failure that shows the address is
wrong (:func:`wrong_address`) can be refused at once as :class:`CoordinatorAddressWrong`
instead of retried.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Self

import httpx

from common.errors import CoordinatorUnavailable, FedodError

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_jitter = random.SystemRandom()


class CoordinatorRefused(FedodError):
    """The coordinator answered with a final 4xx; ``status`` and ``detail`` say why (exit 7,
    or 5 when the coordinator's ledger refused the budget)."""

    exit_code = 7

    def __init__(self, message: str, *, status: int, detail: str, **context: object) -> None:
        super().__init__(message, status=status, detail=detail, **context)
        self.status = status
        self.detail = detail
        if self.is_budget:
            self.exit_code = 5

    @property
    def is_budget(self) -> bool:
        return self.status == 409 and "budget" in self.detail.lower()


def check_coordinator_url(url: str) -> str:
    """Refuse a coordinator address that is not an http(s) URL (a usage error, not an outage)."""
    parsed = httpx.URL(url) if url.startswith(("http://", "https://")) else None
    if parsed is None or not parsed.host:
        raise ValueError(f"--coordinator {url!r} is not a URL: give it with its scheme, "
                         "e.g. https://coordinator.example.org or http://127.0.0.1:8000")
    return url


class CoordinatorAddressWrong(ValueError):
    """The coordinator address cannot be right (unknown host, nothing listening, https
    against a plain-http server): a configuration error at enrolment, not an outage."""


def wrong_address(exc: httpx.TransportError, url: str) -> str | None:
    """Why ``url`` cannot be a coordinator, from a failed connection; ``None`` when the
    failure may be passing (a timeout, a dropped connection)."""
    if not isinstance(exc, httpx.ConnectError):
        return None
    text, target = str(exc), httpx.URL(url)
    low = text.lower()
    port = target.port or (443 if target.scheme == "https" else 80)
    where = f"{target.host}:{port}"
    if any(k in low for k in ("name or service not known", "nodename nor servname",
                              "name resolution", "no address associated", "getaddrinfo")):
        why = f"the host name {target.host!r} is unknown ({text})"
    elif "refused" in low or "errno 111" in low:
        why = f"nothing accepts connections at {where} (connection refused)"
    elif "certificate" in low:
        why = f"the server at {where} presented a certificate this machine does not trust ({text})"
    elif any(k in low for k in ("ssl", "tls", "wrong version number", "record layer")):
        why = (f"the TLS handshake with {where} failed ({text}): the server there does not "
               f"speak https; if the coordinator serves plain http, use http://{where}")
    else:
        return None
    return (f"cannot reach a coordinator at {url}: {why}. Check --coordinator (scheme, host "
            f"and port, as the coordinator's operator gave them); nothing was stored")


def _detail(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:500]
    detail = body.get("detail") if isinstance(body, dict) else body
    return detail if isinstance(detail, str) else str(detail)[:500]


class RetryingHttp:
    """An ``httpx.Client`` on the coordinator's base URL whose :meth:`request` retries
    transient failures with the same bytes (module docstring)."""

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
        clock: Callable[[], float] = time.monotonic,
        patience: float = 0.0,
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
        self.sleep, self.clock, self.patience = sleep, clock, patience

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def backoff(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 0)."""
        if retry_after is not None:
            try:  # never sooner than asked, and spread: a cohort told "5" must not all return
                # at the same instant (that burst is what made the coordinator say "5")
                wait = max(0.0, float(retry_after)) * (1.0 + 0.5 * _jitter.random())
                return min(self.backoff_cap, wait)
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
        address_check: bool = False,
    ) -> httpx.Response:
        """Send one request, retrying transient failures with the *same* bytes.
        ``address_check``: a connection failure that shows the address is wrong
        (:func:`wrong_address`) raises :class:`CoordinatorAddressWrong` at once."""
        if content is not None:
            headers = {"Content-Type": "application/json", **(headers or {})}
        last, began, tries = "no attempt made", self.clock(), 0
        while True:
            tries += 1
            retry_after = None
            try:
                response = self._http.request(method, path, content=content, headers=headers)
            except httpx.TransportError as exc:  # connect/read/write errors, timeouts, drops
                if address_check and (why := wrong_address(exc, self.base_url)):
                    raise CoordinatorAddressWrong(why) from exc
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
            if tries >= self.max_tries and self.clock() - began >= self.patience:
                break
            self.sleep(self.backoff(tries - 1, retry_after))
        raise CoordinatorUnavailable(
            f"coordinator at {self.base_url} unavailable for {method} {path} after "
            f"{tries} tries (last: {last}); nothing is lost, run the command again "
            f"later (a stored release is re-sent unchanged)",
            url=self.base_url,
            path=path,
            tries=tries,
            last=last,
        )
