# ruff: noqa: F811  (the `team` fixture is shared with test_reviewer_pages by import)
"""The reviewer workspace in Chromium, more: the split view beside the request on wide screens, history days in
the reviewer's own time zone, take over confirmed in a modal dialog, the top bar's search box (readable on the
dark bar), and screenshots of the pages the other tests do not photograph."""

import re
from datetime import UTC, datetime

import pytest
from playwright.sync_api import expect

from elicitation.models import ElicitationRequest, Status
from tests.answers import answer_of
from tests.browser.conftest import session_cookie
from tests.browser.test_reviewer_pages import NOTE_SCHEMA, form_request, team, wait_live  # noqa: F401

pytestmark = pytest.mark.browser

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
SCHEMES = ["light", "dark"]


def _channel(value: float) -> float:
    value /= 255
    return value / 12.92 if value <= 0.03928 else ((value + 0.055) / 1.055) ** 2.4


def contrast(foreground: str, background: str) -> float:
    """WCAG contrast ratio of two computed `rgb(...)` colours (opaque)."""

    def luminance(colour: str) -> float:
        red, green, blue = (float(part) for part in re.findall(r"[\d.]+", colour)[:3])
        return 0.2126 * _channel(red) + 0.7152 * _channel(green) + 0.0722 * _channel(blue)

    light, dark = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_the_split_view_shows_the_queue_beside_the_request_at_1280_and_follows_the_keyboard_loop(
    open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    created = [form_request(agent, NOTE_SCHEMA, f"Approve payment {n} to ACME?") for n in range(3)]
    page = open_page(team["alice"], "/queues/payments/")
    page.set_viewport_size(DESKTOP)
    wait_live(page)
    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(f"/requests/{created[0]['id']}/$"))
    rail = page.locator("#queue-rail")
    expect(rail).to_be_visible()
    rail_box, request_box = rail.bounding_box(), page.locator("#request-page").bounding_box()
    assert (
        rail_box["x"] + rail_box["width"] <= request_box["x"]
    )  # the list on the left, the request beside it
    assert abs(rail_box["y"] - request_box["y"]) < 40
    # The claimed request is no longer pending; the rest wait in review order.
    expect(rail.locator(".rail-item")).to_have_count(2)
    expect(rail.locator(".rail-item").first).to_contain_text("Approve payment 1")
    for scheme in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        page.wait_for_timeout(200)  # buttons ease their colours (0.12 s)
        screenshot(page, f"workspace-split-view-desktop-{scheme}")
    wait_live(page)
    page.keyboard.press("y")
    page.keyboard.press("a")
    # The answer's response is the next request (no redirect), under its own URL; the list moved on with it.
    expect(page).to_have_url(re.compile(f"/requests/{created[1]['id']}/$"))
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    expect(rail.locator(".rail-item")).to_have_count(1)
    expect(rail.locator(".rail-item")).to_contain_text("Approve payment 2")
    # Reloading is a GET of the page's own URL (not the answer POST again) and shows the same request.
    page.reload()
    expect(page.locator("#request-page")).to_have_attribute("data-request-id", created[1]["id"])
    assert answer_of(agent.get(created[0]["id"])["result"]) == {
        "action": "accept",
        "content": {"approve": True},
    }
    # (Reloading left the page: its untouched claim went back to the queue, as leaving does.)
    # A click in the list previews that request: nothing is claimed by looking.
    rail.get_by_role("link", name=re.compile("Approve payment 2")).click()
    expect(page).to_have_url(re.compile(f"/requests/{created[2]['id']}/$"))
    expect(rail.locator('[aria-current="page"]')).to_contain_text("Approve payment 2")
    assert ElicitationRequest.objects.get(pk=created[2]["id"]).status == Status.PENDING
    # Narrower than 1280 px: one column, no list.
    page.set_viewport_size({"width": 1100, "height": 900})
    expect(rail).to_be_hidden()


