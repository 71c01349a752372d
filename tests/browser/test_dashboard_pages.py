"""Dashboard pages in real headless Chromium: charts against the ledger, near-cap warning,
refused attempts, per-participant and per-study pages, no sideways scroll on a phone."""

from __future__ import annotations

from decimal import Decimal

import httpx
import numpy as np
import pytest
from dashboard_kit import chart_points, login, running

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def populate(server, coord_kit):
    """Two studies, four participants; rigshospitalet's third release is over its cap."""
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    rng = np.random.default_rng(5)
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as c:
        signed = {s: c.post("/v1/studies", json=coord_kit.study_spec(s, epsilon_lsh=e)).json()[
            "config"] for s, e in (("cardio", "0.5"), ("breastw", "0.25"))}
        plan = [("st-mary", "3", [("cardio", 5)]), ("charite", "2", [("cardio", 1),
                ("breastw", 2)]), ("karolinska", "4", []), ("rigshospitalet", "1",
                [("cardio", 3)])]
        refused = 0
        for name, cap, releases in plan:
            token = c.post("/v1/participants", json={"name": name, "epsilon_cap": cap}).json()[
                "token"]
            for study, n in releases:
                c.post(f"/v1/studies/{study}/members", json={"participant": name})
                for _ in range(n):
                    body, _, _ = coord_kit.release(signed[study], rng)
                    r = c.post(f"/v1/studies/{study}/contributions", json=body,
                               headers={"Authorization": f"Bearer {token}"})
                    refused += r.status_code == 409
        assert refused == 1
        return {b["participant"]: b for b in c.get("/v1/admin/budget").json()}


def test_pages_tell_the_ledger_story(browser, artifacts, coordinator_server, tmp_path,
                                     coord_kit):
    from selenium.webdriver.common.by import By

    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    budgets = populate(server, coord_kit)
    login(browser, server)

    # ε over time per participant: every point is a running total of that participant's charges
    points = chart_points(browser, "chart-participants")
    for name, b in budgets.items():
        eps = [Decimal(e["epsilon"]) for e in b["entries"]]
        assert points.get(name, []) == running(eps), name
    by_study = chart_points(browser, "chart-studies")
    assert by_study["breastw"][-1] == Decimal("0.5")
    # per study: the highest one participant has spent there (st-mary's 5 x 0.5), not the
    # sum of the 8 releases of three participants
    assert by_study["cardio"][-1] == Decimal("2.5")

    # st-mary spent 2.5 of 3 (83 %): warned; charite 1.0 of 2 is not
    warning = browser.find_element(By.ID, "near-cap")
    warned = {e.get_attribute("data-near-cap")
              for e in warning.find_elements(By.CSS_SELECTOR, "[data-near-cap]")}
    assert warned == {"st-mary", "rigshospitalet"}

    refused = browser.find_elements(By.CSS_SELECTOR, "#refused tbody tr")
    assert len(refused) == 1 and "rigshospitalet" in refused[0].text
    assert "0.5" in refused[0].text

    browser.save_screenshot(str(artifacts / "dashboard-desktop.png"))

    browser.find_element(By.LINK_TEXT, "charite").click()
    assert Decimal(browser.find_element(By.ID, "p-spent").text) == Decimal("1")
    rows = browser.find_elements(By.CSS_SELECTOR, "#releases tbody tr")
    assert len(rows) == len(budgets["charite"]["entries"]) == 3
    assert chart_points(browser, "chart") == {"breastw": [Decimal("0.25"), Decimal("0.5")],
                                         "cardio": [Decimal("0.5")],
                                         "all studies": running(
                                             [Decimal(e["epsilon"]) for e in
                                              budgets["charite"]["entries"]])}
    # the cap bounds the total, so only the total's panel draws it
    caps = browser.find_elements(By.CSS_SELECTOR, "#chart line.cap")
    assert [c.find_element(By.XPATH, "ancestor::figure").get_attribute("data-series")
            for c in caps] == ["all studies"]
    assert browser.find_element(By.CSS_SELECTOR, "#chart line.cap").get_attribute(
        "data-cap") == "2"

    browser.get(server.url + "/admin/studies/cardio")
    assert browser.find_element(By.ID, "contributors").text.startswith("3 contributing")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#releases tbody tr")) == 8
    assert len(browser.find_elements(By.CSS_SELECTOR, "#refused tbody tr")) == 1
    browser.get(server.url + "/admin/studies/nope")
    assert "no study 'nope'" in browser.page_source

    browser.set_window_size(420, 900)
    for path, shot in (("/admin", "dashboard-phone.png"),
                       ("/admin/participants/st-mary", "participant-phone.png")):
        browser.get(server.url + path)
        width = browser.execute_script("return window.innerWidth")
        scroll = browser.execute_script("return document.documentElement.scrollWidth")
        wide = browser.execute_script(
            "return [...document.querySelectorAll('body *')].filter(e => "
            "e.getBoundingClientRect().right > window.innerWidth + 1 && !e.closest('.scroll'))"
            ".map(e => e.tagName + '.' + e.className + ' ' + Math.round("
            "e.getBoundingClientRect().right)).slice(0, 8)")
        assert scroll <= width, (path, scroll, width, wide)
        browser.save_screenshot(str(artifacts / shot))


def test_detail_pages_need_a_session(coordinator_server, tmp_path):
    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    r = httpx.get(server.url + "/admin/participants/x", follow_redirects=False, timeout=30)
    assert r.status_code == 303 and r.headers["location"] == "/admin/login"
