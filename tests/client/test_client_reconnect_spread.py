"""When the server drops its sockets (a restart, a crash, "too slow, resume"), the clients it held do not all
come back in the same instant: each first reconnect waits a uniform random time over the spread window, the
close is never an error for the waits, and the feed resumes from the last cursor.

The server is a stand-in on loopback (the `websockets` server), so the test decides when and how every socket is
closed and sees each reconnect; the real server's restart is tests/client/test_client_reconnect.py."""

import asyncio
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.http11 import Request, Response

from reviewhub_client import AsyncReviewHubClient, ElicitResult
from reviewhub_client import client as client_module
from reviewhub_client.client import CLOSE_RESUME, CLOSE_TRY_AGAIN_LATER, spread_delay, spread_window

WINDOW = 1.0  # seconds: short, so the test is quick; the default is RECONNECT_SPREAD_SECONDS
CLIENTS = 40
ANSWER = {"action": "accept", "content": {"approve": True}}


def request_id(index: int) -> str:
    return f"5b0f1c7e-2222-4a4a-9c9c-{index:012d}"


@dataclass
class DroppingServer:
    """Greets, resumes and subscribes every socket; `drop_all` closes them all at once; `answer` pushes."""

    connections: dict[str, list[ServerConnection]] = field(default_factory=dict)
    upgrades: dict[str, list[float]] = field(default_factory=dict)  # agent key -> upgrade times
    resumes: dict[str, list[int]] = field(default_factory=dict)  # agent key -> `after` of each resume
    ended: dict[str, list[float]] = field(default_factory=dict)  # agent key -> when each connection ended
    polls: int = 0
    url: str = ""
    busy: int = 0  # handshakes still to refuse with 4013 before the hello, as a server in a storm does

    async def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path.startswith("/ws/agent/"):
            key = request.headers["Authorization"].removeprefix("Bearer ")
            self.upgrades.setdefault(key, []).append(time.monotonic())
            return None
        self.polls += 1  # a long-poll: never answered here, so a wait that long-polled would show it
        await asyncio.sleep(0.2)
        response = connection.respond(HTTPStatus.OK, json.dumps({"status": "pending"}))
        response.headers["Content-Type"] = "application/json"
        return response

    async def handler(self, ws: ServerConnection) -> None:
        key = ws.request.headers["Authorization"].removeprefix("Bearer ") if ws.request else ""
        if self.busy:
            self.busy -= 1
            await ws.close(CLOSE_TRY_AGAIN_LATER, "busy")
            return
        self.connections.setdefault(key, []).append(ws)
        await ws.send(json.dumps({"type": "hello", "cursor": 0}))
        try:
            async for raw in ws:
                message = json.loads(raw)
                if message["type"] == "resume":
                    self.resumes.setdefault(key, []).append(int(message["after"]))
                    await ws.send(json.dumps({"type": "resumed", "cursor": int(message["after"])}))
                elif message["type"] == "subscribe":
                    for awaited in message["ids"]:
                        await ws.send(json.dumps({"type": "state", "id": awaited, "status": "pending"}))
        finally:
            self.ended.setdefault(key, []).append(time.monotonic())

    def live(self, key: str) -> ServerConnection:
        return self.connections[key][-1]

    async def drop_all(self, code: int | None) -> None:
        """Close every open socket at once: with `code`, or (None) by cutting TCP as a killed process does."""
        live = [sockets[-1] for sockets in self.connections.values()]
        if code is None:
            for ws in live:
                ws.transport.abort()
        else:
            await asyncio.gather(*(ws.close(code, "going") for ws in live))


@pytest.fixture
async def server() -> AsyncIterator[DroppingServer]:
    fake = DroppingServer()
    async with serve(fake.handler, "127.0.0.1", 0, process_request=fake.process_request) as running:
        port = next(iter(running.sockets)).getsockname()[1]
        fake.url = f"http://127.0.0.1:{port}"
        yield fake


