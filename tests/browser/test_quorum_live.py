"""A quorum's progress on the queue page, live: while one reviewer watches the queue, another proposes and approves
the answer on the request page, and the watcher's row goes from "0 of 2 approvals" to "1 of 2 approvals" without
a reload (the approval's `queue.update` push makes the page fetch the row again)."""

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


def test_the_queue_row_counts_an_approval_made_on_another_page_live(
    open_page: Callable[..., Any],
    agent_api: Callable[[str], Any],
    screenshot: Callable[[Any, str], Any],
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments")
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    queue.members.add(alice, bob)
    rules.replace_policy(queue, {"quorum": {"approvals": 2}})
    _, key = accounts.create_agent("billing-bot", queue_slugs=["payments"])
    created = agent_api(key).create(queue="payments", message="Pay 5000 EUR to ACME?", requestedSchema=SCHEMA)

    watching = open_page(bob, "/queues/payments/")
    expect(watching.locator("body")).to_have_attribute("data-live", "on")
    count = watching.locator(f'tr[data-id="{created["id"]}"] [data-field="approvals"]')
    expect(count).to_have_text("0 of 2 approvals")
    watching.evaluate("window.sameDocument = true")  # gone if the page reloads

    deciding = open_page(alice, f"/requests/{created['id']}/")
    deciding.get_by_role("button", name="Claim", exact=True).click()
    expect(deciding.locator("#holder-text")).to_contain_text("You hold this request")
    expect(watching.locator(f'tr[data-id="{created["id"]}"] [data-field="status"]')).to_contain_text("alice")
    deciding.locator("#approve-button").click()
    expect(deciding.locator(".flash")).to_contain_text("Proposed and approved: 1 of 2")

    expect(count).to_have_text("1 of 2 approvals")
    row = watching.locator(f'tr[data-id="{created["id"]}"]')
    expect(row.locator('[data-field="status"]')).to_have_text("pending")  # back in the queue for bob
    assert "alice" not in row.inner_text()  # counts only: who approved is on the request page
    assert watching.evaluate("window.sameDocument") is True
    assert not watching.watch.dialogs
    screenshot(watching, "quorum-queue-row-live")
