# ruff: noqa: F811  (the `team` fixture is shared with test_reviewer_pages by import)
"""The reviewer workspace, decision first: outcomes in the reviewer's words (Approved / Rejected), "next" resumes
a held claim, focus lands on the first field on arrival, readable fields in dark mode."""

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from elicitation.models import ElicitationRequest, Status
from tests.browser.test_reviewer_pages import NOTE_SCHEMA, form_request, team, wait_live  # noqa: F401

pytestmark = pytest.mark.browser

THREE_FIELDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "ticket": {"type": "string", "title": "Ticket"},
        "rows": {"type": "integer", "title": "Rows to keep"},
        "contact": {"type": "string", "format": "email", "title": "Contact"},
    },
    "required": ["ticket", "rows", "contact"],
}

FIELD_KINDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "note": {"type": "string", "title": "Note"},
        "count": {"type": "number", "title": "Count"},
        "mail": {"type": "string", "format": "email", "title": "Mail"},
        "day": {"type": "string", "format": "date", "title": "Day"},
    },
}

# WCAG relative luminance and contrast of two computed colours ("rgb(r, g, b)" or "rgba(...)").
CONTRAST_JS = """([selector, property]) => {
  const element = document.querySelector(selector);
  const style = getComputedStyle(element);
  const parse = (text) => text.match(/[\\d.]+/g).slice(0, 3).map(Number);
  const lum = ([r, g, b]) => {
    const c = [r, g, b].map((v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
  };
  const a = lum(parse(style.color)), b = lum(parse(style[property]));
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def test_history_and_the_closed_page_say_approved_and_rejected(
    open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    approved = form_request(agent, NOTE_SCHEMA, "Rotate the staging key?", priority=5)
    rejected = form_request(agent, NOTE_SCHEMA, "Drop the production orders table?")
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(f"/requests/{approved['id']}/$"))
    wait_live(page)
    page.keyboard.press("y")
    page.keyboard.press("a")
    expect(page).to_have_url(re.compile(f"/requests/{rejected['id']}/$"))
    wait_live(page)
    page.keyboard.press("n")  # No to the yes/no question
    page.keyboard.press("a")
    expect(page.locator(".flash")).to_contain_text("Nothing else is waiting")
    # The agent received `accept` with approve=false: the protocol action, not the decision.
    result = agent.get(rejected["id"])["result"]
    assert (result["action"], result["content"]["approve"]) == ("accept", False)

    page.goto("/history/")
    approved_row = page.locator(f"tr[data-id='{approved['id']}'] [data-outcome]")
    rejected_row = page.locator(f"tr[data-id='{rejected['id']}'] [data-outcome]")
    expect(approved_row).to_have_text("Approved")
    expect(approved_row).to_have_class(re.compile(r"\boutcome-approved\b"))
    expect(rejected_row).to_have_text("Rejected")
    expect(rejected_row).to_have_class(re.compile(r"\boutcome-rejected\b"))
    expect(page.locator("#history-table")).not_to_contain_text("completed: accept")
    colour = rejected_row.evaluate("e => getComputedStyle(e).color")
    red, green, _ = (int(part) for part in re.findall(r"\d+", colour)[:3])
    assert red > green, f"Rejected is shown in {colour}"
    screenshot(page, "decision-first-history")

    page.goto(f"/requests/{rejected['id']}/")
    expect(page.locator("#result-outcome")).to_have_text("Rejected")
    expect(page.locator("#result-outcome")).to_have_class(re.compile(r"\boutcome-rejected\b"))
    expect(page.locator("#result-action")).to_have_text("Accepted")  # still says what the agent received
    expect(page.locator("[data-notice='rejected']")).to_have_text("Answered by alice: Rejected.")


def test_next_request_resumes_the_request_the_reviewer_holds(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    held = form_request(agent, NOTE_SCHEMA, "Refund order 12?")
    urgent = form_request(agent, NOTE_SCHEMA, "Refund order 99?", priority=5)
    page = open_page(team["alice"], f"/requests/{held['id']}/")
    wait_live(page)
    page.get_by_role("button", name="Claim", exact=True).click()
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    page.get_by_label("Note").fill("half way")  # typed: leaving keeps the claim
    page.wait_for_timeout(600)
    page.goto("/queues/payments/")
    page.locator("#next-button").click()
    expect(page).to_have_url(re.compile(f"/requests/{held['id']}/$"))
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    assert ElicitationRequest.objects.get(pk=urgent["id"]).status == Status.PENDING


def test_after_auto_next_focus_is_on_the_first_field_and_a_form_costs_few_keys(
    open_page, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    first = form_request(agent, THREE_FIELDS, "Archive old orders?", priority=1)
    second = form_request(agent, THREE_FIELDS, "Archive old invoices?")
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(f"/requests/{first['id']}/$"))
    expect(page.locator("#id_answer-ticket")).to_be_focused()
    pressed: list[str] = []

    def press(key: str) -> None:
        pressed.append(key)
        page.keyboard.press(key)

    page.keyboard.type("T-1")
    press("Tab")
    page.keyboard.type("40")
    press("Tab")
    page.keyboard.type("ops@example.com")
    press("Control+Enter")
    expect(page).to_have_url(re.compile(f"/requests/{second['id']}/$"))
    assert len(pressed) <= 3 + 2, pressed
    assert agent.get(first["id"])["result"]["content"] == {
        "ticket": "T-1",
        "rows": 40,
        "contact": "ops@example.com",
    }
    # The automatic "next request" lands on the first field too, not on <body>.
    expect(page.locator("#id_answer-ticket")).to_be_focused()
    assert page.evaluate("document.activeElement.id") == "id_answer-ticket"


def test_an_approval_opens_on_its_approve_button_and_its_keys_are_announced(
    open_page, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA, "Approve the refund?")
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    approve = page.locator("#approve-button")
    expect(approve).to_be_focused()
    expect(approve).to_have_attribute("aria-keyshortcuts", "y")
    expect(page.locator("#reject-button")).to_have_attribute("aria-keyshortcuts", "n")
    expect(page.locator("[data-answer='decline']")).to_have_attribute("aria-keyshortcuts", "d")


def test_the_queue_rail_is_one_tab_stop_with_arrow_keys_inside(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = [form_request(agent, NOTE_SCHEMA, f"Refund order {n}?") for n in range(4)]
    page = open_page(team["alice"], "")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(f"/requests/{created[0]['id']}/")
    wait_live(page)
    links = page.locator("#queue-rail .rail-list a")
    expect(links).to_have_count(4)
    expect(page.locator("#queue-rail .rail-list a[tabindex='0']")).to_have_count(1)
    links.first.focus()
    page.keyboard.press("ArrowDown")
    expect(links.nth(1)).to_be_focused()
    expect(links.nth(1)).to_have_attribute("tabindex", "0")
    page.keyboard.press("Tab")  # out of the rail at once: the crumbs, then the form
    assert page.evaluate("document.getElementById('queue-rail').contains(document.activeElement)") is False


@pytest.mark.parametrize("scheme", ["dark", "light"])
def test_typed_text_in_every_field_kind_is_readable(open_page, team, agent_api, scheme: str) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, FIELD_KINDS, "Fill in the details.")
    agent.create(queue="payments", mode="url", message="Connect", url="https://auth.example.com/connect")
    page = open_page(team["alice"], "")
    page.emulate_media(color_scheme=scheme)
    page.goto(f"/requests/{created['id']}/")
    for field in ("note", "count", "mail", "day"):
        ratio = page.evaluate(CONTRAST_JS, [f"#id_answer-{field}", "backgroundColor"])
        assert ratio >= 4.5, f"{field} in {scheme} mode: {ratio:.2f}:1"
    page.goto("/queues/payments/")
    ratio = page.evaluate(CONTRAST_JS, [".request-row .badge-muted", "backgroundColor"])
    assert ratio >= 4.5, f"the URL badge in {scheme} mode: {ratio:.2f}:1"
