"""The dashboard stays readable and true with 20 participants and 5 studies of every kind
(independent, secure, stream, cohorts), in real headless Chromium at desktop and phone width.

Readability is measured on the rendered page, not on the HTML: tick labels must not overlap
(element bounding boxes), every text is drawn at 10 px or more (SVG text at its rendered
scale), headers are not cut, a table that overflows its box shows a scroll cue (the edge
shadow, read off the element's screenshot), and each participant's line is in its own panel.
"""

from __future__ import annotations

import io
import statistics
from decimal import Decimal

import httpx
import numpy as np
import pytest
from dashboard_kit import chart_points, login, release_round, running

from common.budget import plain_decimal as fmt
from common.study.config import StudyConfig

pytestmark = [pytest.mark.browser, pytest.mark.slow]

NAMES = [f"hospital-{i:02d}" + ("-university-clinic" if i % 5 == 0 else "") for i in range(20)]
REVOKED = NAMES[3]
PHONE = (390, 844)


def _study(c, coord_kit, study_id, **extra):
    spec = {**coord_kit.study_spec(study_id, epsilon_lsh="0.25"), **extra}
    r = c.post("/v1/studies", json=spec)
    assert r.status_code == 201, r.text
    return r.json()["config"]


def populate(server, coord_kit):
    """Five studies (two independent, secure, stream, cohorts), 20 participants with 1 to 4
    releases each, a cohort run whose start centroids two cohorts never leave, one revoked
    contributor. Returns the budgets by name and the signed configs by study."""
    admin = {"Authorization": f"Bearer {server.admin_token}"}
    rng = np.random.default_rng(8)
    with httpx.Client(base_url=server.url, headers=admin, timeout=30) as c:
        signed = {
            "cardio": _study(c, coord_kit, "cardio"),
            "breastw": _study(c, coord_kit, "breastw"),
            "secure-icu": _study(c, coord_kit, "secure-icu", aggregation={
                "mode": "secure", "cohort_size": 4, "max_dropouts": 1, "max_colluders": 1}),
            "stream-ward": _study(c, coord_kit, "stream-ward", online={"dim": 4}),
            "cohort-onc": _study(c, coord_kit, "cohort-onc", cohorts={
                "k": 3, "over": 1, "rounds": 2, "epsilon": "2"}),
        }
        tokens = {}
        for i, name in enumerate(NAMES):
            tokens[name] = c.post("/v1/participants",
                                  json={"name": name, "epsilon_cap": "5"}).json()["token"]
            studies = ["cardio"] + (["breastw"] if i % 3 == 0 else [])
            for study in studies:
                c.post(f"/v1/studies/{study}/members", json={"participant": name})
                for _ in range(1 + i % 4 if study == "cardio" else 1):
                    body, _, _ = coord_kit.release(signed[study], rng)
                    r = c.post(f"/v1/studies/{study}/contributions", json=body,
                               headers={"Authorization": f"Bearer {tokens[name]}"})
                    assert r.status_code == 201, r.text
        # the cohort run: one tight blob in two hospitals, k = 3 without fusion, noise-free
        config = StudyConfig.model_validate_json(signed["cohort-onc"]["payload"])
        blob = {n: np.clip(rng.normal(0.3, 0.01, (150, 3)), 0, 1) for n in NAMES[:2]}
        for name in blob:
            c.post("/v1/studies/cohort-onc/members", json={"participant": name})
        assert c.post("/v1/studies/cohort-onc/cohorts").status_code == 201
        for number in (1, 2):
            for name, X in blob.items():
                release_round(c, config, tokens[name], number, X, study="cohort-onc")
        assert c.post(f"/v1/participants/{REVOKED}/revoke").status_code == 200
        budgets = {b["participant"]: b for b in c.get("/v1/admin/budget").json()}
        cohorts = c.get("/v1/studies/cohort-onc/cohorts").json()
    return budgets, signed, cohorts


# --- what the page measures in the browser ------------------------------------------------

_OVERLAPS = """
const boxes = [...document.querySelectorAll(arguments[0])].map(e => [e, e.getBoundingClientRect()])
  .filter(([e, r]) => r.width > 0);
const out = [];
for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
  const [a, ra] = boxes[i], [b, rb] = boxes[j];
  if (a.closest('svg') !== b.closest('svg')) continue;
  if (ra.left < rb.right - 0.5 && rb.left < ra.right - 0.5 && ra.top < rb.bottom - 0.5
      && rb.top < ra.bottom - 0.5) out.push(a.textContent + ' / ' + b.textContent);
}
return [boxes.length, out];
"""

