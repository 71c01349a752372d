"""The admin dashboard in real headless Chromium: log in via the form, compare with the ledger."""

from __future__ import annotations

from decimal import Decimal

import httpx
import numpy as np
import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def populate(server, coord_kit):
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    rng = np.random.default_rng(3)
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as c:
        signed = c.post("/v1/studies", json=coord_kit.study_spec("cardio-2026")).json()["config"]
        c.post("/v1/studies", json=coord_kit.study_spec("breastw", epsilon_lsh="0.25"))
        for name, cap, releases in [("st-mary", "3", 5), ("charite", "2", 2),
                                    ("karolinska", "4", 1), ("rigshospitalet", "1", 0)]:
            token = c.post("/v1/participants", json={"name": name, "epsilon_cap": cap}).json()[
                "token"]
            c.post("/v1/studies/cardio-2026/members", json={"participant": name})
            for _ in range(releases):
                body, _, _ = coord_kit.release(signed, rng)
                c.post("/v1/studies/cardio-2026/contributions", json=body,
                       headers={"Authorization": f"Bearer {token}"})
        return c.get("/v1/admin/budget").json()


def test_dashboard_shows_the_ledger(browser, artifacts, coordinator_server, tmp_path, coord_kit):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    budgets = populate(server, coord_kit)
    browser.get(server.url + "/admin")
    assert browser.current_url.endswith("/admin/login")
    browser.find_element(By.ID, "token").send_keys(server.admin_token)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    # the click returns before the POST-redirect-GET finishes: wait for the dashboard itself
    WebDriverWait(browser, 20).until(ec.presence_of_element_located((By.ID, "eps-max")))
    assert browser.current_url.endswith("/admin")
    assert server.admin_token not in browser.current_url
    cookie = browser.get_cookie("fedod_admin")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    for b in budgets:
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-participant="{b["participant"]}"]')
        for field in ("epsilon_cap", "epsilon_spent", "epsilon_remaining"):
            cell = row.find_element(By.CSS_SELECTOR, f'[data-field="{field}"]')
            assert Decimal(cell.text) == Decimal(b[field]), (b["participant"], field)
    # per-participant ε: the largest one, never a sum over participants
    most = max(Decimal(b["epsilon_spent"]) for b in budgets)
    assert Decimal(browser.find_element(By.ID, "eps-max").text) == most
    releases = browser.find_elements(By.CSS_SELECTOR, "#releases tbody tr")
    assert len(releases) == sum(len(b["entries"]) for b in budgets)
    study = browser.find_element(By.CSS_SELECTOR, 'tr[data-study="cardio-2026"]')
    # 8 releases from 3 participants: a participant counts once in a model
    assert study.find_element(By.CSS_SELECTOR, '[data-field="contributors"]').text == "3"
    browser.save_screenshot(str(artifacts / "dashboard.png"))
