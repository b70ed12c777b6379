"""`statusDetail` says what is deciding a request, or what decided it: a quorum's progress only while that quorum
runs (and its tally once it decided), the rule that answered it, a scripted queue's reason. A queue's default
quorum is copied onto every request it receives, so a request a rule answered must not show "0 of 2"."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import rules, transitions
from tests.conftest import FORM_SCHEMA, Clock

pytestmark = pytest.mark.django_db

READ_ONLY = "read-only tools need nobody"


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"mcp": {"server": "files", "tool": tool, "arguments": arguments}}


def ask(agent_client: APIClient, tool: str, **arguments: Any) -> dict[str, Any]:
    """The agent's own create, as it posts it."""
    response = agent_client.post(
        "/api/v1/requests",
        {
            "message": f"Run {tool}?",
            "requestedSchema": FORM_SCHEMA,
            "queue": "payments",
            "context": call(tool, **arguments),
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    return response.json()  # type: ignore[no-any-return]


def seen_by_agent(agent_client: APIClient, request_id: str) -> dict[str, Any]:
    response = agent_client.get(f"/api/v1/requests/{request_id}")
    assert response.status_code == 200
    return response.json()  # type: ignore[no-any-return]


@pytest.fixture
def two_needed_unless_read_only(queue: Queue) -> Queue:
    """A queue whose default is two approvals, and a rule that accepts read-only tools at once."""
    rules.replace_policy(
        queue,
        {
            "quorum": {"approvals": 2},
            "rules": [
                {
                    "name": READ_ONLY,
                    "match": {"tool": {"in": ["read_file", "list_files"]}},
                    "action": "accept",
                    "content": {"approve": True},
                }
            ],
        },
    )
    return queue


@pytest.fixture
def bob(make_reviewer: Callable[..., User], queue: Queue) -> User:
    return make_reviewer("bob", queue)


def test_a_request_a_rule_answered_names_the_rule_not_the_queues_quorum(
    two_needed_unless_read_only: Queue, agent_client: APIClient, reviewer_client: APIClient
) -> None:
    created = ask(agent_client, "read_file", path="/etc/motd")

    body = seen_by_agent(agent_client, created["id"])

    assert body["status"] == "completed"
    assert body["result"]["_meta"]["reviewhub/decision"]["rule"]["name"] == READ_ONLY
    assert body["statusDetail"]["kind"] == "rule"
    assert body["statusDetail"]["text"] == f"answered by rule: {READ_ONLY}"
    assert body["statusDetail"]["rule"]["name"] == READ_ONLY
    assert body["statusDetail"]["rule"]["action"] == "accept"
    assert "of 2" not in str(body["statusDetail"])
    # Every door shows the same: the create's own answer, the agent's list, a reviewer's view.
    assert created["statusDetail"] == body["statusDetail"]
    [listed] = agent_client.get("/api/v1/requests?status=closed").json()
    assert listed["statusDetail"] == body["statusDetail"]
    review = reviewer_client.get(f"/api/v1/review/requests/{created['id']}").json()
    assert review["statusDetail"] == body["statusDetail"]


def test_a_request_waiting_for_approvals_shows_its_progress_until_the_quorum_decides(
    two_needed_unless_read_only: Queue, agent_client: APIClient, reviewer: User, bob: User
) -> None:
    created = ask(agent_client, "pay", amount=5000)
    assert created["status"] == "pending"
    assert created["statusDetail"]["kind"] == "quorum"
    assert created["statusDetail"]["text"] == "0 of 2"

    transitions.respond(created["id"], user=reviewer, action="accept", content={"approve": True})
    waiting = seen_by_agent(agent_client, created["id"])
    assert waiting["status"] == "pending"
    assert waiting["statusDetail"]["text"] == "1 of 2: alice"
    assert waiting["result"] is None

    transitions.respond(created["id"], user=bob, action="accept", content=None)
    decided = seen_by_agent(agent_client, created["id"])
    assert decided["status"] == "completed"
    assert decided["statusDetail"]["kind"] == "quorum"
    assert decided["statusDetail"]["text"] == "2 of 2: alice, bob"


def test_a_remembered_decision_is_named_as_the_rule_that_answered(
    queue: Queue,
    agent_client: APIClient,
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    reviewer: User,
) -> None:
    supervisor = make_reviewer("carol", queue, supervisor=True)
    first = make_request(context=call("pay", amount=10))
    transitions.claim_request(first.pk, user=reviewer)
    answered = transitions.respond(first.pk, user=reviewer, action="accept", content={"approve": True})
    remembered = rules.remember_decision(
        answered,
        rules.remembered_rule_data(answered, arguments={"amount": ("eq", 10)}, days=7),
        user=supervisor,
    )
    rules.replace_policy(queue, {"quorum": {"approvals": 2}})  # remembered decisions stay

    again = ask(agent_client, "pay", amount=10)

    assert again["status"] == "completed"
    assert again["statusDetail"]["kind"] == "rule"
    assert again["statusDetail"]["text"] == f"answered by rule: {remembered.name}"
    assert remembered.name.startswith("Remembered: ")
    assert again["statusDetail"]["rule"]["id"] == remembered.pk


def test_a_request_a_scripted_queue_declined_gives_the_queues_reason(
    queue: Queue, agent_client: APIClient
) -> None:
    rules.replace_policy(queue, {"mode": "scripted", "unmatched": "decline", "quorum": {"approvals": 2}})

    created = ask(agent_client, "pay", amount=1)

    assert (created["status"], created["result"]["action"]) == ("completed", "decline")
    assert created["statusDetail"]["kind"] == "policy"
    assert created["statusDetail"]["text"] == (
        "declined by the queue's policy: no rule of scripted queue 'payments' matches this request"
    )


def test_a_quorum_no_longer_running_shows_no_progress(
    two_needed_unless_read_only: Queue,
    agent_client: APIClient,
    agent: Any,
    reviewer: User,
    clock: Clock,
) -> None:
    expiring = ask(agent_client, "pay", amount=7)
    transitions.respond(expiring["id"], user=reviewer, action="accept", content={"approve": True})
    withdrawn = ask(agent_client, "pay", amount=8)
    transitions.withdraw_request(withdrawn["id"], agent=agent)
    clock.advance(days=1)
    assert transitions.expire_overdue_requests() == 1

    expired = seen_by_agent(agent_client, expiring["id"])
    assert expired["status"] == "expired"
    assert "statusDetail" not in expired
    assert "statusDetail" not in seen_by_agent(agent_client, withdrawn["id"])


def test_a_request_one_person_answers_has_no_status_detail(
    queue: Queue, agent_client: APIClient, reviewer: User
) -> None:
    created = ask(agent_client, "pay", amount=3)
    assert "statusDetail" not in created
    transitions.claim_request(created["id"], user=reviewer)
    transitions.respond(created["id"], user=reviewer, action="decline", content=None)
    assert "statusDetail" not in seen_by_agent(agent_client, created["id"])
