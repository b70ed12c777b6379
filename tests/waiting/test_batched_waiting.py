"""One hub per process waits for every waiter (delivery/waiters.py): lost pushes are found by rechecks whose query
count does not grow with the number of waiters, and one push wakes every long-poll on its request through one
group membership."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.test.utils import CaptureQueriesContext

from elicitation.delivery import long_poll, pushes, waiters
from elicitation.models import Agent, ElicitationRequest, Status
from elicitation.queue import accounts
from tests.asgi import AsgiClient
from tests.delivery.conftest import Socket

pytestmark = pytest.mark.django_db(transaction=True)

Answer = Callable[..., Awaitable[ElicitationRequest]]
OpenSocket = Callable[..., Awaitable[Socket]]


def counting_queries(monkeypatch: pytest.MonkeyPatch, name: str) -> list[int]:
    """Wrap the hub's database function `name`: each call records how many SQL queries it ran (counted in the
    waiter thread that runs it, never timed)."""
    original = getattr(waiters, name)
    counts: list[int] = []

    def counted(*args: Any) -> Any:
        with CaptureQueriesContext(connection) as captured:
            result = original(*args)
        counts.append(len(captured.captured_queries))
        return result

    monkeypatch.setattr(waiters, name, counted)
    return counts


def counting_calls(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    original = getattr(module, name)
    calls: list[tuple[Any, ...]] = []

    def counted(*args: Any) -> Any:
        result = original(*args)
        calls.append(args)  # once it has read: a test waiting on this knows the read is behind it
        return result

    monkeypatch.setattr(module, name, counted)
    return calls


def counting_first_looks(monkeypatch: pytest.MonkeyPatch, name: str) -> list[bool]:
    """Wrap the hub's `name` (a long-poll's first look, one of its spaced reads): what each finished look found."""
    original = getattr(waiters.WaiterHub, name)
    found: list[bool] = []

    async def counted(hub: waiters.WaiterHub, wait: waiters.LongPollWait) -> bool:
        result = await original(hub, wait)
        found.append(result)
        return result

    monkeypatch.setattr(waiters.WaiterHub, name, counted)
    return found


def layer_calls(monkeypatch: pytest.MonkeyPatch, *names: str) -> list[tuple[str, str]]:
    """Record each named group call on the channel layer as (call, group), then let it through."""
    layer = get_channel_layer()
    calls: list[tuple[str, str]] = []
    for name in names:
        original = getattr(layer, name)

        async def recorded(group: str, channel: str, name: str = name, original: Any = original) -> None:
            calls.append((name, group))
            await original(group, channel)

        monkeypatch.setattr(layer, name, recorded)
    return calls


def pushes_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every publish from now on is lost on its way (as in a Redis blip); the database commits as usual."""

    async def lost(group: str, message: Any) -> None:
        return None

    monkeypatch.setattr(get_channel_layer(), "group_send", lost)


