"""Remembered decisions in the browser: a reviewer turns an answer into a rule from the request page (after a
preview of what it matches); the next matching request is answered at once, a non-matching one waits for a
person; an expired or revoked decision answers nothing."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from elicitation.models import AnswerRule, Queue
from elicitation.queue import accounts, rules

pytestmark = pytest.mark.browser

SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve the payment?"}},
    "required": ["approve"],
}


def ask(api: Any, amount: int, tool: str = "pay") -> dict[str, Any]:
    return dict(
        api.create(
            queue="payments",
            message=f"Pay {amount} EUR to ACME?",
            requestedSchema=SCHEMA,
            context={"mcp": {"server": "bank", "tool": tool, "arguments": {"amount": amount, "to": "ACME"}}},
        )
    )


def test_a_remembered_decision_made_in_the_browser_answers_the_next_matching_request(
    open_page: Callable[..., Any],
    agent_api: Callable[[str], Any],
    reviewer_api: Callable[[User], Callable[..., httpx.Response]],
    screenshot: Callable[[Any, str], Any],
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments")
    sue = User.objects.create_user("sue")
    queue.members.add(sue)
    queue.supervisors.add(sue)
    _, key = accounts.create_agent("billing-bot", queue_slugs=["payments"])
    api = agent_api(key)
    as_sue = reviewer_api(sue)

    first = ask(api, 80)
    assert as_sue("POST", f"/api/v1/review/requests/{first['id']}/claim").status_code == 200
    answered = as_sue(
        "POST",
        f"/api/v1/review/requests/{first['id']}/respond",
        {"action": "accept", "content": {"approve": True}},
    )
    assert answered.status_code == 200, answered.text

    page = open_page(sue, f"/requests/{first['id']}/")
    page.click("#remember-link")
    page.select_option("#op-amount", "lte")
    page.fill("#value-amount", "100")
    page.fill("#remember-days", "30")
    page.click("#remember-preview")
    assert "Matches 1 of the queue's latest 1 requests" in page.inner_text("#remember-match-count")
    assert "lte: 100" in (page.text_content("#remember-yaml") or "")
    screenshot(page, "remembered-decision-preview")
    page.click("#remember-confirm")
    page.wait_for_url(f"**/requests/{first['id']}/")
    assert "Remembered for 30 days" in page.inner_text("#notices, .messages, body")

    matching = ask(api, 55)
    assert matching["status"] == "completed"
    assert matching["result"]["content"] == {"approve": True}
    assert matching["result"]["_meta"]["reviewhub/decision"]["rule"]["name"].startswith(
        "Remembered: accept pay"
    )
    assert ask(api, 500)["status"] == "pending"  # above the bound
    assert ask(api, 50, tool="refund")["status"] == "pending"  # another tool

    page.goto(f"/requests/{matching['id']}/")
    assert "Decided by rule" in page.inner_text("#decided-by-rule")

    # Expired: time passes (the row's expiry moves into the past; the rules version tells every process).
    remembered = AnswerRule.objects.get(queue=queue, remembered_from__isnull=False)
    AnswerRule.objects.filter(pk=remembered.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    rules.rules_changed(queue)
    assert ask(api, 55)["status"] == "pending"
    listing = open_page(sue, "/queues/payments/remembered")
    assert listing.get_attribute(f"tr[data-rule='{remembered.pk}']", "data-state") == "expired"

    # Revoked: live again, then a supervisor revokes it from the list.
    AnswerRule.objects.filter(pk=remembered.pk).update(expires_at=timezone.now() + timedelta(days=1))
    rules.rules_changed(queue)
    assert ask(api, 55)["status"] == "completed"
    listing.reload()
    listing.click(f"tr[data-rule='{remembered.pk}'] button")
    listing.wait_for_selector(f"tr[data-rule='{remembered.pk}'][data-state='revoked']")
    assert ask(api, 55)["status"] == "pending"
    screenshot(listing, "remembered-decisions-list")


def test_the_quorum_panel_shows_progress_and_a_second_reviewer_approves_from_the_page(
    open_page: Callable[..., Any],
    agent_api: Callable[[str], Any],
    reviewer_api: Callable[[User], Callable[..., httpx.Response]],
    screenshot: Callable[[Any, str], Any],
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments")
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    queue.members.add(alice, bob)
    rules.replace_policy(queue, {"quorum": {"approvals": 2}})
    _, key = accounts.create_agent("billing-bot", queue_slugs=["payments"])
    api = agent_api(key)
    request = ask(api, 5000)

    as_alice = reviewer_api(alice)
    as_alice("POST", f"/api/v1/review/requests/{request['id']}/claim")
    proposed = as_alice(
        "POST",
        f"/api/v1/review/requests/{request['id']}/respond",
        {"action": "accept", "content": {"approve": True}},
    )
    assert proposed.json()["statusDetail"]["text"] == "1 of 2: alice"

    page = open_page(bob, f"/requests/{request['id']}/")
    assert page.inner_text("#quorum-progress") == "1 of 2: alice"
    assert "Approve the payment?" in page.inner_text("#quorum-proposal")
    screenshot(page, "quorum-panel")
    page.click("#quorum-approve")
    page.wait_for_url(f"**/requests/{request['id']}/")
    assert page.inner_text("#quorum-progress") == "2 of 2: alice, bob"
    done = api.get(request["id"])
    assert done["status"] == "completed"
    assert done["result"]["content"] == {"approve": True}
