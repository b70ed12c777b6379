"""The reviewer web app in headless Chromium against a live ASGI server: forms, claims, live pushes, safety."""

import re
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import expect

from elicitation.models import ElicitationRequest, Queue, Status
from elicitation.queue import accounts
from tests.answers import answer_of
from tests.browser.conftest import WAIT_MS

pytestmark = pytest.mark.browser

PUSHED = WAIT_MS  # ms: functional checks of pushed changes

ALL_KINDS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "full_name": {
            "type": "string",
            "title": "Full name",
            "description": "As written on the contract.",
            "minLength": 2,
            "maxLength": 80,
        },
        "email": {"type": "string", "format": "email", "title": "Contact email"},
        "website": {"type": "string", "format": "uri", "title": "Company website"},
        "start_date": {"type": "string", "format": "date", "title": "Start date"},
        "meeting": {"type": "string", "format": "date-time", "title": "Kick-off meeting"},
        "budget": {"type": "number", "title": "Budget (EUR)", "minimum": 0, "maximum": 5000},
        "seats": {"type": "integer", "title": "Seats", "minimum": 1, "maximum": 10, "default": 2},
        "approve": {"type": "boolean", "title": "Approve the contract", "default": False},
        "plan": {
            "type": "string",
            "title": "Plan",
            "oneOf": [{"const": "basic", "title": "Basic plan"}, {"const": "pro", "title": "Pro plan"}],
        },
        "size": {
            "type": "string",
            "title": "Team size",
            "enum": ["s", "m", "l"],
            "enumNames": ["Small team", "Medium team", "Large team"],
        },
        "region": {
            "type": "string",
            "title": "Region",
            "enum": ["eu-west", "eu-north", "us-east", "us-west", "ap-south", "ap-east", "sa-east"],
        },
        "channels": {
            "type": "array",
            "title": "Notify via",
            "items": {
                "anyOf": [
                    {"const": "mail", "title": "Mail"},
                    {"const": "sms", "title": "SMS"},
                    {"const": "chat", "title": "Chat"},
                ]
            },
            "minItems": 1,
            "maxItems": 2,
        },
        "tags": {"type": "array", "title": "Tags", "items": {"type": "string", "enum": ["urgent", "legal"]}},
    },
    "required": ["full_name", "email", "budget", "approve", "plan", "channels"],
}

NOTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the transfer?"},
        "note": {"type": "string", "title": "Note", "maxLength": 200},
    },
    "required": ["approve"],
}


@pytest.fixture
def team(asgi_live_server_url: str) -> dict[str, Any]:
    """A queue with two reviewers and a supervisor, another queue nobody here belongs to, and an agent key."""
    queue = Queue.objects.create(
        slug="payments", name="Payments", lease_seconds=60, default_deadline_seconds=900
    )
    Queue.objects.create(slug="secret-ops", name="Secret ops")
    # No passwords (hashing them is slow); pages log in with a session cookie, the login test sets its own.
    alice, bob, carol = (User.objects.create_user(name) for name in ("alice", "bob", "carol"))
    queue.members.add(alice, bob, carol)
    queue.supervisors.add(carol)
    agent, key = accounts.create_agent("billing-bot", queue_slugs=["payments"])
    return {"queue": queue, "alice": alice, "bob": bob, "carol": carol, "agent": agent, "key": key}


def form_request(
    agent: Any, schema: dict[str, Any], message: str = "Please fill this in.", **extra: Any
) -> dict[str, Any]:
    return agent.create(queue="payments", message=message, requestedSchema=schema, **extra)


def wait_live(page: Any) -> None:
    """The page's socket is open: pushes from now on reach it."""
    expect(page.locator("body")).to_have_attribute("data-live", "on")


def claim_on_page(page: Any) -> None:
    """Opening a request only shows it; the reviewer claims with the page's Claim button."""
    page.get_by_role("button", name="Claim", exact=True).click()
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")


