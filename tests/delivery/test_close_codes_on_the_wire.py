"""Close codes as the served process really sends them, which the in-process communicator of the other socket tests
never shows: a busy process's refusal must reach the client as 4013, never as 1011 (internal error), or clients take
it for a crash and retry at once."""

import asyncio
import json
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from elicitation.models import Agent
from tests.delivery.liveserver import LiveServer

pytestmark = pytest.mark.django_db(transaction=True)

HANDSHAKES = 40


@pytest.fixture(scope="module")
def one_slot_server(django_db_setup: None) -> Iterator[LiveServer]:
    # One handshake at a time and one waiting: a burst of handshakes is mostly refused.
    server = LiveServer(env={"AGENT_SOCKET_HANDSHAKE_CONCURRENCY": "1", "AGENT_SOCKET_HANDSHAKE_QUEUE": "1"})
    server.start()
    yield server
    server.stop()


async def first_frame_or_close_code(url: str, key: str) -> str | int | None:
    try:
        async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=30) as ws:
            return str(json.loads(await asyncio.wait_for(ws.recv(), 30))["type"])
    except ConnectionClosed as closed:
        return closed.rcvd.code if closed.rcvd is not None else None


@pytest.mark.slow
def test_a_burst_past_the_handshake_queue_is_refused_with_4013_on_the_wire_and_greeted_later(
    one_slot_server: LiveServer, agent_with_key: tuple[Agent, str]
) -> None:
    _, key = agent_with_key
    url = f"{one_slot_server.ws_url}/ws/agent/"

    async def burst() -> list[str | int | None]:
        return list(await asyncio.gather(*(first_frame_or_close_code(url, key) for _ in range(HANDSHAKES))))

    outcomes = asyncio.run(burst())

    assert set(outcomes) <= {"hello", 4013}, outcomes  # never 1011: the refusal is not mistaken for a crash
    assert outcomes.count(4013) >= 1 and outcomes.count("hello") >= 1, outcomes
    assert "invalid close code" not in one_slot_server.logs()
    # The burst over, a refused agent that comes back is greeted.
    assert asyncio.run(first_frame_or_close_code(url, key)) == "hello"
