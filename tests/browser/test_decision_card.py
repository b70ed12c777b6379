# ruff: noqa: F811  (the `team` fixture is shared with test_reviewer_pages by import)
"""The request page, decision first: the agent's question is the heading, one card says who asks for what, and a
yes/no approval is Approve / Reject on a phone's first screen; the keyboard reaches every answer in few keys."""

import re
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from elicitation.models import ElicitationRequest, Status
from elicitation.queue import rules
from tests.browser.conftest import SCREENSHOTS, WAIT_MS, session_cookie
from tests.browser.test_reviewer_pages import NOTE_SCHEMA, form_request, team, wait_live  # noqa: F401

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
LONG_SQL = (
    "DELETE FROM orders WHERE created_at < now() - interval '90 days'\n  AND status IN ('void', 'test')"
)
MCP_CONTEXT: dict[str, Any] = {
    "mcp": {
        "server": "db-admin",
        "tool": "run_sql",
        "arguments": {"database": "production", "risk": "high", "sql": LONG_SQL},
    }
}
THREE_FIELDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ticket": {"type": "string", "title": "Ticket"},
        "rows": {"type": "integer", "title": "Rows to keep"},
        "contact": {"type": "string", "format": "email", "title": "Contact"},
    },
    "required": ["ticket", "rows", "contact"],
}
PLAN: dict[str, Any] = {
    "type": "object",
    "properties": {
        "plan": {
            "type": "string",
            "title": "Plan",
            "oneOf": [
                {"const": "basic", "title": "Basic"},
                {"const": "pro", "title": "Pro"},
                {"const": "team", "title": "Team"},
            ],
        },
    },
    "required": ["plan"],
}


class KeyCounter:
    """The keyboard, counting every press that is not a character typed into a field."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.presses: list[str] = []

    def press(self, key: str) -> None:
        self.presses.append(key)
        self.page.keyboard.press(key)

    def type(self, text: str) -> None:
        self.page.keyboard.type(text)


@pytest.fixture
def phone(browser: Any, asgi_live_server_url: str) -> Iterator[Any]:
    """`phone(user, path)`: a page on a touch phone at 390x844 (no hover, coarse pointer), signed in as user."""
    contexts: list[Any] = []

    def open_phone(user: Any, path: str) -> Any:
        context = browser.new_context(
            base_url=asgi_live_server_url,
            viewport=PHONE,
            has_touch=True,
            is_mobile=True,
            device_scale_factor=2,
        )
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        context.add_cookies([session_cookie(user, asgi_live_server_url)])
        page = context.new_page()
        page.goto(path)
        return page

    yield open_phone
    for context in contexts:
        context.close()


def first_screen(page: Any, name: str) -> None:
    """What the phone shows before any scroll (a full-page capture resizes the emulated screen)."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"))


def inside_viewport(box: dict[str, float], size: dict[str, int]) -> bool:
    return (
        box["x"] >= 0
        and box["y"] >= 0
        and box["x"] + box["width"] <= size["width"]
        and box["y"] + box["height"] <= size["height"]
    )


