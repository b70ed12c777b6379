"""The request page's decision panel, live: while one approver looks at a quorum request, another proposes and
approves the answer on their own page, and the watcher's approvals line goes from "0 of 2" to "1 of 2: alice"
without a reload (the page's one socket hears `request.update` and refetches the panel's figures)."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from elicitation.models import Queue
from elicitation.queue import accounts, rules

pytestmark = pytest.mark.browser

SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve the payment?"}},
    "required": ["approve"],
}


def test_the_approvals_line_counts_an_approval_made_on_another_page_live(
    open_page: Callable[..., Any], agent_api: Callable[[str], Any]
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments")
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    queue.members.add(alice, bob)
    rules.replace_policy(queue, {"quorum": {"approvals": 2}})
    _, key = accounts.create_agent("billing-bot", queue_slugs=["payments"])
    created = agent_api(key).create(queue="payments", message="Pay 5000 EUR to ACME?", requestedSchema=SCHEMA)

    watching = open_page(bob, f"/requests/{created['id']}/")
    expect(watching.locator("body")).to_have_attribute("data-live", "on")
    line = watching.locator("#quorum-progress")
    expect(line).to_have_text("0 of 2")
    watching.evaluate("window.sameDocument = true")  # gone if the page reloads

    deciding = open_page(alice, f"/requests/{created['id']}/")
    deciding.get_by_role("button", name="Claim", exact=True).click()
    expect(deciding.locator("#holder-text")).to_contain_text("You hold this request")
    deciding.locator("#approve-button").click()
    expect(deciding.locator(".flash")).to_contain_text("Proposed and approved: 1 of 2")

    expect(line).to_have_text("1 of 2: alice")
    expect(watching.locator("#status-badge")).to_have_text("pending")
    assert watching.evaluate("window.sameDocument") is True