async def until(condition: Callable[[], bool], timeout: float = 20) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("waiting", [1, 200])
async def test_lost_pushes_are_found_by_one_round_for_every_long_poll_at_a_flat_query_cost(
    waiting: int,
    agent: Agent,
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.LONG_POLL_RECHECK_SECONDS = 1
    requests = await database_sync_to_async(lambda: [make_request() for _ in range(waiting)])()
    news = await database_sync_to_async(make_request)()  # its answer is the feed waiters' event
    pushes_lost(monkeypatch)
    round_queries = counting_queries(monkeypatch, "read_long_poll_round")
    first_look_queries = counting_queries(monkeypatch, "read_first_looks")
    feed_look_queries = counting_queries(monkeypatch, "read_feed_heads")
    first_looks = counting_first_looks(monkeypatch, "first_look_at_request")
    feed_looks = counting_first_looks(monkeypatch, "first_look_at_feed")

    polls = [asyncio.ensure_future(long_poll.wait_for_request(agent.pk, r.pk, 30)) for r in requests]
    polls += [asyncio.ensure_future(long_poll.wait_for_feed(agent.pk, 0, 30)) for _ in range(waiting)]
    await until(lambda: len(first_looks) == waiting and len(feed_looks) == waiting)
    assert not any(poll.done() for poll in polls)  # all of them found nothing yet, and wait
    assert not any(first_looks + feed_looks)
    # The first looks are spaced reads: a few queries, the same for 1 or 200 waiters of each kind.
    assert 1 <= sum(first_look_queries) <= 3 and 1 <= sum(feed_look_queries) <= 3

    # Closed without any push: a bulk update for the request waiters, an answer whose push is dropped for the feed.
    await database_sync_to_async(
        lambda: ElicitationRequest.objects.filter(pk__in=[r.pk for r in requests]).update(
            status=Status.WITHDRAWN
        )
    )()
    await answer(news)
    rounds_before = len(round_queries)
    await asyncio.wait_for(asyncio.gather(*polls), timeout=6)

    assert len(round_queries) - rounds_before <= 3  # found by the rounds, not the 30 s timeout
    # One query for every request waiter, one for every feed waiter's head: the same for 1 or 200 of each.
    assert round_queries and max(round_queries) == 2


@pytest.mark.parametrize("sockets", [1, 20, 200])
async def test_lost_pushes_are_found_by_batched_socket_rechecks_at_a_flat_query_cost(
    sockets: int,
    open_socket: OpenSocket,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.AGENT_SOCKET_RECHECK_SECONDS = 1
    settings.LONG_POLL_RECHECK_SECONDS = 1
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    # Opened together, as a reconnecting fleet would: their first head look-ups share the spaced reads'
    # (HEAD_BATCH_SECONDS) batches, where one after another each would wait for the next.
    opened = await asyncio.gather(*(open_socket(key, timeout=60) for _ in range(sockets)))
    for socket in opened:
        await socket.send_json_to({"type": "resume", "after": 0})
        assert (await socket.receive_json_from(timeout=5))["type"] == "resumed"
    head_queries = counting_queries(monkeypatch, "read_socket_heads")
    head_lookups = counting_calls(monkeypatch, waiters, "read_socket_heads")

    pushes_lost(monkeypatch)
    await answer(request)

    for socket in opened:
        frame = await socket.receive_json_from(timeout=8)
        assert (frame["type"], frame["id"], frame["cursor"]) == ("completed", str(request.pk), 1)
    # Every look-up of a batch was one query, however many sockets were in it.
    assert head_queries and set(head_queries) == {1}
    assert max(len(keys) for (keys,) in head_lookups) <= 1  # one agent, one key: one row read for all of them


async def test_one_push_wakes_every_long_poll_on_its_request_through_one_group_membership(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever returns early was woken by the push
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    calls = layer_calls(monkeypatch, "group_add")
    first_looks = counting_first_looks(monkeypatch, "first_look_at_request")
    rounds = counting_calls(monkeypatch, waiters, "read_long_poll_round")
    client = AsgiClient()
    headers = {"Authorization": f"Bearer {key}"}
    polls = [
        asyncio.ensure_future(client.get(f"/api/v1/requests/{request.pk}", {"wait": 25}, headers=headers))
        for _ in range(4)
    ]
    polls += [asyncio.ensure_future(long_poll.wait_for_request(request.agent_id, request.pk, 25))]
    await until(lambda: len(first_looks) == 5)

    await answer(request, "decline")
    done = await asyncio.wait_for(asyncio.gather(*polls), timeout=10)

    assert [(r.status_code, r.json()["status"]) for r in done[:4]] == [(200, "completed")] * 4
    # One membership: the layer group that carries the agent's pushes (its shard).
    assert calls == [("group_add", pushes.layer_group(pushes.agent_group(request.agent_id)))]
    assert len(first_looks) == 5  # and no database read after the push
    assert rounds == []


async def test_an_agents_successive_long_polls_share_one_membership_left_only_after_the_linger(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever returns early was woken by the push
    monkeypatch.setattr(waiters, "GROUP_LINGER_SECONDS", 0.5)
    agent, _ = agent_with_key
    calls = layer_calls(monkeypatch, "group_add", "group_discard")
    group = pushes.layer_group(pushes.agent_group(agent.pk))  # the agent's shard carries its pushes
    first_looks = counting_first_looks(monkeypatch, "first_look_at_request")

    for turn in range(3):
        request = await database_sync_to_async(make_request)()
        waiting = asyncio.ensure_future(long_poll.wait_for_request(agent.pk, request.pk, 25))
        await until(lambda turn=turn: len(first_looks) == turn + 1)
        await answer(request, "decline")
        await asyncio.wait_for(waiting, timeout=10)  # woken by the push: the recheck is 30 s away

    assert calls == [("group_add", group)]  # joined once for three waits, still joined between them
    await until(lambda: ("group_discard", group) in calls, timeout=5)
    assert calls == [("group_add", group), ("group_discard", group)]
    assert not waiters.hub().is_joined(pushes.agent_group(agent.pk))


async def test_another_agents_event_or_an_open_status_does_not_end_a_request_wait(
    agent_with_key: tuple[Agent, str], make_request: Callable[..., ElicitationRequest]
) -> None:
    agent, _ = agent_with_key
    request_id = str((await database_sync_to_async(make_request)()).pk)

    def event(**fields: Any) -> dict[str, Any]:
        return {
            "type": "agent.event",
            "agent": agent.pk,
            "event": {"id": request_id, "status": "completed", **fields},
        }

    assert waiters.event_closes(event(), request_id)
    assert waiters.event_closes(event(status="expired"), request_id)
    assert not waiters.event_closes(event(status="claimed"), request_id)
    assert not waiters.event_closes(event(id="00000000-0000-0000-0000-000000000000"), request_id)
    assert not waiters.event_closes({"type": "request.update", "request": {"id": request_id}}, request_id)


async def test_an_agents_event_ends_its_feed_waits_without_a_read_and_leaves_other_agents_waiting(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever returns early was woken by the push
    agent, _ = agent_with_key
    other, _ = await database_sync_to_async(accounts.create_agent)("bystander", queue_slugs=[])
    request = await database_sync_to_async(make_request)()
    first_looks = counting_first_looks(monkeypatch, "first_look_at_feed")
    feed_reads = counting_calls(monkeypatch, waiters, "read_feed_heads")
    rounds = counting_calls(monkeypatch, waiters, "read_long_poll_round")
    mine = [asyncio.ensure_future(long_poll.wait_for_feed(agent.pk, 0, 25)) for _ in range(3)]
    theirs = asyncio.ensure_future(long_poll.wait_for_feed(other.pk, 0, 25))
    await until(lambda: len(first_looks) == 4)
    reads_before = len(feed_reads)  # the first looks

    await answer(request, "decline")
    await asyncio.wait_for(asyncio.gather(*mine), timeout=10)

    assert not theirs.done()  # the event was this agent's: nobody else's cursor moved
    # No database read after the push.
    assert len(first_looks) == 4 and len(feed_reads) == reads_before and rounds == []
    theirs.cancel()


async def test_a_revoked_or_rotated_away_key_closes_its_sockets_through_the_batched_recheck(
    open_socket: OpenSocket,
    agent_with_key: tuple[Agent, str],
    make_agent: Callable[..., tuple[Agent, str]],
    queue: Any,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.AGENT_SOCKET_RECHECK_SECONDS = 1
    agent, key = agent_with_key
    other, other_key = await database_sync_to_async(make_agent)("agent-rotated", queue)
    revoked_sockets = [await open_socket(key) for _ in range(3)]
    rotated_away = await open_socket(other_key)
    pushes_lost(monkeypatch)  # the revocation's push too
    lookups = counting_calls(monkeypatch, waiters, "read_socket_heads")

    await database_sync_to_async(accounts.revoke_agent)(agent)
    new_key = await database_sync_to_async(accounts.rotate_agent_key)(other)
    kept = await open_socket(new_key)

    for socket in [*revoked_sockets, rotated_away]:
        assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": 4401}
    assert lookups  # found by the hub's batched look-up (the push never left)
    await kept.send_json_to({"type": "ping"})
    assert await kept.receive_json_from(timeout=3) == {"type": "pong"}
    assert await kept.receive_nothing(timeout=2.5)  # its key is the current one: it stays open


async def test_a_bad_request_id_in_a_batch_does_not_spoil_the_others(
    agent: Agent, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = await database_sync_to_async(make_request)()
    still_open = await database_sync_to_async(waiters.read_long_poll_round)(
        [str(request.pk), "not-a-uuid", "00000000-0000-0000-0000-000000000000"], [agent.pk]
    )
    assert still_open.still_open == {str(request.pk)}
    assert still_open.heads == {agent.pk: 0}


async def test_agents_share_their_shards_memberships_and_a_push_wakes_only_its_own_agent(
    make_agent: Callable[..., tuple[Agent, str]],
    queue: Any,
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Three agents on two shards: two layer memberships for three agents' waits, and the push for one agent of a
    shared shard ends its wait and not its shard-mate's."""
    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever returns early was woken by the push
    monkeypatch.setattr(pushes, "AGENT_SHARDS", 2)
    calls = layer_calls(monkeypatch, "group_add")
    made = [await database_sync_to_async(make_agent)(f"shard-{n}", queue) for n in range(3)]
    agents = [agent for agent, _ in made]
    assert pushes.layer_group(pushes.agent_group(agents[0].pk)) == pushes.layer_group(
        pushes.agent_group(agents[2].pk)
    )

    def request_of(agent: Agent) -> ElicitationRequest:
        from elicitation.queue import transitions

        request, _ = transitions.create_request(
            agent=agent, queue_slug=queue.slug, message="m", mode="url", url="https://a.example/x"
        )
        return request

    requests = [await database_sync_to_async(request_of)(agent) for agent in agents]
    waits = [
        asyncio.ensure_future(long_poll.wait_for_request(agent.pk, request.pk, 25))
        for agent, request in zip(agents, requests, strict=True)
    ]
    await until(
        lambda: len(calls) == 2 and all(waiters.hub().is_joined(pushes.agent_group(a.pk)) for a in agents)
    )
    assert sorted(group for _, group in calls) == ["agents.0", "agents.1"]

    await answer(requests[0], "decline")
    await asyncio.wait_for(waits[0], timeout=10)
    assert (
        not waits[2].done() and not waits[1].done()
    )  # the same push reached the shard-mate's listener: ignored

    for request in requests[1:]:
        await answer(request, "decline")
    await asyncio.wait_for(asyncio.gather(*waits[1:]), timeout=10)
    assert len(calls) == 2
