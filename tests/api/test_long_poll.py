"""Long-poll: a waiting GET returns as soon as the answer commits, and gives up at the (capped) wait."""

import asyncio
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from elicitation.queue import transitions
from tests.answers import answer_of
from tests.asgi import AsgiClient

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def auth(agent_with_key: Any) -> dict[str, str]:
    return {"Authorization": f"Bearer {agent_with_key[1]}"}


async def test_a_waiting_get_returns_when_the_reviewer_answers(
    make_request: Any, reviewer: Any, auth: dict[str, str]
) -> None:
    request = await sync_to_async(make_request)()
    await sync_to_async(transitions.claim_request)(request.pk, user=reviewer)
    client = AsgiClient()

    async def answer_soon() -> None:
        await asyncio.sleep(0.3)
        await sync_to_async(transitions.respond)(
            request.pk, user=reviewer, action="accept", content={"approve": False}
        )

    started = time.monotonic()
    response, _ = await asyncio.gather(
        client.get(f"/api/v1/requests/{request.pk}", {"wait": 20}, headers=auth), answer_soon()
    )
    elapsed = time.monotonic() - started
    assert response.status_code == 200
    assert answer_of(response.json()["result"]) == {"action": "accept", "content": {"approve": False}}
    assert elapsed < 5  # woken by the push, not by the 20 s wait


async def test_a_wait_on_an_open_request_times_out_with_its_status(
    make_request: Any, auth: dict[str, str], settings: Any
) -> None:
    settings.MAX_LONG_POLL_SECONDS = 1
    request = await sync_to_async(make_request)()
    started = time.monotonic()
    response = await AsgiClient().get(f"/api/v1/requests/{request.pk}", {"wait": 30}, headers=auth)
    assert response.json()["status"] == "pending"
    assert 0.9 <= time.monotonic() - started < 5  # capped at MAX_LONG_POLL_SECONDS


async def test_a_waiting_feed_returns_the_new_event(
    make_request: Any, reviewer: Any, auth: dict[str, str]
) -> None:
    request = await sync_to_async(make_request)()
    await sync_to_async(transitions.claim_request)(request.pk, user=reviewer)

    async def decline_soon() -> None:
        await asyncio.sleep(0.3)
        await sync_to_async(transitions.respond)(request.pk, user=reviewer, action="decline")

    response, _ = await asyncio.gather(
        AsgiClient().get("/api/v1/events", {"after": 0, "wait": 20}, headers=auth), decline_soon()
    )
    events = response.json()["events"]
    assert [(e["type"], e["id"], answer_of(e["result"])) for e in events] == [
        ("completed", str(request.pk), {"action": "decline"})
    ]


async def test_waiting_on_another_agents_request_is_an_immediate_404(
    make_request: Any, make_agent: Any, queue: Any
) -> None:
    request = await sync_to_async(make_request)()
    _, other_key = await sync_to_async(make_agent)("agent-b", queue)
    started = time.monotonic()
    response = await AsgiClient().get(
        f"/api/v1/requests/{request.pk}", {"wait": 10}, headers={"Authorization": f"Bearer {other_key}"}
    )
    assert response.status_code == 404
    assert time.monotonic() - started < 2


async def test_an_unauthenticated_wait_is_refused_without_waiting(make_request: Any) -> None:
    request = await sync_to_async(make_request)()
    started = time.monotonic()
    response = await AsgiClient().get(f"/api/v1/requests/{request.pk}", {"wait": 10})
    assert response.status_code == 401
    assert time.monotonic() - started < 2


async def test_a_push_that_closes_the_request_ends_the_wait_without_asking_the_database_again() -> None:
    from channels.layers import get_channel_layer

    from elicitation.delivery import long_poll

    checks: list[float] = []

    async def still_open() -> bool:
        checks.append(time.monotonic())
        return False

    group = "request.settle-test"
    waiter = asyncio.ensure_future(
        long_poll.wait_until(group, 10, still_open, settles=long_poll.closes_the_request)
    )
    while not checks:
        await asyncio.sleep(0.01)
    layer = get_channel_layer()
    await asyncio.sleep(0.1)  # the waiter has joined the group
    await layer.group_send(
        group, {"type": "request.update", "kind": "claimed", "request": {"status": "claimed"}}
    )
    await layer.group_send(
        group, {"type": "request.update", "kind": "completed", "request": {"status": "completed"}}
    )
    started = time.monotonic()
    await asyncio.wait_for(waiter, 5)

    assert time.monotonic() - started < 1  # not the 2 s recheck, not the 10 s wait
    assert (
        len(checks) == 2
    )  # the first look, and the recheck after the `claimed` push; none after `completed`


def test_only_a_push_leaving_the_open_statuses_settles_a_wait() -> None:
    from elicitation.delivery.long_poll import closes_the_request

    def update(status: Any) -> dict[str, Any]:
        return {"type": "request.update", "request": {"status": status}}

    assert [closes_the_request(update(s)) for s in ("completed", "expired", "withdrawn")] == [True] * 3
    assert [closes_the_request(update(s)) for s in ("pending", "claimed", None)] == [False] * 3
    assert not closes_the_request({"type": "request.draft", "draft": {"state": "submitted"}})
