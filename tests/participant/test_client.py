"""Retry, backoff and idempotency behaviour of the coordinator client (httpx.MockTransport)."""

from __future__ import annotations

import httpx
import pytest

from common.errors import CoordinatorUnavailable
from participant.client import CoordinatorClient, CoordinatorRefused


def make_client(handler, **kw):
    sleeps: list[float] = []
    client = CoordinatorClient(
        "http://coord.test",
        "tok",
        transport=httpx.MockTransport(handler),
        sleep=sleeps.append,
        **kw,
    )
    return client, sleeps


def flaky(failures):
    """Fail with each item of ``failures`` in turn (an exception or a status), then succeed."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) <= len(failures):
            failure = failures[len(seen) - 1]
            if isinstance(failure, Exception):
                raise failure
            return httpx.Response(failure, json={"detail": "try later"})
        return httpx.Response(201, json={"id": "c1"})

    return handler, seen


@pytest.mark.parametrize(
    "failure",
    [
        httpx.ConnectError("refused"),
        httpx.ReadTimeout("slow"),
        httpx.RemoteProtocolError("peer closed connection without sending complete message"),
        500,
        502,
        503,
        408,
        429,
    ],
)
def test_transient_failures_are_retried_with_identical_bytes(failure):
    handler, seen = flaky([failure, failure])
    client, sleeps = make_client(handler)
    body = b'{"idempotency_key":"k-0123456789abcdef","x":1}'
    assert client.post_contribution("s1", body) == {"id": "c1"}
    assert len(seen) == 3
    assert {r.content for r in seen} == {body}
    assert all(r.headers["Authorization"] == "Bearer tok" for r in seen)
    assert len(sleeps) == 2


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
def test_final_4xx_is_not_retried(status):
    handler, seen = flaky([status] * 5)
    client, sleeps = make_client(handler)
    with pytest.raises(CoordinatorRefused, match=f"HTTP {status}: try later") as info:
        client.post_contribution("s1", b"{}")
    assert info.value.status == status
    assert len(seen) == 1 and sleeps == []


def test_gives_up_after_max_tries_with_clear_error():
    handler, seen = flaky([httpx.ConnectError("refused")] * 100)
    client, sleeps = make_client(handler, max_tries=6)
    with pytest.raises(CoordinatorUnavailable, match="after 6 tries.*ConnectError"):
        client.get_key()
    assert len(seen) == 6 and len(sleeps) == 5


def test_backoff_grows_exponentially_is_jittered_and_capped():
    client, _ = make_client(lambda r: httpx.Response(200), backoff_base=1.0, backoff_cap=30.0)
    for attempt in range(8):
        waits = [client.backoff(attempt) for _ in range(50)]
        top = min(30.0, 2.0**attempt)
        assert all(top / 2 <= w <= top for w in waits)
    assert len({client.backoff(3) for _ in range(20)}) > 1


def test_retry_after_is_honoured_but_capped():
    responses = iter(
        [
            httpx.Response(429, headers={"Retry-After": "2"}),
            httpx.Response(503, headers={"Retry-After": "3600"}),
            httpx.Response(200, json={}),
        ]
    )
    client, sleeps = make_client(lambda r: next(responses), backoff_cap=5.0)
    client.get_key()
    assert 2.0 <= sleeps[0] <= 3.0 and sleeps[1] == 5.0  # never sooner; spread; capped
    waits = {client.backoff(0, "2") for _ in range(20)}
    assert len(waits) > 1 and min(waits) >= 2.0 and max(waits) <= 3.0


def test_model_fetch_sends_if_none_match_and_handles_304():
    def handler(request):
        if request.headers.get("If-None-Match") == '"s1-3"':
            return httpx.Response(304)
        return httpx.Response(200, text='{"version": 3}', headers={"ETag": '"s1-3"'})

    client, _ = make_client(handler)
    text, etag = client.get_model("s1")
    assert text == '{"version": 3}' and etag == '"s1-3"'
    assert client.get_model("s1", etag) == (None, '"s1-3"')


def test_budget_refusal_is_recognised():
    client, _ = make_client(
        lambda r: httpx.Response(409, json={"detail": "privacy budget exceeded: ..."})
    )
    with pytest.raises(CoordinatorRefused) as info:
        client.post_contribution("s1", b"{}")
    assert info.value.is_budget
