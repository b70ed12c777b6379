"""The expected wait over MCP, against the live server: `get_request` carries `expectedWaitSeconds` (and its retry
hint follows it), and a task's `pollIntervalMs` follows it between 1 s and 60 s, never past the deadline.

The queue's recent history is written here through the real transitions, at times just before now (the server
reads the rows at its own, real, time)."""

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User

from elicitation.models import Agent, Queue
from elicitation.queue import transitions
from tests.conftest import Clock
from tests.mcp.conftest import Hub
from tests.mcp.test_tasks import ask_as_task, mcp_client, request_id_of, structured
from tests.queue.test_expected_wait import answered_history, ask

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def past(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """A clock, also behind the rows' `auto_now` columns, for writing the queue's last minutes."""
    monkeypatch.setattr("django.utils.timezone.now", clock.now)
    return clock


def reviewers_of(hub: Hub, *names: str) -> tuple[Agent, Queue, list[User]]:
    queue = Queue.objects.get(slug=hub.queue)
    Queue.objects.filter(pk=queue.pk).update(lease_seconds=3600)  # a claim stays live while the test runs
    queue.refresh_from_db()
    people = []
    for name in names:
        person = User.objects.create_user(name)
        queue.members.add(person)
        people.append(person)
    return Agent.objects.get(pk=hub.agent_id), queue, people


def alice_busy_with_two_waiting(hub: Hub, clock: Clock) -> None:
    """Alice answered six requests in two minutes each, ending eight minutes ago, and holds a claim on a seventh;
    two more wait."""
    agent, queue, (alice,) = reviewers_of(hub, "alice")
    clock.advance(minutes=-20)
    answered_history(clock, agent, queue, [alice], answers=6, service=120)
    transitions.claim_request(ask(agent, queue).pk, user=alice)
    for _ in range(2):
        clock.advance(minutes=1)
        ask(agent, queue)


def two_reviewers_free(hub: Hub, clock: Clock) -> None:
    """Bob and carol answered six requests in 20 s each, the last a minute ago, and hold no claim."""
    agent, queue, people = reviewers_of(hub, "bob", "carol")
    clock.advance(minutes=-3)
    answered_history(clock, agent, queue, people, answers=6, service=20)


async def test_get_request_says_how_long_the_request_will_likely_wait(hub: Hub, past: Clock) -> None:
    await sync_to_async(alice_busy_with_two_waiting)(hub, past)
    async with mcp_client(hub) as client:
        created = await ask_as_task(client, hub)
        read = structured(
            await client.session.call_tool(
                "get_request", {"id": request_id_of(created.task_id)}, allow_claimed=True
            )
        )

    # Two ahead and alice busy: three answers of two minutes before it is claimed, then its own.
    assert read["status"] == "pending"
    assert read["expectedWaitSeconds"] == 3 * 120 + 120
    assert read["retryAfterSeconds"] == 60  # poll when the answer is expected, at most every minute
    assert created.poll_interval_ms == 60_000
    assert created.status_message == "Waiting for a reviewer. An answer is expected in about 8 min."


async def test_a_tasks_poll_interval_follows_the_expected_wait_never_past_the_deadline(
    hub: Hub, past: Clock
) -> None:
    await sync_to_async(two_reviewers_free)(hub, past)
    async with mcp_client(hub) as client:
        soon = await ask_as_task(client, hub)
        hurried = await ask_as_task(client, hub, expiresIn=8)
        read = structured(
            await client.session.call_tool(
                "get_request", {"id": request_id_of(soon.task_id)}, allow_claimed=True
            )
        )

    # A free reviewer takes it at once: one answer of the team's 20 s.
    assert read["expectedWaitSeconds"] == 20
    assert soon.poll_interval_ms == 20_000
    assert soon.status_message == "Waiting for a reviewer. An answer is expected in about 20 s."
    # Due in 8 s: the deadline comes first, and the poll with it.
    assert hurried.poll_interval_ms is not None
    assert 1_000 <= hurried.poll_interval_ms <= 8_000
