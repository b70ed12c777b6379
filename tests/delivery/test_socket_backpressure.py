"""A slow agent socket: its send buffer stays at its bound, it is closed with 4008, and a new socket that resumes
from the last cursor the slow one delivered gets every later event exactly once.

The harness plays the ASGI server: `UvicornLikeSend` awaits like uvicorn's `send` (it blocks once the peer stops
reading).
"""

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async

from elicitation.delivery import socket_base
from elicitation.delivery.agent_socket import AgentWaitConsumer
from elicitation.delivery.socket_base import CLOSE_TOO_SLOW, SendBuffer
from elicitation.models import Agent, ElicitationRequest
from tests.delivery.conftest import Socket

pytestmark = pytest.mark.django_db(transaction=True)

BOUND = 20
ANSWERS = 30
Answer = Callable[..., Awaitable[ElicitationRequest]]


class UvicornLikeSend:
    """Hands the first `readable` frames to a peer that then stops reading: later sends (the close too) block."""

    def __init__(self, readable: int) -> None:
        self.readable = readable
        self.delivered: list[dict[str, Any]] = []
        self.attempted: list[dict[str, Any]] = []
        self.never = asyncio.Event()

    async def __call__(self, message: dict[str, Any]) -> None:
        self.attempted.append(message)
        if message["type"] == "websocket.send":
            if self.readable <= 0:
                await self.never.wait()
            self.readable -= 1
        self.delivered.append(message)


def socket_scope(key: str) -> dict[str, Any]:
    return {
        "type": "websocket",
        "path": "/ws/agent/",
        "raw_path": b"/ws/agent/",
        "query_string": b"",
        "headers": [(b"authorization", f"Bearer {key}".encode())],
        "subprotocols": [],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
    }


def cursors(messages: list[dict[str, Any]]) -> list[int]:
    frames = [json.loads(m["text"]) for m in messages if m["type"] == "websocket.send"]
    return [frame["cursor"] for frame in frames if frame.get("type") == "completed"]


@pytest.fixture(autouse=True)
def small_buffer(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    settings.SOCKET_SEND_BUFFER_FRAMES = BOUND
    settings.SOCKET_SEND_BUFFER_BYTES = 1024 * 1024
    monkeypatch.setattr(socket_base, "CLOSE_GRACE_SECONDS", 0.2)


async def open_slow_socket(key: str, send: Any) -> tuple[AgentWaitConsumer, "asyncio.Task[None]"]:
    """A socket that resumes from 0 (nothing to replay yet) through `send`, then waits for pushes."""
    incoming: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    incoming.put_nowait({"type": "websocket.connect"})
    incoming.put_nowait({"type": "websocket.receive", "text": json.dumps({"type": "resume", "after": 0})})
    consumer = AgentWaitConsumer()
    app = asyncio.ensure_future(consumer(socket_scope(key), incoming.get, send))
    for _ in range(200):
        if getattr(consumer, "resumed", False) and not consumer.catching_up:
            break
        await asyncio.sleep(0.01)
    assert consumer.resumed and not consumer.catching_up
    return consumer, app


async def answer_all_watching_the_buffer(
    consumer: AgentWaitConsumer, requests: list[ElicitationRequest], answer: Answer
) -> int:
    """Answer every request; returns the most frames the slow socket ever held, recorded at each `put` (sampling
    between answers misses the peak when a loaded machine delivers two pushes in one sample). Returns once every
    push has reached the consumer and either the buffer overflowed or the writer handed every frame on."""
    buffer = consumer.send_buffer
    peak = pushed = 0
    put = buffer.put

    def put_recording_the_peak(message: dict[str, Any]) -> bool:
        nonlocal peak, pushed
        pushed += (
            message.get("type") == "websocket.send" and json.loads(message["text"])["type"] == "completed"
        )
        fitted = put(message)
        peak = max(peak, len(buffer))
        return fitted

    buffer.put = put_recording_the_peak  # type: ignore[method-assign]
    for request in requests:
        await answer(request)
        await asyncio.sleep(0.02)  # pushes arrive spread out, as answers do

    async def settled() -> None:
        while not (buffer.overflowed or (pushed == len(requests) and not len(buffer))):
            await asyncio.sleep(0.01)

    await asyncio.wait_for(settled(), timeout=30)
    return peak


async def resume_elsewhere(open_socket: Callable[..., Awaitable[Socket]], key: str, after: int) -> list[int]:
    fresh = await open_socket(key)
    await fresh.send_json_to({"type": "resume", "after": after})
    got = []
    while (frame := await fresh.receive_json_from(timeout=5))["type"] != "resumed":
        got.append(frame["cursor"])
    assert frame == {"type": "resumed", "cursor": ANSWERS}
    assert await fresh.receive_nothing(timeout=0.3)
    return got


async def test_a_socket_whose_client_stops_reading_is_closed_with_4008_at_its_bound_and_resumes_elsewhere(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    open_socket: Callable[..., Awaitable[Socket]],
) -> None:
    _, key = agent_with_key
    requests = [await database_sync_to_async(make_request)() for _ in range(ANSWERS)]
    send = UvicornLikeSend(readable=5)  # hello, resumed and three events
    consumer, app = await open_slow_socket(key, send)

    peak = await answer_all_watching_the_buffer(consumer, requests, answer)
    await asyncio.wait_for(app, timeout=30)  # the consumer ends by itself: the peer never read the close

    assert peak == BOUND  # filled to the bound, never past it
    assert len(consumer.send_buffer) == 0  # dropped on giving up
    assert send.attempted[-1] == {"type": "websocket.close", "code": CLOSE_TOO_SLOW}
    delivered = cursors(send.delivered)
    assert delivered == [1, 2, 3]
    assert await resume_elsewhere(open_socket, key, after=delivered[-1]) == list(range(4, ANSWERS + 1))


async def test_a_reader_that_keeps_up_is_never_closed(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
) -> None:
    _, key = agent_with_key
    requests = [await database_sync_to_async(make_request)() for _ in range(ANSWERS)]
    send = UvicornLikeSend(readable=10_000)
    consumer, app = await open_slow_socket(key, send)

    await answer_all_watching_the_buffer(consumer, requests, answer)

    assert cursors(send.delivered) == list(range(1, ANSWERS + 1))
    assert not consumer.given_up and not app.done()
    app.cancel()
    await asyncio.wait([app])


def test_the_buffer_admits_one_oversized_frame_but_nothing_past_its_bounds() -> None:
    buffer = SendBuffer(max_frames=3, max_bytes=100)
    big = {"type": "websocket.send", "text": "x" * 500}
    assert buffer.put({"type": "websocket.accept"})  # control messages are not counted
    assert buffer.put(big)  # alone it fits, or it could never be sent
    assert not buffer.put({"type": "websocket.send", "text": "y"})  # past the byte bound
    assert buffer.overflowed and len(buffer) == 0 and buffer.bytes == 0
    assert not buffer.put({"type": "websocket.send", "text": "z"})  # for good

    counted = SendBuffer(max_frames=3, max_bytes=10_000)
    for _ in range(3):
        assert counted.put({"type": "websocket.send", "text": "{}"})
    assert not counted.put({"type": "websocket.send", "text": "{}"})
