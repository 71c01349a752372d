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
from common.errors import CoordinatorUnavailable, FedodError, SignatureInvalid
from common.signing import key_fingerprint, public_key_from_pem

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


def check_coordinator_url(url: str) -> str:
    """Refuse a coordinator address that is not an http(s) URL (a usage error, not an outage)."""
    parsed = httpx.URL(url) if url.startswith(("http://", "https://")) else None
    if parsed is None or not parsed.host:
        raise ValueError(f"--coordinator {url!r} is not a URL: give it with its scheme, "
                         "e.g. https://coordinator.example.org or http://127.0.0.1:8000")
    return url


class CredentialRefused(CoordinatorRefused):
    """The coordinator does not accept the participant credential (401/403)."""


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

    def pinned_key(self, fingerprint: str, url: str) -> tuple[str, str]:
        """``GET /v1/key`` checked against the pinned ``fingerprint`` (``sha256:...``) of the
        coordinator at ``url``; returns the key's PEM and fingerprint."""
        pem = str(self.get_key()["public_key_pem"])
        actual = key_fingerprint(public_key_from_pem(pem))
        if actual != fingerprint.lower():
            raise SignatureInvalid(
                f"the coordinator at {url} presented key {actual}, not the pinned "
                f"{fingerprint}; check the fingerprint with the coordinator's operator",
                actual=actual,
            )
        return pem, actual

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

    def check_credential(self, url: str) -> None:
        """Ask ``GET /v1/me``; raise :class:`CredentialRefused` if the coordinator (``url``, as
        the operator gave it) does not accept our credential (401/403)."""
        try:
            self.me()
        except CoordinatorRefused as exc:
            if exc.status not in (401, 403):
                raise
            raise CredentialRefused(
                f"the coordinator at {url} does not accept this credential "
                f"(HTTP {exc.status}: {exc.detail}). Check that the token file holds the "
                "credential the coordinator's operator gave you for this participant, "
                "and that it was not revoked; nothing was stored.",
                status=exc.status, detail=exc.detail) from exc

    def participant_name(self) -> str:
        """Our participant name as the coordinator knows it (``GET /v1/me``)."""
        return str(self.me()["participant"])

    def register_identity_key(self, body: bytes) -> None:
        """``POST /v1/me/identity-key`` with the key and its proof of possession."""
        self.request("POST", "/v1/me/identity-key", content=body)

    def get_round(self, study: str, known_roster: str | None = None) -> str | None:
        """``GET /v1/studies/{study}/rounds/current`` -> RoundState JSON text, or None (404:
        no round); with ``known_roster`` the coordinator leaves that roster out."""
        path = f"/v1/studies/{study}/rounds/current"
        if known_roster is not None:
            path += f"?known_roster={known_roster}"
        resp = self.request("GET", path, ok=(200, 404))
        return resp.text if resp.status_code == 200 else None

    def post_round_message(self, study: str, number: int, step: str, body: bytes,
                           content_type: str = "application/json") -> None:
        """``POST /v1/studies/{study}/rounds/{number}/{step}`` (keys, masked, unmask,
        shares) with the stored message bytes."""
        self.request("POST", f"/v1/studies/{study}/rounds/{number}/{step}", content=body,
                     headers={"Content-Type": content_type})

    def get_cohorts(self, study: str) -> dict[str, Any]:
        """``GET /v1/studies/{study}/cohorts`` -> the cohort run's state (and model when done)."""
        return self.request("GET", f"/v1/studies/{study}/cohorts").json()  # type: ignore[no-any-return]

    def post_cohort_round(self, study: str, number: int, body: bytes) -> None:
        """``POST /v1/studies/{study}/cohorts/rounds/{number}`` with the stored vector bytes."""
        self.request("POST", f"/v1/studies/{study}/cohorts/rounds/{number}", content=body)

    def post_online_gradient(self, study: str, body: bytes) -> None:
        """``POST /v1/studies/{study}/online/gradients`` with the stored window release."""
        self.request("POST", f"/v1/studies/{study}/online/gradients", content=body)

    def get_online_model(self, study: str) -> dict[str, Any]:
        """``GET /v1/studies/{study}/online/model`` -> weights, average, centre, version."""
        return self.request("GET", f"/v1/studies/{study}/online/model").json()  # type: ignore[no-any-return]

    def budget(self) -> CoordinatorBudget:
        """Our cap, spent and remaining budget as the coordinator's ledger has them."""
        me = self.me()
        cap, spent, remaining = (
            PrivacyBudget(str(me[f"epsilon_{k}"]), str(me[f"delta_{k}"]))
            for k in ("cap", "spent", "remaining")
        )
        return CoordinatorBudget(cap, spent, remaining)
