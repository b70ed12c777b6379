"""`expectedWaitSeconds` in the agent's REST bodies: on an open request's GET and in the list, from the queue's
figures (queue/expected_wait.py), never on a closed request, and at a cost per queue, not per request."""

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.test import APIClient

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import expected_wait, transitions
from tests.conftest import FORM_SCHEMA, Clock
from tests.queue.test_expected_wait import answered_history, ask

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _no_kept_snapshots() -> Iterator[None]:
    expected_wait.forget_snapshots()
    yield
    expected_wait.forget_snapshots()


@pytest.fixture
def rows_clock(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Clock:
    monkeypatch.setattr("django.utils.timezone.now", clock.now)
    return clock


@pytest.fixture
def alice_at_work(
    rows_clock: Clock, agent: Agent, queue: Queue, make_reviewer: Callable[..., User]
) -> tuple[User, ElicitationRequest]:
    """Alice answered six requests in two minutes each and holds a claim on a seventh; two more wait."""
    alice = make_reviewer("alice", queue)
    answered_history(rows_clock, agent, queue, [alice], answers=6, service=120)
    held = ask(agent, queue)
    transitions.claim_request(held.pk, user=alice)
    for _ in range(2):
        rows_clock.advance(seconds=1)
        ask(agent, queue)
    rows_clock.advance(seconds=1)
    return alice, held


def test_an_open_request_says_how_long_it_will_likely_wait_and_a_closed_one_does_not(
    rows_clock: Clock,
    agent_client: APIClient,
    agent: Agent,
    queue: Queue,
    alice_at_work: tuple[User, ElicitationRequest],
) -> None:
    alice, held = alice_at_work
    mine = ask(agent, queue)

    waiting = agent_client.get(f"/api/v1/requests/{mine.pk}")
    answering = agent_client.get(f"/api/v1/requests/{held.pk}")
    transitions.respond(held.pk, user=alice, action="accept", content={"approve": True})
    expected_wait.forget_snapshots()
    answered = agent_client.get(f"/api/v1/requests/{held.pk}")

    assert waiting.status_code == answering.status_code == answered.status_code == 200
    # Two ahead and alice busy: three answers of two minutes before hers, then her own.
    assert waiting.json()["expectedWaitSeconds"] == 3 * 120 + 120
    assert answering.json()["expectedWaitSeconds"] == 120
    assert answered.json()["status"] == "completed"
    assert "expectedWaitSeconds" not in answered.json()
    # The body says it; no header does (Retry-After is the throttle's, on 429 and 503).
    assert "Retry-After" not in waiting.headers


def test_the_list_gives_each_open_request_its_own_wait(
    rows_clock: Clock,
    agent_client: APIClient,
    agent: Agent,
    queue: Queue,
    alice_at_work: tuple[User, ElicitationRequest],
) -> None:
    mine = ask(agent, queue)
    rows_clock.advance(seconds=1)
    later = ask(agent, queue)

    listed = {row["id"]: row for row in agent_client.get("/api/v1/requests").json()}

    assert listed[str(mine.pk)]["expectedWaitSeconds"] == 3 * 120 + 120
    assert listed[str(later.pk)]["expectedWaitSeconds"] == 4 * 120 + 120
    closed = agent_client.get("/api/v1/requests?status=closed").json()
    assert len(closed) == 6
    assert not any("expectedWaitSeconds" in row for row in closed)


def test_without_history_there_is_no_estimate(agent_client: APIClient, agent: Agent, queue: Queue) -> None:
    body = agent_client.get(f"/api/v1/requests/{ask(agent, queue).pk}").json()
    assert body["status"] == "pending"
    assert "expectedWaitSeconds" not in body


def test_the_create_response_carries_none_so_intake_reads_nothing_more(
    agent_client: APIClient, alice_at_work: tuple[User, ElicitationRequest]
) -> None:
    created = agent_client.post(
        "/api/v1/requests",
        {"message": "Approve?", "requestedSchema": FORM_SCHEMA, "queue": "payments"},
        format="json",
    )
    assert created.status_code == 201
    assert "expectedWaitSeconds" not in created.json()
    assert "expectedWaitSeconds" in agent_client.get(f"/api/v1/requests/{created.json()['id']}").json()


def test_listing_many_open_requests_reads_the_queue_once(
    rows_clock: Clock, agent_client: APIClient, agent: Agent, queue: Queue, alice_at_work: Any
) -> None:
    def statements_of_a_listing() -> int:
        expected_wait.forget_snapshots()
        with CaptureQueriesContext(connection) as captured:
            listed = agent_client.get("/api/v1/requests").json()
        assert all("expectedWaitSeconds" in row for row in listed)
        return len(captured.captured_queries)

    few = statements_of_a_listing()
    for _ in range(20):
        rows_clock.advance(seconds=1)
        ask(agent, queue)
    assert statements_of_a_listing() == few
