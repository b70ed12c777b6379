"""The metrics dashboard in headless Chromium, on days of history played by `seed_scenario`: every chart draws
under the real CSP, and the page is captured for the docs."""

import os
from io import StringIO
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from playwright.sync_api import sync_playwright

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
SCREENSHOT = Path(settings.BASE_DIR) / "test-output" / "screenshots" / "dashboard.png"


@pytest.fixture
def seeded_staff_session(transactional_db: None) -> str:
    # A fifth of the default traffic: some 140 answers over three days draw every chart, in a third of the time.
    call_command("seed_scenario", days=3, seed=7, scale=0.2, stdout=StringIO())
    lead = User.objects.create_user("ops-lead", is_staff=True)
    client = Client()
    client.force_login(lead)
    return client.cookies[settings.SESSION_COOKIE_NAME].value


def test_the_dashboard_draws_a_seeded_history_under_the_csp(live_server, seeded_staff_session: str) -> None:
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is missing: install Debian's chromium (make browser)")
    console: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900}, device_scale_factor=1)
            context.add_cookies(
                [
                    {
                        "name": settings.SESSION_COOKIE_NAME,
                        "value": seeded_staff_session,
                        "url": live_server.url,
                    }
                ]
            )
            page = context.new_page()
            page.on("console", lambda message: console.append(f"{message.type}: {message.text}"))
            response = page.goto(f"{live_server.url}/dashboard/?days=3")
            assert response is not None and response.status == 200

            # Each chart is drawn for a desktop card and a phone's; at this width only the desktop ones show.
            charts = page.locator(".chart-at-wide svg.chart[role=img]")
            assert charts.count() == 7  # with "Time to a human" (ops/reach_metrics.py)
            assert page.locator("svg.chart-empty").count() == 0  # every chart has data to draw
            assert page.locator(".chart-at-narrow").first.is_hidden()
            # The stylesheet applied (it is the only source of layout under the CSP).
            assert page.locator(".chart-grid").evaluate("e => getComputedStyle(e).display") == "grid"
            depth_lines = page.locator(".chart-at-wide svg.chart-line polyline")
            assert depth_lines.count() == 4  # one per scenario queue
            answered = page.locator(".tile").nth(2).locator(".tile-value").inner_text()
            assert int(answered) > 100

            SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(SCREENSHOT), full_page=True)
        finally:
            browser.close()
    assert not [line for line in console if "Content Security Policy" in line or "Refused to" in line], (
        console
    )
    assert SCREENSHOT.stat().st_size > 50_000  # the docs' picture is a copy of this one, made by hand
