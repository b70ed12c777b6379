"""The client never gives up on its socket: a refused upgrade (a 5xx, a proxy's 502/503, even a 404) means
long-polling meanwhile and retrying the socket with backoff for the client's whole life.

The server here is a stand-in on loopback (the `websockets` server), so the test controls exactly which upgrade
fails with which status; the real server's side of outages is tests/faults/test_redis_hang.py."""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http import HTTPStatus

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from reviewhub_client import AsyncReviewHubClient, ElicitResult

REQUEST_ID = "5b0f1c7e-1111-4a4a-9c9c-0123456789ab"
ANSWER = {"action": "accept", "content": {"approve": True}}


@dataclass
class StandIn:
    """Refuses the first upgrades with `refusals` (in order), then accepts and answers the subscription."""

    refusals: list[int]
    answer_by_poll_after: float | None = None  # seconds; None: long-polls always say "pending"
    upgrades: list[int] = field(default_factory=list)
    polls: int = 0
    started: float = field(default_factory=time.monotonic)
    url: str = ""

    async def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path.startswith("/ws/agent/"):
            if len(self.upgrades) < len(self.refusals):
                status = self.refusals[len(self.upgrades)]
                self.upgrades.append(status)
                return connection.respond(HTTPStatus(status), "upgrade refused\n")
            self.upgrades.append(101)
            return None
        self.polls += 1
        done = (
            self.answer_by_poll_after is not None
            and time.monotonic() - self.started > self.answer_by_poll_after
        )
        await asyncio.sleep(0 if done else 0.2)  # a short long-poll
        body = {"id": REQUEST_ID, "status": "completed" if done else "pending"}
        if done:
            body["result"] = ANSWER
        response = connection.respond(HTTPStatus.OK, json.dumps(body))
        response.headers["Content-Type"] = "application/json"
        return response

    async def handler(self, ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "hello", "cursor": 0}))
        async for raw in ws:
            message = json.loads(raw)
            if message["type"] == "resume":
                await ws.send(json.dumps({"type": "resumed", "cursor": 0}))
            elif message["type"] == "subscribe":
                await ws.send(json.dumps({"type": "state", "id": REQUEST_ID, "status": "pending"}))
                await asyncio.sleep(0.2)
                event = {
                    "type": "completed",
                    "id": REQUEST_ID,
                    "cursor": 1,
                    "status": "completed",
                    "result": ANSWER,
                }
                await ws.send(json.dumps(event))


@pytest.fixture
async def stand_in(request: pytest.FixtureRequest) -> AsyncIterator[StandIn]:
    fake = StandIn(**request.param)
    async with serve(fake.handler, "127.0.0.1", 0, process_request=fake.process_request) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


@pytest.mark.parametrize("stand_in", [{"refusals": [503, 502, 500, 404, 403, 503]}], indirect=True)
async def test_after_refused_upgrades_of_every_kind_the_socket_comes_back_and_delivers(
    stand_in: StandIn,
) -> None:
    async with AsyncReviewHubClient(stand_in.url, "rh_test_key", timeout=5) as hub:
        result = await asyncio.wait_for(hub.wait(REQUEST_ID, timeout=120), timeout=120)

        socket = hub._socket
        assert socket is not None and not socket.unusable

    assert result == ElicitResult("accept", {"approve": True})
    # Retried after each, never given up; a 403 is the server giving up on a slow handshake (a bad key is
    # accepted and closed with 4401), so it is not an error for the waits either.
    assert stand_in.upgrades == [503, 502, 500, 404, 403, 503, 101]
    assert stand_in.polls >= 1  # waits long-polled while the socket was refused


@pytest.mark.parametrize("stand_in", [{"refusals": [503] * 1000, "answer_by_poll_after": 3.0}], indirect=True)
async def test_while_the_socket_is_refused_the_wait_is_answered_by_long_poll_and_the_socket_still_retried(
    stand_in: StandIn,
) -> None:
    async with AsyncReviewHubClient(stand_in.url, "rh_test_key", timeout=5) as hub:
        result = await hub.wait(REQUEST_ID, timeout=60)

    assert result == ElicitResult("accept", {"approve": True})
    assert len(stand_in.upgrades) >= 3  # backoff with jitter: several attempts in 3 s, not one
    assert set(stand_in.upgrades) == {503}
