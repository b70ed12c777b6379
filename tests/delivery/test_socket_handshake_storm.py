"""A reconnect storm on one process: every handshake is answered (hello, 4401 for a bad key, or 4013 "try again
later" past the queue bound, before any database work), and the handshakes' key and head reads are made together,
a few queries for hundreds of handshakes (counted, not timed)."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from elicitation.delivery import agent_socket, socket_base, waiters
from elicitation.models import Agent, ElicitationRequest
from reviewhub.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

T = TypeVar("T")
SOCKETS = 200
BAD_KEYS = 20
Answer = Callable[..., Awaitable[ElicitationRequest]]


class ReadCount:
    """Wraps a batched read: how many times it ran, and how many keys it was asked for in all."""

    def __init__(self, read: Callable[[list[Any]], dict[Any, Any]]) -> None:
        self.read = read
        self.calls = 0
        self.keys = 0

    def __call__(self, keys: list[Any]) -> dict[Any, Any]:
        self.calls += 1
        self.keys += len(keys)
        return self.read(keys)


class LookUpCount:
    """Counts the look-ups handed to the waiter hub's spaced reads (a key check or a head read each)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        real = waiters.SpacedReads.look_up

        async def counted(reads: waiters.SpacedReads[Any, Any], key: Any) -> Any:
            self.calls += 1
            return await real(reads, key)

        monkeypatch.setattr(waiters.SpacedReads, "look_up", counted)


async def handshake(key: str) -> tuple[WebsocketCommunicator, dict[str, Any]]:
    socket = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Bearer {key}".encode())]
    )
    connected, _ = await socket.connect(timeout=30)
    assert connected
    return socket, await socket.receive_output(timeout=30)


