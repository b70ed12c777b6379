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


async def test_a_push_that_closes_the_request_ends_the_wait_without_asking_the_database_again(
    make_request: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from channels.layers import get_channel_layer

    from elicitation.delivery import long_poll, pushes, waiters

    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever ends the wait early was the push
    request = await sync_to_async(make_request)()
    looks: list[bool] = []
    rounds: list[Any] = []
    first_look = waiters.WaiterHub.first_look_at_request
    read_round = waiters.read_long_poll_round

    async def counted_look(hub: waiters.WaiterHub, wait: waiters.LongPollWait) -> bool:
        looks.append(await first_look(hub, wait))
        return looks[-1]

    def counted_round(*args: Any) -> Any:
        rounds.append(args)
        return read_round(*args)

    monkeypatch.setattr(waiters.WaiterHub, "first_look_at_request", counted_look)
    monkeypatch.setattr(waiters, "read_long_poll_round", counted_round)
    waiter = asyncio.ensure_future(long_poll.wait_for_request(request.agent_id, request.pk, 25))
    while not looks:
        await asyncio.sleep(0.01)
    layer = get_channel_layer()
    group = pushes.layer_group(pushes.agent_group(request.agent_id))

    def event(status: str) -> dict[str, Any]:
        return {
            "type": "agent.event",
            "agent": request.agent_id,
            "event": {"id": str(request.pk), "status": status},
        }

    await layer.group_send(group, event("claimed"))
    await asyncio.sleep(0.2)
    assert not waiter.done()  # a push that leaves the request open does not end the wait
    await layer.group_send(group, event("completed"))
    started = time.monotonic()
    await asyncio.wait_for(waiter, 5)

    assert time.monotonic() - started < 1  # not the 30 s recheck, not the 25 s wait
    assert looks == [False] and rounds == []  # the first look only: no database read after either push


def test_only_an_event_leaving_the_open_statuses_settles_a_wait() -> None:
    from elicitation.delivery.waiters import event_closes

    def event(status: Any) -> dict[str, Any]:
        return {"type": "agent.event", "event": {"id": "r", "status": status}}

    assert [event_closes(event(s), "r") for s in ("completed", "expired", "withdrawn")] == [True] * 3
    assert [event_closes(event(s), "r") for s in ("pending", "claimed", None)] == [False] * 3
    assert not event_closes({"type": "request.draft", "draft": {"state": "submitted"}}, "r")
