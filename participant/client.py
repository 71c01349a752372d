"""The coordinator's /v1 API as a participant uses it: one typed method per endpoint, so no
caller builds a URL by hand. Retries, backoff and the refusal errors are
:mod:`participant.client_transport`'s; its public names are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.budget import PrivacyBudget
from common.errors import CoordinatorUnavailable, SignatureInvalid
from common.study.signing import key_fingerprint, public_key_from_pem
from participant.client_transport import (
    RETRY_STATUS,
    CoordinatorAddressWrong,
    CoordinatorRefused,
    RetryingHttp,
    check_coordinator_url,
    wrong_address,
)

__all__ = [
    "RETRY_STATUS",
    "CoordinatorAddressWrong",
    "CoordinatorBudget",
    "CoordinatorClient",
    "CoordinatorRefused",
    "CoordinatorUnavailable",
    "CredentialRefused",
    "check_coordinator_url",
    "wrong_address",
]


@dataclass(frozen=True)
class CoordinatorBudget:
    """The coordinator's view of this participant's budget (``GET /v1/me``)."""

    cap: PrivacyBudget
    spent: PrivacyBudget
    remaining: PrivacyBudget


class CredentialRefused(CoordinatorRefused):
    """The coordinator does not accept the participant credential (401/403)."""


class CoordinatorClient(RetryingHttp):
    """Thin, retrying wrapper around the coordinator routes a participant uses."""

    def get_key(self) -> dict[str, Any]:
        """``GET /v1/key`` -> KeyPublic JSON."""
        return self.request("GET", "/v1/key").json()  # type: ignore[no-any-return]

    def pinned_key(self, fingerprint: str, url: str) -> tuple[str, str]:
        """``GET /v1/key`` checked against the pinned ``fingerprint`` (``sha256:...``) of the
        coordinator at ``url``; returns the key's PEM and fingerprint. A wrong address is
        refused at once (:class:`CoordinatorAddressWrong`), not retried as an outage."""
        try:
            doc = self.request("GET", "/v1/key", address_check=True).json()
            pem = str(doc["public_key_pem"])
        except CoordinatorAddressWrong:
            raise
        except CoordinatorRefused as exc:
            raise CoordinatorAddressWrong(
                f"{url} answered GET /v1/key with HTTP {exc.status}: it is not a fedod "
                "coordinator (check --coordinator: scheme, host, port and path prefix); "
                "nothing was stored") from exc
        except (ValueError, KeyError, TypeError) as exc:
            raise CoordinatorAddressWrong(
                f"{url} answered GET /v1/key with something that is not a coordinator key: "
                "check --coordinator; nothing was stored") from exc
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

    def get_round(self, study: str, known_roster: str | None = None,
                  known_membership: str | None = None) -> str | None:
        """``GET /v1/studies/{study}/rounds/current`` -> RoundState JSON text, or None (404:
        no round); the coordinator leaves out the roster ``known_roster`` and the membership
        certificate ``known_membership`` (digests) the caller holds."""
        path = f"/v1/studies/{study}/rounds/current"
        query = [f"{k}={v}" for k, v in (("known_roster", known_roster),
                                         ("known_membership", known_membership)) if v]
        if query:
            path += "?" + "&".join(query)
        resp = self.request("GET", path, ok=(200, 404))
        return resp.text if resp.status_code == 200 else None

    def post_round_message(self, study: str, number: int, step: str, body: bytes,
                           content_type: str = "application/json") -> None:
        """``POST /v1/studies/{study}/rounds/{number}/{step}`` (keys, masked, unmask,
        shares) with the stored message bytes."""
        self.request("POST", f"/v1/studies/{study}/rounds/{number}/{step}", content=body,
                     headers={"Content-Type": content_type})

    def get_beacon(self, study: str) -> str | None:
        """``GET /v1/studies/{study}/rounds/beacon`` -> BeaconPending JSON text, or None
        (404: no attempt waits for the consortium's beacon)."""
        resp = self.request("GET", f"/v1/studies/{study}/rounds/beacon", ok=(200, 404))
        return resp.text if resp.status_code == 200 else None

    def post_beacon(self, study: str, number: int, body: bytes) -> dict[str, Any]:
        """``POST /v1/studies/{study}/rounds/{number}/beacon`` (BeaconCreate JSON)."""
        resp = self.request("POST", f"/v1/studies/{study}/rounds/{number}/beacon", content=body)
        return resp.json()  # type: ignore[no-any-return]

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