def test_history_dates_are_days_in_the_browsers_time_zone(
    browser, asgi_live_server_url, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    late = form_request(agent, NOTE_SCHEMA, "Late night transfer to Initech?")
    # 04:30 UTC on 16 January is 23:30 on the 15th in New York.
    ElicitationRequest.objects.filter(pk=late["id"]).update(
        created_at=datetime(2026, 1, 16, 4, 30, tzinfo=UTC)
    )
    context = browser.new_context(
        base_url=asgi_live_server_url, viewport=DESKTOP, timezone_id="America/New_York"
    )
    try:
        context.add_cookies([session_cookie(team["alice"], asgi_live_server_url)])
        page = context.new_page()
        page.goto("/history/")
        expect(page.locator("#history-tz")).to_have_value("America/New_York")
        page.get_by_label("From", exact=True).fill("2026-01-15")
        page.get_by_label("To", exact=True).fill("2026-01-15")
        page.get_by_role("button", name="Search", exact=True).click()
        expect(page.locator("#history-zone")).to_have_text("America/New_York")
        expect(page.locator(f'tr[data-id="{late["id"]}"]')).to_be_visible()
        # Shown at 23:30 local, on the day it was found under.
        expect(page.locator(f'tr[data-id="{late["id"]}"] time')).to_contain_text("11:30")
        page.get_by_label("From", exact=True).fill("2026-01-16")
        page.get_by_label("To", exact=True).fill("2026-01-16")
        page.get_by_role("button", name="Search", exact=True).click()
        expect(page.locator("#history-empty")).to_be_visible()
    finally:
        context.close()


def test_take_over_asks_in_a_modal_dialog_escape_cancels_and_only_yes_takes_over(
    open_page, team, agent_api, reviewer_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA, "Approve the transfer of 900.00 EUR to Globex?")
    assert (
        reviewer_api(team["alice"])("POST", f"/api/v1/review/requests/{created['id']}/claim").status_code
        == 200
    )
    page = open_page(team["carol"], f"/requests/{created['id']}/")
    wait_live(page)
    dialog = page.locator("#takeover-dialog")
    trigger = page.get_by_role("link", name="Take over…")
    expect(dialog).to_be_hidden()
    trigger.click()
    expect(dialog).to_be_visible()
    assert page.evaluate("document.getElementById('takeover-dialog').matches(':modal')")
    expect(page.locator("#takeover-holder")).to_have_text("alice")
    # Focus starts on the safe choice, and letters do nothing behind the dialog.
    expect(page.locator("#takeover-cancel")).to_be_focused()
    for scheme in SCHEMES:
        page.emulate_media(color_scheme=scheme)
        page.wait_for_timeout(200)
        screenshot(page, f"workspace-takeover-dialog-desktop-{scheme}")
    page.keyboard.press("n")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(trigger).to_be_focused()
    assert ElicitationRequest.objects.get(pk=created["id"]).claimed_by == team["alice"]
    expect(page).to_have_url(re.compile(f"/requests/{created['id']}/$"))
    # Cancel closes it too; then "Yes, take over" does it.
    trigger.click()
    page.locator("#takeover-cancel").click()
    expect(dialog).to_be_hidden()
    assert ElicitationRequest.objects.get(pk=created["id"]).claimed_by == team["alice"]
    trigger.click()
    page.get_by_role("button", name="Yes, take over").click()
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    assert ElicitationRequest.objects.get(pk=created["id"]).claimed_by == team["carol"]
    assert page.watch.dialogs == []  # no window.confirm: the page's own dialog


@pytest.mark.parametrize("scheme", SCHEMES)
def test_the_top_bar_search_is_readable_and_finds_a_request(scheme, open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA, "Approve the Umbrella Corp renewal?")
    page = open_page(team["alice"], None)
    page.emulate_media(color_scheme=scheme)
    page.goto("/")
    box = page.get_by_role("searchbox", name="Find requests")
    expect(box).to_have_attribute("placeholder", "Search requests…")
    placeholder = box.evaluate("element => getComputedStyle(element, '::placeholder').color")
    text = box.evaluate("element => getComputedStyle(element).color")
    background = box.evaluate("element => getComputedStyle(element).backgroundColor")
    assert contrast(placeholder, background) >= 4.5, (placeholder, background)
    assert contrast(text, background) >= 4.5, (text, background)
    box.fill("umbrella")
    box.press("Enter")
    expect(page).to_have_url(re.compile(r"/history/\?q=umbrella$"))
    expect(page.locator(f'tr[data-id="{created["id"]}"]')).to_be_visible()


@pytest.mark.parametrize("scheme", SCHEMES)
def test_pages_the_other_tests_do_not_photograph_fit_phones_and_are_photographed(
    scheme, open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    for number in range(3):
        form_request(agent, NOTE_SCHEMA, f"Approve the transfer of {300 + number}.00 EUR to Initech?")
    pages = {
        "history-filtered": "/history/?q=transfer&status=pending&since=2020-01-01",
        "remembered": "/queues/payments/remembered",
        "metrics": "/dashboard/",
        "login": "/accounts/login/",
    }
    for size_name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        for name, path in pages.items():
            view = open_page(None if name == "login" else team["carol"], None)
            view.emulate_media(color_scheme=scheme)
            view.set_viewport_size(size)
            response = view.goto(path)
            assert response is not None and response.status == 200, (path, response and response.status)
            overflow = view.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            assert overflow <= 0, f"{path} scrolls sideways by {overflow}px at {size_name}"
            screenshot(view, f"workspace-{name}-{size_name}-{scheme}")
            view.close()
