# ruff: noqa: F811  (the `team` fixture is shared with test_reviewer_pages by import)
"""The reviewer workspace in Chromium: what was sent on closed pages, one count everywhere, explicit yes/no,
preview then claim, leaving releases, history search, the keyboard loop, phones, dark mode, screenshots."""

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from elicitation.models import ElicitationRequest, Status
from tests.answers import answer_of
from tests.browser.test_reviewer_pages import NOTE_SCHEMA, form_request, team, wait_live  # noqa: F401

pytestmark = pytest.mark.browser

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1440, "height": 900}


def status_of(request_id: str) -> str:
    return ElicitationRequest.objects.get(pk=request_id).status


def no_sideways_scroll(page: Any) -> None:
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, f"{page.url} scrolls sideways by {overflow}px"


def test_a_closed_page_shows_the_accepted_content_not_a_draft_typed_earlier(
    open_page, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA, "Approve the refund of 12 EUR?")
    bob = open_page(team["bob"], f"/requests/{created['id']}/")
    wait_live(bob)
    bob.get_by_role("button", name="Claim", exact=True).click()
    bob.get_by_label("Note").fill("an invalid first attempt")
    expect(bob.locator("[data-note-for='note']")).to_have_count(1)
    bob.wait_for_timeout(600)  # the draft is saved
    bob.get_by_role("button", name="Release").click()
    alice = open_page(team["alice"], f"/requests/{created['id']}/")
    alice.get_by_label("Note").fill("refund approved")
    alice.get_by_role("button", name="Approve").click()
    expect(alice.locator(".flash")).to_contain_text("Accepted")
    assert agent.get(created["id"])["result"]["content"] == {"approve": True, "note": "refund approved"}

    closed = open_page(team["bob"], f"/requests/{created['id']}/")
    expect(closed.locator("#result-action")).to_have_text("Accepted")
    expect(closed.locator("#result-by")).to_have_text("alice")
    expect(closed.locator("#result-table")).to_contain_text("Approve the transfer?")
    expect(closed.locator("#result-table")).to_contain_text("Yes")
    expect(closed.locator("#result-table")).to_contain_text("refund approved")
    expect(closed.locator("main")).not_to_contain_text("an invalid first attempt")
    expect(closed.locator("#answer-form")).to_have_count(0)
    expect(closed.locator("[data-notice='answered']")).to_be_visible()
    expect(closed.locator(".alert-error")).to_have_count(0)
    expect(closed.locator("#trail")).to_contain_text("Answered: accept")
    expect(closed.locator("[data-deadline]")).to_have_count(0)  # no countdown once closed
    title = closed.locator("#result time").get_attribute("title") or ""
    assert title.endswith("UTC")  # local time shown, UTC on hover