def test_login_form_signs_in_and_lists_only_member_queues(open_page, team, screenshot, agent_api) -> None:
    refunds = Queue.objects.create(slug="refunds", name="Refunds")
    refunds.members.add(team["alice"])
    team["agent"].queues.add(refunds)
    agent = agent_api(team["key"])
    late = agent.create(queue="refunds", message="Refund order 1234?", requestedSchema=NOTE_SCHEMA)
    # Past its deadline without waiting for the clock (no sweep runs in the test server, so it stays open).
    ElicitationRequest.objects.filter(pk=late["id"]).update(deadline=timezone.now() - timedelta(seconds=5))
    agent.create(queue="refunds", message="Refund order 1240?", requestedSchema=NOTE_SCHEMA)
    form_request(agent, NOTE_SCHEMA, "Approve transfer of 100 EUR to ACME?", priority=5)
    form_request(agent, NOTE_SCHEMA, "Approve transfer of 40 EUR to Globex?")
    team["alice"].set_password("alice-pass-123")
    team["alice"].save()
    page = open_page(path="/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator(".alert-error")).to_be_visible()
    page.get_by_label("Password").fill("alice-pass-123")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Your queues")).to_be_visible()
    row = page.locator("tr[data-queue='payments']")
    expect(row.locator("[data-count='pending']")).to_have_text("2")
    expect(page.locator("tr[data-queue='refunds'] .badge-danger")).to_have_text("1")  # one past its deadline
    expect(page.locator("tr[data-queue='secret-ops']")).to_have_count(0)
    screenshot(page, "dashboard")
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/"))


def test_every_field_kind_is_filled_accepted_and_read_back_exactly_by_the_agent(
    open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    created = form_request(
        agent,
        ALL_KINDS_SCHEMA,
        "Set up the new customer account for ACME Corp.",
        context={"server": "crm-mcp", "tool": "create_account", "arguments": {"customer": "ACME", "tier": 2}},
    )
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    claim_on_page(page)
    # Widgets carry the right HTML types and limits; defaults are prefilled; required is marked.
    expect(page.get_by_label("Contact email")).to_have_attribute("type", "email")
    expect(page.get_by_label("Company website")).to_have_attribute("type", "url")
    expect(page.get_by_label("Start date")).to_have_attribute("type", "date")
    expect(page.get_by_label("Kick-off meeting")).to_have_attribute("type", "datetime-local")
    expect(page.get_by_label("Seats")).to_have_value("2")
    expect(page.get_by_label("Seats")).to_have_attribute("max", "10")
    expect(page.get_by_label("Budget (EUR)")).to_have_attribute("step", "any")
    expect(page.locator("#q-full_name .req")).to_have_text("required")
    expect(page.locator("#q-full_name .help")).to_contain_text("As written on the contract.")
    expect(page.locator("select[name='answer-region']")).to_be_visible()  # many options: a select
    expect(page.get_by_text("crm-mcp")).to_be_visible()
    arguments = page.locator("table.args")
    expect(arguments.locator("tr", has_text="customer")).to_contain_text("ACME")
    expect(arguments.locator("tr", has_text="tier")).to_contain_text("2")

    page.get_by_label("Full name").fill("Ada  Lovelace ")
    page.get_by_label("Contact email").fill("ada@example.com")
    page.get_by_label("Company website").fill("https://acme.example/about")
    page.get_by_label("Start date").fill("2025-07-01")
    page.get_by_label("Kick-off meeting").fill("2025-07-01T09:30")
    page.get_by_label("Budget (EUR)").fill("1250.5")
    page.get_by_label("Seats").fill("3")
    page.get_by_label("Approve the contract").check()
    page.get_by_label("Pro plan").check()
    page.get_by_label("Large team").check()
    page.get_by_label("Region").select_option("eu-north")
    page.get_by_label("Mail", exact=True).check()
    page.get_by_label("Chat", exact=True).check()
    # Tags, optional, is skipped by leaving it empty.
    page.get_by_label("Seats").blur()
    screenshot(page, "request-form")
    page.get_by_role("button", name="Accept").click()

    expect(page.locator(".flash")).to_contain_text("Accepted")
    result = agent.get(created["id"])
    assert result["status"] == "completed"
    assert answer_of(result["result"]) == {
        "action": "accept",
        "content": {
            "full_name": "Ada  Lovelace ",
            "email": "ada@example.com",
            "website": "https://acme.example/about",
            "start_date": "2025-07-01",
            "meeting": "2025-07-01T09:30:00Z",
            "budget": 1250.5,
            "seats": 3,
            "approve": True,
            "plan": "pro",
            "size": "l",
            "region": "eu-north",
            "channels": ["mail", "chat"],
        },
    }
    assert page.watch.dialogs == []


def test_a_validation_error_shows_next_to_its_field_keeps_the_input_and_can_be_corrected(
    open_page, team, agent_api
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "title": "Confirmation code", "minLength": 6},
            "count": {"type": "integer", "title": "Item count", "maximum": 10},
            "channels": {
                "type": "array",
                "title": "Channels",
                "items": {"type": "string", "enum": ["a", "b", "c"]},
                "minItems": 2,
            },
        },
        "required": ["code", "count"],
    }
    agent = agent_api(team["key"])
    created = form_request(agent, schema)
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    claim_on_page(page)
    page.get_by_label("Confirmation code").fill("abc")
    page.get_by_label("Item count").fill("42")
    page.locator("#q-channels").get_by_label("a", exact=True).check()
    page.get_by_role("button", name="Accept").click()

    expect(page.locator("[data-error-for='code']")).to_have_text("Must be at least 6 characters.")
    expect(page.locator("[data-error-for='count']")).to_have_text("Must be at most 10.")
    expect(page.locator("[data-error-for='channels']")).to_have_text("Must have at least 2 choices.")
    expect(page.get_by_label("Confirmation code")).to_have_value("abc")
    expect(page.get_by_label("Confirmation code")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Item count")).to_have_value("42")
    expect(page.locator("#q-channels").get_by_label("a", exact=True)).to_be_checked()
    assert agent.get(created["id"])["status"] == "claimed"

    page.get_by_label("Confirmation code").fill("abc123")
    page.get_by_label("Item count").fill("7")
    page.locator("#q-channels").get_by_label("c", exact=True).check()
    page.get_by_role("button", name="Accept").click()
    expect(page.locator(".flash")).to_contain_text("Accepted")
    assert answer_of(agent.get(created["id"])["result"]) == {
        "action": "accept",
        "content": {"code": "abc123", "count": 7, "channels": ["a", "c"]},
    }


def test_decline_by_keyboard_and_cancel_by_button_reach_the_agent_without_content(
    open_page, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    first = form_request(agent, NOTE_SCHEMA, "First")
    second = form_request(agent, NOTE_SCHEMA, "Second")
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    page.keyboard.press("n")  # claims and opens the most urgent request
    expect(page).to_have_url(re.compile(f"/requests/{first['id']}/$"))
    wait_live(page)  # the new page's script listens for keys (Escape must leave the field)
    page.get_by_label("Note").fill("typed, then declined")
    page.get_by_label("Note").press("Escape")
    page.keyboard.press("d")
    expect(page.locator(".flash")).to_contain_text("Declined")
    assert answer_of(agent.get(first["id"])["result"]) == {"action": "decline"}

    # Answering opens the next request, already claimed (the loop's default).
    expect(page).to_have_url(re.compile(f"/requests/{second['id']}/$"))
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator(".flash")).to_contain_text("Cancelled")
    assert answer_of(agent.get(second["id"])["result"]) == {"action": "cancel"}


def test_a_second_reviewer_sees_the_claim_and_drafts_live_and_cannot_submit(
    open_page, team, agent_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    created = form_request(
        agent,
        NOTE_SCHEMA,
        "Approve the transfer of 100.00 EUR to ACME GmbH for invoice 2024-117?",
        priority=3,
        context={
            "server": "payments-mcp",
            "tool": "bank_transfer",
            "arguments": {"amount": "100.00", "currency": "EUR", "iban": "DE89 3704 0044 0532 0130 00"},
            "session": "sess-7f3a",
        },
    )
    alice = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(alice)
    claim_on_page(alice)
    bob = open_page(team["bob"], f"/requests/{created['id']}/")
    wait_live(bob)

    expect(bob.locator("[data-notice='held']")).to_contain_text("alice is answering this request")
    expect(bob.locator("#holder-text")).to_contain_text("Held by alice since")
    expect(bob.get_by_role("button", name="Approve")).to_be_disabled()
    expect(bob.get_by_label("Note")).to_be_disabled()

    alice.get_by_label("Note").fill("checked the invoice")
    expect(bob.get_by_label("Note")).to_have_value("checked the invoice", timeout=PUSHED)
    expect(bob.locator("[data-note-for='note']")).to_have_text("Edited by alice")
    bob.wait_for_timeout(1300)  # let the edit highlight fade before the pictures
    screenshot(bob, "request-read-only")
    screenshot(alice, "request")

    # Forcing the disabled form anyway changes nothing on the server.
    bob.evaluate("document.querySelectorAll('#answer-form [disabled]').forEach(e => e.disabled = false)")
    bob.get_by_role("button", name="Approve").click()
    expect(bob.locator("[data-notice='error']")).to_contain_text("alice holds this request now")
    assert agent.get(created["id"])["status"] == "claimed"

    alice.get_by_role("button", name="Approve").click()
    expect(alice.locator(".flash")).to_contain_text("Accepted")
    assert answer_of(agent.get(created["id"])["result"]) == {
        "action": "accept",
        "content": {"approve": True, "note": "checked the invoice"},
    }


def test_a_supervisor_takes_over_and_the_previous_holder_goes_read_only_live(
    open_page, team, agent_api
) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA)
    alice = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(alice)
    claim_on_page(alice)
    bob = open_page(team["bob"], f"/requests/{created['id']}/")
    expect(bob.get_by_text("Take over…")).to_have_count(0)  # members are not supervisors
    carol = open_page(team["carol"], f"/requests/{created['id']}/")
    carol.get_by_text("Take over…").click()  # asks first
    expect(carol.locator(".takeover-confirm")).to_contain_text("Take this request from alice?")
    carol.get_by_role("button", name="Yes, take over").click()
    expect(carol.locator("#holder-text")).to_contain_text("You hold this request")
    expect(alice.locator("[data-notice='warn']")).to_contain_text(
        "carol took over this request", timeout=PUSHED
    )
    expect(alice.get_by_label("Note")).to_be_disabled()
    assert ElicitationRequest.objects.get(pk=created["id"]).events.filter(kind="taken_over").count() == 1


def test_a_lapsed_claim_is_reported_on_the_page(open_page, team, agent_api) -> None:
    Queue.objects.filter(pk=team["queue"].pk).update(lease_seconds=6)  # heartbeat every 2s
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA)
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    claim_on_page(page)
    # What the lease sweep does when a tab slept through its heartbeats.
    ElicitationRequest.objects.filter(pk=created["id"]).update(
        status=Status.PENDING, claimed_by=None, claimed_at=None, lease_expires_at=None
    )
    expect(page.locator("[data-notice='warn']")).to_contain_text(
        "Your claim ran out and the request went back to the queue", timeout=WAIT_MS
    )
    expect(page.get_by_role("button", name="Approve")).to_be_disabled()
    page.get_by_role("button", name="Claim", exact=True).click()
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")
    expect(page.get_by_role("button", name="Approve")).to_be_enabled()