async def eventually(check: Any, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def test_spread_delays_of_many_drops_cover_the_whole_window() -> None:
    delays = [spread_delay(5.0) for _ in range(5000)]
    assert all(0 <= delay <= 5.0 for delay in delays)
    # Counted: every tenth of the window gets its share (~500 each), so no second sees a crowd.
    tenths = [sum(1 for delay in delays if n * 0.5 <= delay < (n + 1) * 0.5) for n in range(10)]
    assert min(tenths) > 350, tenths
    assert max(tenths) < 650, tenths


@pytest.mark.slow
@pytest.mark.parametrize("code", [1001, 1011, 1012, CLOSE_RESUME, None], ids=str)
async def test_clients_dropped_together_reconnect_spread_over_the_window_and_resume(
    server: DroppingServer, code: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[float] = []

    def recorded_spread(window: float) -> float:
        drawn.append(spread_delay(window))
        return drawn[-1]

    monkeypatch.setattr(client_module, "spread_delay", recorded_spread)
    hubs = [AsyncReviewHubClient(server.url, f"rh_key_{n}", timeout=5) for n in range(CLIENTS)]
    keys = [f"rh_key_{n}" for n in range(CLIENTS)]
    try:
        for hub in hubs:
            assert hub._socket is not None
            hub._socket.spread_seconds = WINDOW
        waits = [asyncio.ensure_future(hub.wait(request_id(n), timeout=60)) for n, hub in enumerate(hubs)]
        await eventually(lambda: all(len(server.resumes.get(key, [])) == 1 for key in keys))
        polls_before = server.polls
        assert drawn == []

        await server.drop_all(code)
        await eventually(lambda: all(len(server.resumes.get(key, [])) == 2 for key in keys))

        # Counted, not timed: each client's first reconnect waited one spread draw (not the short backoff), and
        # the draws cover the window: every quarter of it got some of the 40 clients.
        assert len(drawn) == CLIENTS
        quarters = [sum(1 for d in drawn if q * WINDOW / 4 <= d < (q + 1) * WINDOW / 4) for q in range(4)]
        assert all(quarters), quarters
        # Never an error: the waits are still waiting, and waited for the socket instead of long-polling.
        assert not any(w.done() for w in waits)
        assert server.polls == polls_before

        for n in range(CLIENTS):
            frame = {
                "type": "completed",
                "id": request_id(n),
                "cursor": 1,
                "status": "completed",
                "result": ANSWER,
            }
            await server.live(f"rh_key_{n}").send(json.dumps(frame))
        results = await asyncio.wait_for(asyncio.gather(*waits), timeout=20)
        assert results == [ElicitResult("accept", {"approve": True})] * CLIENTS
    finally:
        await asyncio.gather(*(hub.aclose() for hub in hubs))


async def test_too_slow_close_resumes_from_the_last_cursor_and_delivers_what_came_after(
    server: DroppingServer,
) -> None:
    async with AsyncReviewHubClient(server.url, "rh_slow", timeout=5) as hub:
        socket = hub._socket
        assert socket is not None
        socket.spread_seconds = 0.3
        waiting = asyncio.ensure_future(hub.wait(request_id(1), timeout=60))
        await eventually(lambda: socket.connected and server.resumes.get("rh_slow") == [0])
        # Two events arrive (a bystander, cursors 1 and 2), then the server gives up on the slow socket.
        ws = server.live("rh_slow")
        for cursor in (1, 2):
            bystander = {"type": "completed", "id": request_id(9), "cursor": cursor, "status": "completed"}
            await ws.send(json.dumps({**bystander, "result": ANSWER}))
        await eventually(lambda: socket.cursor == 2)
        polls_before = server.polls
        await ws.close(CLOSE_RESUME, "too slow: resume from your cursor")

        await eventually(lambda: server.resumes.get("rh_slow") == [0, 2])
        assert socket.last_close_code == CLOSE_RESUME
        assert not waiting.done()  # not an error
        answered = {"type": "completed", "id": request_id(1), "cursor": 3, "status": "completed"}
        await server.live("rh_slow").send(json.dumps({**answered, "result": ANSWER}))
        assert await asyncio.wait_for(waiting, 20) == ElicitResult("accept", {"approve": True})
        assert socket.cursor == 3
        assert server.polls == polls_before


async def test_a_handshake_refused_with_4013_waits_a_spread_delay_then_is_greeted(
    server: DroppingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn: list[float] = []

    def recorded_spread(window: float) -> float:
        drawn.append(spread_delay(window))
        return drawn[-1]

    monkeypatch.setattr(client_module, "spread_delay", recorded_spread)
    server.busy = 1
    async with AsyncReviewHubClient(server.url, "rh_busy", timeout=5) as hub:
        socket = hub._socket
        assert socket is not None
        socket.spread_seconds = WINDOW
        waiting = asyncio.ensure_future(hub.wait(request_id(1), timeout=60))
        await eventually(lambda: server.resumes.get("rh_busy") == [0])

        assert len(server.upgrades["rh_busy"]) == 2  # refused once, then greeted
        assert (
            len(drawn) == 1 and 0 <= drawn[0] <= WINDOW
        )  # the retry waited a spread draw, not a short backoff
        assert not waiting.done()  # a busy server is not an error
        answered = {"type": "completed", "id": request_id(1), "cursor": 1, "status": "completed"}
        await server.live("rh_busy").send(json.dumps({**answered, "result": ANSWER}))
        assert await asyncio.wait_for(waiting, 20) == ElicitResult("accept", {"approve": True})


async def test_each_4013_in_a_row_doubles_the_spread_window_and_a_greeting_resets_it(
    server: DroppingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    windows: list[float] = []

    def recorded_spread(window: float) -> float:
        windows.append(window)
        return spread_delay(window)

    monkeypatch.setattr(client_module, "spread_delay", recorded_spread)
    server.busy = 3
    async with AsyncReviewHubClient(server.url, "rh_storm", timeout=5) as hub:
        socket = hub._socket
        assert socket is not None
        socket.spread_seconds = 0.05
        waiting = asyncio.ensure_future(hub.wait(request_id(1), timeout=60))
        await eventually(lambda: server.resumes.get("rh_storm") == [0])
        # A storm's refused clients thin out: each retry spreads over twice the window of the one before.
        assert windows == [0.05, 0.1, 0.2]
        assert len(server.upgrades["rh_storm"]) == 4

        # Once greeted, the next drop spreads over the plain window again.
        await server.drop_all(1012)
        await eventually(lambda: server.resumes.get("rh_storm") == [0, 0])
        assert windows == [0.05, 0.1, 0.2, 0.05]
        assert not waiting.done()


def test_the_doubling_stops_at_a_minute() -> None:
    assert [spread_window(5.0, n) for n in range(7)] == [5.0, 5.0, 10.0, 20.0, 40.0, 60.0, 60.0]
    assert spread_window(5.0, 5000) == 60.0  # no overflow, however long the storm