def test_counts_are_equal_on_dashboard_and_queue_page_for_a_member_and_supervisor(
    open_page, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    for number in range(7):
        form_request(agent, NOTE_SCHEMA, f"Request {number}")
    carol = team["carol"]  # member and supervisor of payments
    page = open_page(carol, "/")
    expect(page.locator("tr[data-queue='payments'] [data-count='pending']")).to_have_text("7")
    page.goto("/queues/payments/")
    expect(page.locator("#queue-counts [data-count='pending']")).to_have_text("7")
    expect(page.locator("tr.request-row")).to_have_count(7)


def test_a_required_yes_no_cannot_be_accepted_untouched(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA)
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    page.keyboard.press("c")
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    # An approval is Approve / Reject: there is no Accept to press without a decision.
    expect(page.get_by_role("button", name="Accept")).to_have_count(0)
    page.keyboard.press("a")
    assert status_of(created["id"]) == Status.CLAIMED
    # A crafted accept without the decision is refused by the server, with a linked summary.
    page.get_by_label("Note").fill("typed")  # typed: leaving for the refused POST's page keeps the claim
    page.evaluate(
        """() => {
          const form = document.getElementById('answer-form');
          const action = document.createElement('input');
          action.type = 'hidden'; action.name = 'action'; action.value = 'accept';
          form.appendChild(action);
          form.submit();
        }"""
    )
    expect(page.locator("#error-summary a")).to_have_text("Approve the transfer?: This question is required.")
    expect(page.locator("[data-error-for='approve']")).to_have_text("This question is required.")
    assert status_of(created["id"]) == Status.CLAIMED


def test_opening_and_leaving_a_request_leaves_it_pending(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA)
    page = open_page(team["alice"], "/queues/payments/")
    page.locator(f"tr[data-id='{created['id']}'] .request-link").click()
    expect(page.locator("[data-notice='info']")).to_contain_text("Preview")
    wait_live(page)  # the page's script is listening for keys
    assert status_of(created["id"]) == Status.PENDING  # a look claims nothing
    page.keyboard.press("c")  # one key claims
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    assert status_of(created["id"]) == Status.CLAIMED
    page.goto("/")  # leaving, untouched
    page.wait_for_timeout(500)
    assert status_of(created["id"]) == Status.PENDING

    # Typing on a preview claims it, and leaving then keeps the claim.
    page.goto(f"/requests/{created['id']}/")
    page.get_by_label("Note").fill("checking")
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    page.wait_for_timeout(600)
    page.goto("/")
    page.wait_for_timeout(500)
    assert ElicitationRequest.objects.get(pk=created["id"]).claimed_by == team["alice"]


def test_an_answered_request_is_found_again_by_a_word_of_its_message(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    wanted = form_request(
        agent, NOTE_SCHEMA, "Pay invoice 2024-117 to ACME GmbH?", context={"tool": "bank_transfer"}
    )
    form_request(agent, NOTE_SCHEMA, "Rotate the staging key?")
    page = open_page(team["alice"], f"/requests/{wanted['id']}/")
    page.keyboard.press("y")
    page.keyboard.press("a")
    expect(page.locator(".flash")).to_contain_text("Accepted")
    page.goto("/history/")
    page.get_by_role("searchbox", name="Search").fill("invoice")
    page.get_by_label("Answered by me").check()
    page.get_by_role("button", name="Search").click()
    rows = page.locator("#history-table tr.request-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Pay invoice 2024-117")
    expect(rows.first.locator("[data-outcome]")).to_have_text(
        "Approved"
    )  # the decision, not the protocol action
    rows.first.locator("a").click()
    expect(page.locator("#result-action")).to_have_text("Accepted")


def test_the_keyboard_loop_answers_yes_no_requests_in_two_keys_each(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = [form_request(agent, NOTE_SCHEMA, f"Approve payment {n}?") for n in range(3)]
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    page.keyboard.press("n")
    for expected in created:
        expect(page).to_have_url(re.compile(f"/requests/{expected['id']}/$"))
        expect(page.locator("#holder-text")).to_contain_text("You hold this request")
        wait_live(page)
        page.keyboard.press("y")
        page.keyboard.press("a")
    expect(page).to_have_url(re.compile("/queues/payments/$"))
    expect(page.locator(".flash")).to_contain_text("Nothing else is waiting")
    for expected in created:
        assert answer_of(agent.get(expected["id"])["result"]) == {
            "action": "accept",
            "content": {"approve": True},
        }


def test_single_key_shortcuts_can_be_turned_off(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA)
    page = open_page(team["alice"], "/queues/payments/")
    page.locator("#prefs summary").click()
    page.get_by_label("Single-key shortcuts").uncheck()
    page.locator("h1").click()
    page.keyboard.press("n")
    page.wait_for_timeout(400)
    expect(page).to_have_url(re.compile("/queues/payments/$"))
    assert status_of(created["id"]) == Status.PENDING
    expect(page.locator(".shortcut-hint")).to_be_hidden()


def test_at_least_15_queue_rows_fit_on_a_1440x900_screen(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    for number in range(20):
        form_request(
            agent, NOTE_SCHEMA, f"Approve the transfer of {number} EUR to ACME GmbH for invoice {number}?"
        )
    page = open_page(team["alice"], "/queues/payments/")
    page.set_viewport_size(DESKTOP)
    visible = page.evaluate(
        "[...document.querySelectorAll('tr.request-row')].filter(r => r.getBoundingClientRect().bottom <= innerHeight).length"
    )
    assert visible >= 15, visible


LONG_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        f"field_{n}": {"type": "string", "title": f"Field {n}", "maxLength": 50} for n in range(12)
    },
}


def test_the_action_bar_stays_in_view_on_a_long_form_on_a_phone(open_page, team, agent_api) -> None:
    # On a laptop the bar stays in the flow (a bar stuck over the form hid the choice beneath it from axe's
    # target-size check, tests/browser/test_every_page_a11y.py); Ctrl+Enter sends from any field there.
    agent = agent_api(team["key"])
    created = form_request(agent, LONG_SCHEMA)
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    page.set_viewport_size(PHONE)
    accept = page.get_by_role("button", name="Accept")
    box = accept.bounding_box()
    assert box is not None and box["y"] + box["height"] <= PHONE["height"]


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_page_at_desktop_and_phone_sizes_has_no_sideways_scroll_and_is_photographed(
    scheme, open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    context = {
        "server": "payments-mcp",
        "tool": "bank_transfer",
        "arguments": {"amount": "100.00", "iban": "DE89 3704 0044 0532 0130 00"},
    }
    for number in range(16):
        form_request(
            agent,
            NOTE_SCHEMA,
            f"Approve the transfer of {100 + number}.00 EUR to ACME GmbH for invoice 2024-{117 + number}?",
            context=context,
            priority=number % 3,
        )
    open_one = form_request(
        agent,
        NOTE_SCHEMA,
        "Approve the transfer of 2,400.00 EUR to Globex Ltd for the annual licence renewal?",
        context=context,
        priority=5,
    )
    done = form_request(
        agent,
        NOTE_SCHEMA,
        "Approve the transfer of 80.00 EUR to Initech for invoice 2024-090?",
        context=context,
    )
    page = open_page(team["alice"], f"/requests/{done['id']}/")
    page.get_by_label("Note").fill("Matches the purchase order.")
    page.locator("#prefs summary").click()
    page.get_by_label("Open the next request after answering").uncheck()
    page.get_by_role("button", name="Approve").click()
    expect(page.locator(".flash")).to_contain_text("Accepted")
    page.close()
    carol = team["carol"]
    pages = {
        "dashboard": "/",
        "queue": "/queues/payments/",
        "request": f"/requests/{open_one['id']}/",
        "request-closed": f"/requests/{done['id']}/",
        "history": "/history/?q=transfer",
    }
    for size_name, size in (("desktop", DESKTOP), ("phone", PHONE)):
        for name, path in pages.items():
            view = open_page(carol, None)
            view.emulate_media(color_scheme=scheme)
            view.set_viewport_size(size)
            view.goto(path)
            if name == "request":
                expect(view.locator("#agent-message")).to_be_visible()
            no_sideways_scroll(view)
            if size_name == "phone" and name == "request":
                # The question and who is asking come before the form.
                message_y = view.locator("#agent-message").bounding_box()["y"]
                who_y = view.locator("#who-heading").bounding_box()["y"]
                form_y = view.locator("#form-heading").bounding_box()["y"]
                assert message_y < who_y < form_y
            if scheme == "dark":
                background = view.evaluate("getComputedStyle(document.body).backgroundColor")
                assert background == "rgb(16, 20, 29)"
            screenshot(view, f"workspace-{name}-{size_name}-{scheme}")
            view.close()
    page = open_page(carol, "/")
    # notify.js may redraw the icon with a count; the page ships ReviewHub's own favicon either way.
    assert page.locator("link[rel=icon]").count() >= 1
    assert page.request.get("/static/reviewhub/favicon.svg").ok
