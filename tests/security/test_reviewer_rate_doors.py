"""REVIEWER_RATE is one budget per account whichever door spends it: the reviewer API, the pages, Slack answers and
the admin's rule writes (docs/contract.md, "Rate budgets"). The contract test holds each door refusing once the API
spent the budget; these hold the rest: the pages spend what the API then lacks, and each door's refusal says how
long to wait and changes nothing."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.delivery import slack
from elicitation.models import AnswerRule, ElicitationRequest, Queue, ReviewerReach, Status
from elicitation.queue import rules
from reviewhub.rates import parse_rate
from tests.delivery.reach.conftest import (  # noqa: F401 - slack_api is a fixture
    FakeSlack,
    interaction_body,
    signed_headers,
    slack_api,
)

YES_NO = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


@pytest.fixture
def browser(reviewer: User) -> Client:
    client = Client()
    client.force_login(reviewer)
    return client


def test_the_pages_spend_the_budget_the_reviewer_api_draws_on(browser: Client, settings: Any) -> None:
    settings.REVIEWER_RATE = parse_rate("2/hour")

    assert browser.get("/").status_code == 200
    assert browser.get("/api/v1/review/queues").status_code == 200
    api = browser.get("/api/v1/review/queues")
    page = browser.get("/queues/payments/")

    assert api.status_code == 429
    assert page.status_code == 429
    assert int(page["Retry-After"]) == api.json()["retryAfter"] >= 1
    assert "Too many requests" in page.content.decode()


def test_a_post_over_the_rate_changes_nothing_on_the_page(
    browser: Client, settings: Any, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=YES_NO)
    settings.REVIEWER_RATE = parse_rate("1/hour")
    assert browser.get("/").status_code == 200

    refused = browser.post(f"/requests/{request.pk}/", {"action": "accept", "answer-ok": "true"})

    assert refused.status_code == 429
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_a_slack_form_over_the_rate_is_sent_back_naming_the_wait(
    slack_api: FakeSlack,  # noqa: F811
    reviewer: User,
    settings: Any,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    ReviewerReach.objects.create(user=reviewer, slack_user_id="U_ALICE")
    request = make_request(requested_schema=YES_NO)
    settings.REVIEWER_RATE = parse_rate("1/hour")
    client = Client()
    client.force_login(reviewer)
    assert client.get("/api/v1/review/queues").status_code == 200
    payload = {
        "type": "view_submission",
        "user": {"id": "U_ALICE"},
        "view": {
            "callback_id": slack.MODAL_CALLBACK,
            "private_metadata": str(request.pk),
            "blocks": [{"type": "input", "block_id": slack.BLOCK_PREFIX + "ok"}],
            "state": {"values": {}},
        },
    }
    body = interaction_body(payload)

    response = Client().post(
        "/api/v1/slack/interactions",
        body,
        content_type="application/x-www-form-urlencoded",
        headers=signed_headers(body),
    )

    assert response.status_code == 200
    [reason] = response.json()["errors"].values()
    assert reason.startswith("Not answered: Request was throttled. Expected available in ")
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_an_admin_revoke_over_the_rate_revokes_nothing(queue: Queue, settings: Any) -> None:
    staff = User.objects.create(username="root", is_staff=True, is_superuser=True)
    rule = rules.add_rule(queue, {"name": "no refunds", "match": {"tool": "refund"}, "action": "decline"})
    settings.REVIEWER_RATE = parse_rate("1/hour")
    admin = Client()
    admin.force_login(staff)
    assert admin.get("/api/v1/review/queues").status_code == 200
    assert admin.get("/admin/elicitation/answerrule/").status_code == 200  # reading the admin is not charged

    refused = admin.post(
        "/admin/elicitation/answerrule/", {"action": "revoke", "_selected_action": [str(rule.pk)]}
    )

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert "Nothing was saved." in refused.content.decode()
    assert AnswerRule.objects.get(pk=rule.pk).revoked_at is None
