"""``X-Forwarded-*`` is trusted only from ``FEDOD_FORWARDED_ALLOW_IPS`` (a real server)."""

from __future__ import annotations

import httpx
import pytest

FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-For": "203.0.113.9"}


@pytest.mark.parametrize(("allow", "trusted"), [("127.0.0.1", True), ("10.255.255.1", False)])
def test_forwarded_headers_only_from_configured_proxies(coordinator_server, tmp_path,
                                                        monkeypatch, allow, trusted):
    monkeypatch.setenv("FEDOD_FORWARDED_ALLOW_IPS", allow)
    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    with httpx.Client(base_url=server.url, headers=FORWARDED, timeout=30) as c:
        assert c.post("/admin/login", data={"token": "wrong"}).status_code == 401
        ok = c.post("/admin/login", data={"token": server.admin_token}, follow_redirects=False)
    assert ok.status_code == 303
    assert ("Secure" in ok.headers["set-cookie"]) is trusted
    client = "203.0.113.9" if trusted else "127.0.0.1"
    refused = [line for line in server.log.read_text().splitlines() if '"status": 401' in line]
    assert refused and f'"client": "{client}"' in refused[-1], refused