_SMALL_TEXT = """
const small = [];
let svgTexts = 0;
for (const t of document.querySelectorAll('svg text')) {
  const svg = t.closest('svg');
  const scale = svg.getBoundingClientRect().width / svg.viewBox.baseVal.width;
  const px = parseFloat(getComputedStyle(t).fontSize) * scale;
  svgTexts++;
  if (px < 10) small.push(t.textContent + ' ' + px.toFixed(1));
}
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
while (walker.nextNode()) {
  const el = walker.currentNode.parentElement;
  if (!walker.currentNode.textContent.trim() || el.closest('svg')) continue;
  const style = getComputedStyle(el);
  if (style.display === 'none' || style.visibility === 'hidden') continue;
  const px = parseFloat(style.fontSize);
  if (px < 10) small.push(el.tagName + ' ' + walker.currentNode.textContent.trim() + ' ' + px);
}
return [svgTexts, small];
"""

_CUT_HEADERS = """
return [...document.querySelectorAll('h1, h2, th, figcaption')].filter(e =>
  e.scrollWidth > e.clientWidth + 1
  || (e.tagName !== 'TH' && e.getBoundingClientRect().right > window.innerWidth + 1))
  .map(e => e.tagName + ' ' + e.textContent);
"""


def _brightness(png: bytes, columns: slice) -> float:
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=float)
    return float(image[:, columns].mean())


def shot(browser, path) -> None:
    """A screenshot of the whole page, not only the window (Chromium's DevTools protocol)."""
    import base64

    doc = browser.execute_cdp_cmd("Page.captureScreenshot",
                                  {"format": "png", "captureBeyondViewport": True})
    path.write_bytes(base64.b64decode(doc["data"]))


def check_readable(browser, where: str) -> dict[str, int]:
    """Assert the readability properties of the page shown; return what was measured."""
    from selenium.webdriver.common.by import By

    width = browser.execute_script("return window.innerWidth")
    assert browser.execute_script("return document.documentElement.scrollWidth") <= width, where
    ticks, overlapping = browser.execute_script(_OVERLAPS, "svg text")
    assert overlapping == [], (where, overlapping)
    svg_texts, small = browser.execute_script(_SMALL_TEXT)
    assert small == [], (where, small)
    assert browser.execute_script(_CUT_HEADERS) == [], where
    overflowing = 0
    for box in browser.find_elements(By.CSS_SELECTOR, ".scroll"):
        if not browser.execute_script(
                "return arguments[0].scrollWidth > arguments[0].clientWidth + 1", box):
            continue
        overflowing += 1
        browser.execute_script("arguments[0].scrollLeft = 0", box)
        png = box.screenshot_as_png
        right, left = _brightness(png, slice(-5, None)), _brightness(png, slice(0, 5))
        # the cue: a shadow at the edge that hides columns, none at the edge that does not
        assert right < left - 25, (where, box.get_attribute("innerHTML")[:80], right, left)
    return {"ticks": ticks, "svg_texts": svg_texts, "overflowing": overflowing}


def check_panels(browser, section: str, budgets: dict, by_participant: bool) -> None:
    """One panel per line, panels apart, each holding its own series' points only."""
    from selenium.webdriver.common.by import By

    panels = browser.find_elements(By.CSS_SELECTOR, f"#{section} figure.panel")
    labels = [p.get_attribute("data-series") for p in panels]
    assert len(labels) == len(set(labels))
    if by_participant:
        assert sorted(labels) == sorted(n for n, b in budgets.items() if b["entries"])
    rects = [p.rect for p in panels]
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            apart = (a["x"] + a["width"] <= b["x"] + 0.5 or b["x"] + b["width"] <= a["x"] + 0.5
                     or a["y"] + a["height"] <= b["y"] + 0.5
                     or b["y"] + b["height"] <= a["y"] + 0.5)
            assert apart, (a, b)
    for panel, label in zip(panels, labels, strict=True):
        series = {c.get_attribute("data-series")
                  for c in panel.find_elements(By.CSS_SELECTOR, "circle.point")}
        assert series == {label}
        assert label in panel.find_element(By.TAG_NAME, "figcaption").text.replace("\n", " ")