def test_withdrawal_by_the_agent_disables_every_open_page(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    created = form_request(agent, NOTE_SCHEMA)
    alice = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(alice)
    claim_on_page(alice)
    bob = open_page(team["bob"], f"/requests/{created['id']}/")
    wait_live(bob)
    alice.get_by_label("Note").fill("half-typed")
    agent.cancel(created["id"])
    for page in (alice, bob):
        expect(page.locator("[data-notice='withdrawn']")).to_contain_text(
            "The agent withdrew this request", timeout=PUSHED
        )
        expect(page.locator("#status-badge")).to_have_text("withdrawn")
        expect(page.get_by_label("Note")).to_be_disabled()
        expect(page.get_by_role("button", name="Approve")).to_be_disabled()


def test_the_queue_page_follows_arrivals_claims_and_withdrawals_live(
    open_page, team, agent_api, reviewer_api, screenshot
) -> None:
    agent = agent_api(team["key"])
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    expect(page.locator("#empty-row")).to_be_visible()
    low = form_request(agent, NOTE_SCHEMA, "Refund order 1234 (low priority)?", priority=-1)
    expect(page.locator(f"tr[data-id='{low['id']}']")).to_be_visible(timeout=PUSHED)
    urgent = form_request(agent, NOTE_SCHEMA, "Approve transfer of 9,800 EUR to a new payee?", priority=7)
    normal = form_request(agent, NOTE_SCHEMA, "Confirm the shipping address change for order 88.")
    url_request = agent.create(
        queue="payments",
        mode="url",
        message="Connect the accounting system",
        url="https://auth.example.com/connect",
    )
    rows = page.locator("tr[data-id]")
    expect(rows).to_have_count(4, timeout=PUSHED)
    assert [rows.nth(i).get_attribute("data-id") for i in range(4)] == [
        urgent["id"],
        normal["id"],
        url_request["id"],
        low["id"],
    ]
    expect(page.locator("#queue-counts [data-count='pending']")).to_have_text("4")

    assert (
        reviewer_api(team["bob"])("POST", f"/api/v1/review/requests/{normal['id']}/claim").status_code == 200
    )
    expect(page.locator(f"tr[data-id='{normal['id']}'] .badge")).to_have_text(
        "claimed by bob", timeout=PUSHED
    )
    expect(page.locator("#queue-counts [data-count='claimed']")).to_have_text("1")
    expect(page.locator("#queue-counts [data-count='pending']")).to_have_text("3")
    page.wait_for_timeout(1300)  # let the arrival highlight fade before the picture
    screenshot(page, "queue")

    agent.cancel(low["id"])
    expect(page.locator(f"tr[data-id='{low['id']}']")).to_have_count(0, timeout=PUSHED)

    page.keyboard.press("n")
    expect(page).to_have_url(re.compile(f"/requests/{urgent['id']}/$"))
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")


def test_agent_text_is_rendered_inert_everywhere(open_page, team, agent_api) -> None:
    agent = agent_api(team["key"])
    page = open_page(team["alice"], "/queues/payments/")
    wait_live(page)
    message = "<img src=x onerror=alert('message')><script>alert('script')</script> pay?"
    schema = {
        "type": "object",
        "properties": {
            "choice": {
                "type": "string",
                "title": "\"><svg onload=alert('title')>",
                "description": "<b onmouseover=alert('description')>hover</b>",
                "oneOf": [
                    {"const": "x", "title": "<img src=y onerror=alert('option')>"},
                    {"const": "y", "title": "Plain option"},
                ],
            }
        },
    }
    created = form_request(agent, schema, message, context={"tool": "<script>alert('context')</script>"})
    row_link = page.locator(f"tr[data-id='{created['id']}'] .request-link")
    expect(row_link).to_have_text(message, timeout=PUSHED)  # pushed live, inserted with textContent
    row_link.click()
    claim_on_page(page)
    expect(page.locator("#agent-message")).to_have_text(message)
    expect(page.locator("#q-choice legend")).to_contain_text("\"><svg onload=alert('title')>")
    expect(page.locator("#q-choice .help")).to_have_text("<b onmouseover=alert('description')>hover</b>")
    expect(page.get_by_label("<img src=y onerror=alert('option')>")).to_be_visible()
    expect(page.get_by_text("<script>alert('context')</script>")).to_be_visible()
    assert page.locator("main img, main svg, main script, main b").count() == 0
    page.get_by_label("<img src=y onerror=alert('option')>").check()
    page.get_by_role("button", name="Accept").click()
    expect(page.locator(".flash")).to_contain_text("Accepted")
    assert page.watch.dialogs == []


class CountingHandler(BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        body = b"<!doctype html><title>External flow</title><p>External flow</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def external_site() -> Iterator[tuple[int, list[str]]]:
    """A loopback web server standing in for the external site; it records every request it gets."""
    handler = type("Handler", (CountingHandler,), {"hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler.hits
    server.shutdown()
    server.server_close()


def test_an_external_punycode_url_is_shown_in_full_with_warnings_and_fetched_only_on_open(
    open_page, team, agent_api, external_site: tuple[int, list[str]], screenshot
) -> None:
    port, hits = external_site
    # Chromium resolves every *.localhost name to loopback, so this IDN host reaches the counting server.
    url = f"http://xn--pple-43d.localhost:{port}/oauth/consent?client=accounting"
    agent = agent_api(team["key"])
    created = agent.create(
        queue="payments",
        mode="url",
        message="Sign in to the accounting system",
        url=url,
        elicitationId="flow-1",
    )
    page = open_page(team["alice"], f"/requests/{created['id']}/")
    wait_live(page)
    claim_on_page(page)
    expect(page.locator("#url-full")).to_have_text(url)
    expect(page.locator("#url-host")).to_have_text("xn--pple-43d.localhost")
    warnings = page.locator("[data-url-warning]")
    expect(warnings.filter(has_text="punycode")).to_contain_text(
        "\u0430pple.localhost"
    )  # the first letter is Cyrillic
    expect(warnings.filter(has_text="not HTTPS")).to_be_visible()
    open_link = page.get_by_role("link", name=re.compile("^Open"))
    expect(open_link).to_have_attribute("target", "_blank")
    expect(open_link).to_have_attribute("rel", "noopener noreferrer")
    screenshot(page, "request-url")
    page.wait_for_timeout(500)
    assert hits == []  # nothing fetched, previewed or prefetched before the click

    with page.context.expect_page() as popup_info:
        open_link.click()
    popup = popup_info.value
    popup.wait_for_load_state()
    assert hits[0] == "/oauth/consent?client=accounting"
    popup.close()
    # The popup's favicon request may land at any time after the page, so only page fetches are counted.
    pages_fetched = [hit for hit in hits if hit != "/favicon.ico"]

    agent.report_url_complete(created["id"])
    expect(page.locator("#url-flow-status")).to_be_visible(timeout=PUSHED)
    expect(page.locator("#url-flow-status")).to_have_text("The agent reports the flow is complete.")
    page.get_by_role("button", name="Done").click()
    expect(page.locator(".flash")).to_contain_text("Accepted")
    assert answer_of(agent.get(created["id"])["result"]) == {"action": "accept"}
    assert [hit for hit in hits if hit != "/favicon.ico"] == pages_fetched  # ReviewHub never touched the URL
