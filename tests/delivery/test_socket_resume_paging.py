"""A resume replays the outbox in pages without holding the socket up: pushes that arrive during the replay are sent
after it in cursor order (never twice, never lost), and another socket's pushes are not held behind it."""

import asyncio
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async

from elicitation.delivery import agent_socket
from elicitation.models import Agent, ElicitationRequest, Queue
from tests.delivery.conftest import Socket

pytestmark = pytest.mark.django_db(transaction=True)

PAGE = 10
STORED = 25  # three pages (10, 10, 5)
LIVE = 3
Answer = Callable[..., Awaitable[ElicitationRequest]]
OpenSocket = Callable[..., Awaitable[Socket]]


class PausedSecondPage:
    """`events_after` whose second page waits (in its database thread) until the test lets it go."""

    def __init__(self) -> None:
        self.pages = 0
        self.paused = threading.Event()
        self.release = threading.Event()
        self.read = agent_socket.events_after

    def __call__(self, cursors: list[tuple[int, int]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
        self.pages += 1
        if self.pages == 2:
            self.paused.set()
            assert self.release.wait(timeout=10)
        return self.read(cursors)


async def wait_for(event: threading.Event) -> None:
    for _ in range(500):
        if event.is_set():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the replay never reached its second page")


async def test_a_resume_over_three_pages_with_pushes_in_the_middle_sends_every_cursor_once_in_order(
    open_socket: OpenSocket,
    agent_with_key: tuple[Agent, str],
    make_agent: Callable[..., tuple[Agent, str]],
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_socket, "REPLAY_BATCH", PAGE)
    _, key = agent_with_key
    new_request = database_sync_to_async(make_request)
    for _ in range(STORED):
        await answer(await new_request())
    live = [await new_request() for _ in range(LIVE)]
    other_agent, other_key = await database_sync_to_async(make_agent)("agent-b", queue)
    theirs = await new_request(agent=other_agent)
    bystander = await open_socket(other_key)
    await bystander.send_json_to({"type": "resume", "after": 0})
    assert await bystander.receive_json_from(timeout=2) == {"type": "resumed", "cursor": 0}

    gate = PausedSecondPage()
    monkeypatch.setattr(agent_socket, "events_after", gate)
    socket = await open_socket(key)
    await socket.send_json_to({"type": "resume", "after": 0})
    received = [await socket.receive_json_from(timeout=2) for _ in range(PAGE)]
    await wait_for(gate.paused)

    # While the replay waits for its second page: pushes for this socket, and one for another agent's socket.
    for request in live:
        await answer(request)
    await answer(theirs)
    pushed = await bystander.receive_json_from(timeout=2)
    assert (pushed["id"], pushed["cursor"]) == (str(theirs.pk), 1)  # not held behind the replay
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=2) == {"type": "pong"}  # nor are this socket's own frames
    gate.release.set()

    while (frame := await socket.receive_json_from(timeout=5))["type"] != "resumed":
        received.append(frame)
    assert [frame["cursor"] for frame in received] == list(range(1, STORED + LIVE + 1))
    assert frame == {"type": "resumed", "cursor": STORED + LIVE}
    assert gate.pages >= 3
    assert await socket.receive_nothing(timeout=0.3)  # nothing twice


async def test_a_push_during_a_replay_that_is_already_in_the_outbox_page_is_not_sent_twice(
    open_socket: OpenSocket,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The losing side of the race: the event commits before the page read, so the page has it and so does the
    push that arrives after it."""
    monkeypatch.setattr(agent_socket, "REPLAY_BATCH", PAGE)
    _, key = agent_with_key
    new_request = database_sync_to_async(make_request)
    for _ in range(PAGE + 2):
        await answer(await new_request())
    late = await new_request()
    gate = PausedSecondPage()
    monkeypatch.setattr(agent_socket, "events_after", gate)
    socket = await open_socket(key)
    await socket.send_json_to({"type": "resume", "after": 0})
    await wait_for(gate.paused)

    await answer(late)  # committed before the paused read runs: the page holds it, and its push arrives too
    gate.release.set()

    received = []
    while (frame := await socket.receive_json_from(timeout=5))["type"] != "resumed":
        received.append(frame["cursor"])
    assert received == list(range(1, PAGE + 4))
    assert frame["cursor"] == PAGE + 3
    assert await socket.receive_nothing(timeout=0.3)


async def test_a_second_resume_during_a_replay_gets_its_own_resumed_and_nothing_twice(
    open_socket: OpenSocket,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agent_socket, "REPLAY_BATCH", PAGE)
    _, key = agent_with_key
    new_request = database_sync_to_async(make_request)
    for _ in range(STORED):
        await answer(await new_request())
    gate = PausedSecondPage()
    monkeypatch.setattr(agent_socket, "events_after", gate)
    socket = await open_socket(key)
    await socket.send_json_to({"type": "resume", "after": 0})
    await wait_for(gate.paused)

    await socket.send_json_to({"type": "resume", "after": 5})  # never backwards: it has 1..10 already
    gate.release.set()

    frames = []
    while len([f for f in frames if f["type"] == "resumed"]) < 2:
        frames.append(await socket.receive_json_from(timeout=5))
    assert [f["cursor"] for f in frames if f["type"] == "completed"] == list(range(1, STORED + 1))
    assert frames[-2:] == [{"type": "resumed", "cursor": STORED}] * 2
    assert await socket.receive_nothing(timeout=0.3)