def test_twenty_participants_five_studies_readable_and_true(
        browser, artifacts, coordinator_server, tmp_path, coord_kit):
    from selenium.webdriver.common.by import By

    server = coordinator_server(f"sqlite:///{tmp_path / 'c.db'}", workers=1)
    budgets, signed, cohorts = populate(server, coord_kit)
    login(browser, server)

    # ε per participant: the largest and the median, never a sum over participants
    spent = [Decimal(b["epsilon_spent"]) for b in budgets.values()]
    assert Decimal(browser.find_element(By.ID, "eps-max").text) == max(spent)
    assert Decimal(browser.find_element(By.ID, "eps-median").text) == statistics.median(spent)
    assert "total ε" not in browser.find_element(By.TAG_NAME, "main").text
    assert "never a sum" in browser.find_element(By.ID, "eps-note").text

    # every participant's line in its own panel, its points the ledger's running totals
    check_panels(browser, "chart-participants", budgets, by_participant=True)
    points = chart_points(browser, "chart-participants")
    for name, b in budgets.items():
        assert points.get(name, []) == running([Decimal(e["epsilon"]) for e in b["entries"]])
    check_panels(browser, "chart-studies", budgets, by_participant=False)

    # what a participant pays, per study kind, as the signed configs say
    for study, doc in signed.items():
        config = StudyConfig.model_validate_json(doc["payload"])
        row = browser.find_element(By.CSS_SELECTOR, f'tr[data-study="{study}"]')
        costs = {e.get_attribute("data-cost"): e.text
                 for e in row.find_elements(By.CSS_SELECTOR, "[data-cost]")}
        mode = "secure round" if study == "secure-icu" else "release"
        expected = {"release": f"ε {fmt(config.release_cost().epsilon)} per {mode}"}
        if config.online is not None:
            window = config.online.epoch_cost()
            assert window.delta > 0 and window.epsilon > config.release_cost().epsilon
            expected["window"] = (f"ε {fmt(window.epsilon)}, δ {fmt(window.delta)} per stream "
                                  "window")
        if config.cohorts is not None:
            expected["cohorts"] = (f"ε {fmt(config.cohorts.epsilon)} in all over at most 2 "
                                   "cohort rounds, on top of the releases")
        assert costs == expected, study
        kind = row.find_element(By.CSS_SELECTOR, '[data-field="kind"]').text
        assert kind == {"secure-icu": "secure", "stream-ward": "independent + stream",
                        "cohort-onc": "independent + cohorts"}.get(study, "independent")
    cardio = browser.find_element(By.CSS_SELECTOR, 'tr[data-study="cardio"]')
    assert cardio.find_element(By.CSS_SELECTOR, '[data-field="contributors"]').text == "20"
    assert "(1 revoked)" in cardio.text
    desktop = check_readable(browser, "overview, desktop")
    assert desktop["svg_texts"] >= 4 * 20  # 20 participant panels, 4+ labels each
    shot(browser, artifacts / "readable-overview-desktop.png")

    browser.get(server.url + "/admin/studies/cardio")
    assert browser.find_element(By.ID, "contributors").text == (
        "20 contributing participants, 1 since revoked (releases made before a revocation "
        "stay in the model)")
    check_panels(browser, "chart", budgets, by_participant=True)

    browser.get(server.url + "/admin/studies/cohort-onc/cohorts")
    rows = browser.find_elements(By.CSS_SELECTOR, "#cohorts tbody tr")
    shown = {int(r.get_attribute("data-cohort")): r.get_attribute("data-marks") for r in rows}
    assert shown == {i: " ".join(m) for i, m in enumerate(cohorts["marks"])}
    # one tight blob, three centroids: a seed centroid that no record reached keeps its seed
    # start and a noisy size of 0 (the blob takes one or, rarely, two of the three)
    sizes = {int(r.get_attribute("data-cohort")):
             int(r.find_element(By.CSS_SELECTOR, '[data-field="size"]').text) for r in rows}
    empty = [i for i, size in sizes.items() if size == 0]
    assert empty and all(shown[i] == "noise unmoved" for i in empty), (sizes, shown)
    assert all(shown[i] == "" for i, size in sizes.items() if size >= 100), (sizes, shown)
    assert "not a finding" in browser.find_element(By.CSS_SELECTOR, "#cohorts").text
    shot(browser, artifacts / "readable-cohorts-desktop.png")

    busy = NAMES[0]  # cardio, breastw and the cohort rounds, and the total against the cap
    browser.get(server.url + f"/admin/participants/{busy}")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#chart figure.panel")) == 4
    labels = [t.text for t in browser.find_elements(By.CSS_SELECTOR, "#chart text.tick-x")]
    assert labels and all(len(t) <= 8 for t in labels), labels  # HH:MM:SS, HH:MM or DD Mon
    check_readable(browser, "participant, desktop")
    shot(browser, artifacts / "readable-participant-desktop.png")

    # a phone's layout viewport, exactly: 390 CSS px wide, overlay scrollbars
    browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
    pages = [("/admin", "overview"), (f"/admin/participants/{busy}", "participant"),
             ("/admin/studies/cardio", "study"), ("/admin/studies/cohort-onc/cohorts", "cohorts")]
    overflowing = 0
    for path, name in pages:
        browser.get(server.url + path)
        assert browser.execute_script("return window.innerWidth") == PHONE[0]
        measured = check_readable(browser, f"{name}, phone")
        overflowing += measured["overflowing"]
        shot(browser, artifacts / f"readable-{name}-phone.png")
    assert overflowing >= 3  # the wide tables do overflow on a phone: the cue was checked