@pytest.mark.slow
async def test_two_hundred_concurrent_handshakes_all_get_hello_from_a_few_batched_reads(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.AGENT_SOCKET_HANDSHAKE_QUEUE = 1000  # all of them may wait: this test counts the reads
    monkeypatch.setattr(agent_socket, "KEY_READ_SPACING", 0.5)
    _, key = agent_with_key
    await answer(await database_sync_to_async(make_request)())
    key_reads = ReadCount(agent_socket.agents_for_keys)
    monkeypatch.setattr(agent_socket, "agents_for_keys", key_reads)
    head_reads = ReadCount(waiters.read_socket_heads)
    monkeypatch.setattr(waiters, "read_socket_heads", head_reads)
    bad_key = key[:-4] + "nope"
    keys = [key] * SOCKETS + [bad_key] * BAD_KEYS

    results = await asyncio.gather(*(handshake(k) for k in keys))

    try:
        firsts = [first for _, first in results]
        hellos = [f for f in firsts[:SOCKETS] if f.get("type") == "websocket.send"]
        assert len(hellos) == SOCKETS
        assert {h["text"] for h in hellos} == {'{"type": "hello", "cursor": 1}'}
        assert firsts[SOCKETS:] == [{"type": "websocket.close", "code": 4401}] * BAD_KEYS
        # 220 key checks and 200 head reads, made together: each read covers many handshakes (one query per
        # 500 keys), so the reads are a handful, not one or two per handshake.
        assert 1 <= key_reads.calls <= 10 and 1 <= head_reads.calls <= 10
        assert key_reads.keys <= 2 * key_reads.calls  # the same two keys, read once per batch
    finally:
        await asyncio.gather(*(socket.disconnect() for socket, _ in results))


async def test_a_socket_opened_during_a_storm_still_gets_its_pushes(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
) -> None:
    settings.AGENT_SOCKET_HANDSHAKE_CONCURRENCY = 1
    settings.AGENT_SOCKET_HANDSHAKE_QUEUE = 1000
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    results = await asyncio.gather(*(handshake(key) for _ in range(50)))
    try:
        socket = results[-1][0]
        await socket.send_json_to({"type": "resume", "after": 0})
        assert await socket.receive_json_from(timeout=5) == {"type": "resumed", "cursor": 0}
        await answer(request)
        assert (await socket.receive_json_from(timeout=5))["cursor"] == 1
    finally:
        await asyncio.gather(*(socket.disconnect() for socket, _ in results))


async def test_past_the_queue_bound_a_handshake_is_refused_with_4013_before_any_database_work(
    agent_with_key: tuple[Agent, str],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.AGENT_SOCKET_HANDSHAKE_QUEUE = 5
    _, key = agent_with_key
    look_ups = LookUpCount(monkeypatch)

    results = await asyncio.gather(*(handshake(key) for _ in range(60)))

    try:
        firsts = [first for _, first in results]
        refused = [f for f in firsts if f == {"type": "websocket.close", "code": 4013}]
        hellos = [f for f in firsts if f.get("type") == "websocket.send"]
        assert len(refused) + len(hellos) == 60  # every handshake answered, one way or the other
        assert refused and len(hellos) >= 5
        assert look_ups.calls == 2 * len(hellos)  # key and head; a refused handshake read nothing
        # The storm over, the refused come back and are greeted.
        socket, again = await handshake(key)
        await socket.disconnect()
        assert again["type"] == "websocket.send" and '"hello"' in again["text"]
    finally:
        await asyncio.gather(*(socket.disconnect() for socket, _ in results))


async def test_while_layer_subscribes_queue_up_a_handshake_is_refused_before_any_layer_work(
    agent_with_key: tuple[Agent, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, key = agent_with_key
    look_ups = LookUpCount(monkeypatch)
    listened: list[str] = []
    real_listen = waiters.WaiterHub.listen

    async def counted_listen(hub: waiters.WaiterHub, group: str, listener: Any) -> None:
        listened.append(group)
        await real_listen(hub, group, listener)

    monkeypatch.setattr(waiters.WaiterHub, "listen", counted_listen)
    gate = socket_base.membership_gate()
    gate.waiting = agent_socket.MEMBERSHIP_BACKLOG_LIMIT + 1  # a storm's joins queued ahead of this one
    try:
        socket, first = await handshake(key)
        await socket.disconnect()
    finally:
        gate.waiting = 0
    assert first == {"type": "websocket.close", "code": 4013}
    assert listened == [] and look_ups.calls == 0  # no group joined, no database work

    socket, first = await handshake(key)  # the queue drained: greeted
    await socket.disconnect()
    assert first["type"] == "websocket.send" and '"hello"' in first["text"]
    assert len(listened) == 1


async def test_a_loop_running_late_makes_the_gate_refuse_until_it_catches_up() -> None:
    agent_socket._handshake_gates.clear()
    gate = agent_socket.handshake_gate()
    assert not gate.full
    time.sleep(agent_socket.LOOP_LAG_LIMIT_SECONDS + 0.3)  # the loop is blocked: its callbacks run late
    await asyncio.sleep(0.01)
    assert gate.loop_lag > agent_socket.LOOP_LAG_LIMIT_SECONDS and gate.full
    await asyncio.sleep(agent_socket.LOOP_LAG_PROBE_SECONDS * 3)  # on time again
    assert gate.loop_lag < agent_socket.LOOP_LAG_LIMIT_SECONDS and not gate.full


# --- the resumes and subscribes after the hellos ------------------------------------------------------------------


@pytest.fixture
def resume_reads(monkeypatch: pytest.MonkeyPatch) -> ReadCount:
    """The sockets' outbox reads on resume, counted."""
    reads = ReadCount(agent_socket.events_after)
    monkeypatch.setattr(agent_socket, "events_after", reads)
    return reads


AGENTS = 4
SOCKETS_PER_AGENT = 10


async def test_the_resumes_and_subscribes_of_a_storm_are_read_together_and_each_socket_gets_its_own(
    make_agent: Callable[..., tuple[Agent, str]],
    queue: Any,
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    resume_reads: ReadCount,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Four agents with two answered requests and one open each; ten sockets of each resume from 0 and subscribe
    to all three at once: every socket gets its own agent's events in order, its `resumed` and its replies, from
    a handful of reads rather than one outbox read and one subscribe read per socket."""
    settings.AGENT_SOCKET_HANDSHAKE_QUEUE = 1000
    monkeypatch.setattr(agent_socket, "RESUME_READ_SPACING", 0.5)
    monkeypatch.setattr(agent_socket, "SUBSCRIBE_READ_SPACING", 0.5)
    agents = [await database_sync_to_async(make_agent)(f"storm-{n}", queue) for n in range(AGENTS)]
    asked: dict[str, list[str]] = {}
    for agent, key in agents:
        made = [await database_sync_to_async(make_request)(agent=agent) for _ in range(3)]
        for request in made[:2]:
            await answer(request)
        asked[key] = [str(request.pk) for request in made]
    subscribe_reads = ReadCount(agent_socket.subscriptions_replies)
    monkeypatch.setattr(agent_socket, "subscriptions_replies", subscribe_reads)
    keys = [key for _, key in agents for _ in range(SOCKETS_PER_AGENT)]
    results = await asyncio.gather(*(handshake(key) for key in keys))

    async def resume_and_subscribe(socket: WebsocketCommunicator, key: str) -> list[dict[str, Any]]:
        await socket.send_json_to({"type": "resume", "after": 0})
        frames = [await socket.receive_json_from(timeout=30)]
        while frames[-1]["type"] != "resumed":
            frames.append(await socket.receive_json_from(timeout=30))
        await socket.send_json_to({"type": "subscribe", "ids": asked[key]})
        return frames + [await socket.receive_json_from(timeout=30) for _ in asked[key]]

    try:
        frames = await asyncio.gather(
            *(resume_and_subscribe(socket, key) for (socket, _), key in zip(results, keys, strict=True))
        )
        for key, got in zip(keys, frames, strict=True):
            answered, still_open = asked[key][:2], asked[key][2]
            streamed, replies = got[:3], got[3:]
            assert [(f["type"], f.get("id"), f["cursor"]) for f in streamed] == [
                ("completed", answered[0], 1),
                ("completed", answered[1], 2),
                ("resumed", None, 2),
            ]
            # Already streamed: the subscribe answers with the closed state, not the event again.
            assert [(f["type"], f["id"], f["status"]) for f in replies] == [
                ("state", answered[0], "completed"),
                ("state", answered[1], "completed"),
                ("state", still_open, "pending"),
            ]
        assert 1 <= resume_reads.calls <= 6 and 1 <= subscribe_reads.calls <= 6
    finally:
        await asyncio.gather(*(socket.disconnect() for socket, _ in results))


async def test_a_resume_from_the_hellos_head_is_answered_without_reading_the_outbox(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    resume_reads: ReadCount,
) -> None:
    _, key = agent_with_key
    await answer(await database_sync_to_async(make_request)())
    later = await database_sync_to_async(make_request)()
    socket, hello = await handshake(key)
    try:
        assert hello["text"] == '{"type": "hello", "cursor": 1}'
        await socket.send_json_to({"type": "resume", "after": 1})
        assert await socket.receive_json_from(timeout=5) == {"type": "resumed", "cursor": 1}
        assert resume_reads.calls == 0
        await answer(later)  # and the stream goes on from there, by push
        assert (await socket.receive_json_from(timeout=5))["cursor"] == 2
    finally:
        await socket.disconnect()


async def test_an_event_pushed_between_hello_and_resume_is_read_and_sent_before_resumed(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    resume_reads: ReadCount,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    handled = asyncio.Event()
    real_handler = agent_socket.AgentWaitConsumer.agent_event

    async def noting(consumer: agent_socket.AgentWaitConsumer, message: dict[str, Any]) -> None:
        await real_handler(consumer, message)
        handled.set()

    monkeypatch.setattr(agent_socket.AgentWaitConsumer, "agent_event", noting)
    socket, hello = await handshake(key)
    try:
        assert hello["text"] == '{"type": "hello", "cursor": 0}'
        await answer(request)  # pushed before the resume: not sent then, so the resume must not skip it
        await asyncio.wait_for(handled.wait(), 5)
        await socket.send_json_to({"type": "resume", "after": 0})
        assert [(await socket.receive_json_from(timeout=5)).get("cursor") for _ in range(2)] == [1, 1]
        assert resume_reads.calls >= 1
    finally:
        await socket.disconnect()


async def test_with_the_layer_resting_a_resume_from_the_head_reads_the_outbox(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    resume_reads: ReadCount,
) -> None:
    _, key = agent_with_key
    await answer(await database_sync_to_async(make_request)())
    socket, _ = await handshake(key)
    try:
        waiters.hub().layer_failed()  # a push may have been lost: nothing is known without reading
        await socket.send_json_to({"type": "resume", "after": 1})
        assert await socket.receive_json_from(timeout=5) == {"type": "resumed", "cursor": 1}
        assert resume_reads.calls == 1
    finally:
        await socket.disconnect()


def test_events_after_many_pages_each_cursor_on_its_own(
    make_agent: Callable[..., tuple[Agent, str]], queue: Any
) -> None:
    """Two sockets of one agent at different cursors, in one batch: each gets the first `limit` events past its
    own cursor (not past the lower one's); an agent with nothing new gets an empty page."""
    from elicitation.queue import selectors, transitions

    (busy, _), (quiet, _) = make_agent("busy", queue), make_agent("quiet", queue)
    for _ in range(5):
        request, _ = transitions.create_request(
            agent=busy, queue_slug=queue.slug, message="m", mode="url", url="https://a.example/x"
        )
        transitions.withdraw_request(request.pk, agent=busy)
    pages = selectors.agent_events_after_many([(busy.pk, 0), (busy.pk, 2), (quiet.pk, 0)], limit=2)
    assert {pair: [e.seq for e in events] for pair, events in pages.items()} == {
        (busy.pk, 0): [1, 2],
        (busy.pk, 2): [3, 4],
        (quiet.pk, 0): [],
    }


async def test_socket_frames_and_pushes_make_no_hop_to_the_shared_sync_thread(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Channels closes stale connections before every handler on the process's one thread-sensitive thread; these
    sockets never use that thread, so a storm's frames must not queue on it."""
    import channels.consumer

    hops: list[None] = []

    async def counted() -> None:
        hops.append(None)

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted)
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    socket, _ = await handshake(key)
    try:
        await socket.send_json_to({"type": "resume", "after": 0})
        assert (await socket.receive_json_from(timeout=5))["type"] == "resumed"
        for _ in range(3):
            await socket.send_json_to({"type": "ping"})
            assert await socket.receive_json_from(timeout=5) == {"type": "pong"}
        await answer(request)
        assert (await socket.receive_json_from(timeout=5))["cursor"] == 1
        assert hops == []
    finally:
        await socket.disconnect()