def test_a_yes_no_request_shows_question_facts_and_approve_reject_on_a_phones_first_screen(
    phone, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    message = "Delete 90-day-old void orders from the production database?"
    created = form_request(agent, NOTE_SCHEMA, message, priority=5, context=MCP_CONTEXT)
    page = phone(team["alice"], f"/requests/{created['id']}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(message)
    approve, reject = page.locator("#approve-button"), page.locator("#reject-button")
    for element in (approve, reject, page.locator("#who-facts")):
        expect(element).to_be_visible()
        box = element.bounding_box()
        assert inside_viewport(box, PHONE), box
    for button in (approve, reject):
        box = button.bounding_box()
        assert box["height"] >= 44 and box["width"] >= 44, box
    # Touch: no keyboard hints; the top bar is one row; nothing scrolls sideways.
    expect(page.locator(".shortcut-hint").first).to_be_hidden()
    assert page.locator(".topbar").bounding_box()["height"] <= 0.1 * PHONE["height"]  # was 18 %
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    first_screen(page, "decision-card-phone-yes-no")
    approve.tap()  # one tap decides
    expect(page).not_to_have_url(re.compile(f"/requests/{created['id']}/$"))
    result = agent.get(created["id"])
    assert result["status"] == "completed" and result["result"]["content"]["approve"] is True


def test_the_phone_hides_keyboard_hints(phone, team, agent_api) -> None:
    created = form_request(agent_api(team["key"]), NOTE_SCHEMA, "Rotate the key?")
    page = phone(team["alice"], f"/requests/{created['id']}/")
    assert page.evaluate("matchMedia('(hover: none)').matches")
    hints = page.locator(".shortcut-hint, .shortcut-key, #approve-button kbd")
    assert hints.count() >= 2
    for number in range(hints.count()):
        expect(hints.nth(number)).to_be_hidden()


def test_the_heading_is_the_question_and_the_card_says_who_asks_for_what(
    open_page, team, agent_api, screenshot
) -> None:
    message = "Run this <script>alert(1)</script> cleanup on production?"
    created = form_request(agent_api(team["key"]), NOTE_SCHEMA, message, priority=3, context=MCP_CONTEXT)
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(message)  # escaped, shown as text
    expect(page.locator("#who-facts")).to_contain_text("db-admin")
    expect(page.locator("#who-facts")).to_contain_text("run_sql")
    sql = page.locator("#decision-args tr", has_text="sql")
    expect(sql.locator("details")).not_to_have_attribute("open", "")  # a long value is folded
    expect(sql.locator("pre")).to_be_hidden()
    sql.locator("summary").click()
    expect(sql.locator("pre")).to_have_text(LONG_SQL)
    digest = rules.request_digest_of(ElicitationRequest.objects.get(pk=created["id"]))
    short = page.locator("#digest-short")
    expect(short).to_have_text(digest[: len("sha256:") + 12])
    expect(short).to_have_attribute("title", digest)
    expect(page.locator("#risk-cues")).to_contain_text("Risk: high")
    expect(page.locator("#fact-priority")).to_have_text("3")
    expect(page.locator(".countdown").first).to_contain_text("in ")
    screenshot(page, "decision-card-desktop")


def test_arrival_focuses_the_first_field_and_a_three_field_form_costs_three_keys(
    open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    first = form_request(agent, THREE_FIELDS, "Keep which rows?", priority=5)
    second = form_request(agent, THREE_FIELDS, "And these rows?")
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    page.keyboard.press("n")  # claims and opens the first request (getting there is not the form's cost)
    expect(page).to_have_url(re.compile(f"/requests/{first['id']}/$"))
    wait_live(page)
    expect(page.locator("#id_answer-ticket")).to_be_focused()
    keys = KeyCounter(page)
    keys.type("T-1")
    keys.press("Tab")
    keys.type("40")
    keys.press("Tab")
    keys.type("ops@example.com")
    keys.press("Control+Enter")
    expect(page).to_have_url(re.compile(f"/requests/{second['id']}/$"))
    assert len(keys.presses) == 3 <= len(THREE_FIELDS["properties"]) + 2, keys.presses
    # The next request opened claimed, with the keyboard on its first field.
    expect(page.locator("#id_answer-ticket")).to_be_focused()
    answered = agent.get(first["id"])
    assert answered["status"] == "completed"
    assert answered["result"]["content"] == {"ticket": "T-1", "rows": 40, "contact": "ops@example.com"}
    assert ElicitationRequest.objects.get(pk=second["id"]).status == Status.CLAIMED


def test_a_yes_no_costs_one_key(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA, "Rotate the staging key?")
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    expect(page.locator("#approve-button")).to_be_focused()
    expect(page.locator("#approve-button")).to_have_attribute("aria-keyshortcuts", "y")
    expect(page.locator("#reject-button")).to_have_attribute("aria-keyshortcuts", "n")
    keys = KeyCounter(page)
    keys.press("n")  # Reject
    expect(page).not_to_have_url(re.compile(f"/requests/{created['id']}/$"))
    assert len(keys.presses) == 1
    result = agent.get(created["id"])
    assert result["status"] == "completed" and result["result"]["content"] == {"approve": False}


def test_number_keys_pick_options(open_page, team, agent_api) -> None:
    created = form_request(agent_api(team["key"]), PLAN, "Which plan?")
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    page.locator("body").click(position={"x": 5, "y": 300})  # focus out of any field
    page.keyboard.press("2")
    expect(page.locator("#q-plan input[value=pro]")).to_be_checked()
    page.keyboard.press("3")
    expect(page.locator("#q-plan input[value=team]")).to_be_checked()
    page.keyboard.press("9")  # no ninth option: nothing changes
    expect(page.locator("#q-plan input[value=team]")).to_be_checked()


def test_j_and_k_move_through_the_queue_and_question_mark_lists_every_shortcut(
    open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    rows = [form_request(agent, NOTE_SCHEMA, f"Approve payment {n}?", priority=9 - n) for n in range(3)]
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    link = page.locator("#request-rows .request-link")
    page.keyboard.press("j")
    expect(link.nth(0)).to_be_focused()
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(link.nth(2)).to_be_focused()
    page.keyboard.press("j")  # the end of the list stays put
    expect(link.nth(2)).to_be_focused()
    page.keyboard.press("k")
    expect(link.nth(1)).to_be_focused()
    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    for key in ("j", "k", "n", "y", "1", "u", "?"):
        expect(dialog.locator("kbd", has_text=re.compile(f"^{re.escape(key)}$")).first).to_be_visible()
    expect(page.locator("#shortcuts-close")).to_be_focused()
    page.keyboard.press("j")  # the open dialog owns the keyboard
    screenshot(page, "shortcuts-dialog")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    expect(link.nth(1)).to_be_focused()  # focus returns where it was
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(f"/requests/{rows[1]['id']}/$"))
    page.keyboard.press("?")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
