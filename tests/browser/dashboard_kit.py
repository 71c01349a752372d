"""Helpers of the dashboard tests in headless Chromium: log in as the admin, read a chart's
points, running sums of a ledger, and a noise-free cohort round release over HTTP."""

from __future__ import annotations

from decimal import Decimal

from common.cohorts.protocol import CohortState
from common.cohorts.study import protocol_for


def login(browser, server):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server.url + "/admin/login")
    browser.find_element(By.ID, "token").send_keys(server.admin_token)
    browser.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    WebDriverWait(browser, 20).until(ec.presence_of_element_located((By.ID, "eps-max")))


def chart_points(browser, section_id):
    from selenium.webdriver.common.by import By

    out: dict[str, list[Decimal]] = {}
    for c in browser.find_elements(By.CSS_SELECTOR, f"#{section_id} circle.point"):
        out.setdefault(c.get_attribute("data-series"), []).append(
            Decimal(c.get_attribute("data-eps")))
    return out


def running(values):
    total, out = Decimal(0), []
    for v in values:
        total += v
        out.append(total)
    return out


def release_round(c, config, token, number, X, study="cardio"):
    protocol = protocol_for(config.cohorts, config.lo, config.hi, bytes.fromhex(config.lsh.seed))
    doc = c.get(f"/v1/studies/{study}/cohorts").json()
    values = protocol.exact(CohortState(number - 1, doc["state"]), X)  # noise-free: exact page
    body = {"idempotency_key": f"r{number}", "config_version": config.version,
            "epsilon": format(protocol.cost(CohortState(number - 1, {})).epsilon.normalize(), "f"),
            "values": [int(v) for v in values]}
    r = c.post(f"/v1/studies/{study}/cohorts/rounds/{number}", json=body,
               headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 201, r.text
