"""The web server's timeout walk (reviewhub/serve.py): a tenth of daphne's connections every 0.2 s instead of all of
them every 2 s, so 5,000 agent sockets never hold the event loop for one long walk; each connection is still
checked every 2 s (its timeouts enforced, its pings sent)."""

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from elicitation.models import Agent
from reviewhub import serve
from tests.delivery.liveserver import LiveServer


class Connection:
    def __init__(self) -> None:
        self.checks = 0

    def check_timeouts(self) -> None:
        self.checks += 1


class Reactor:
    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Callable[[], None]]] = []

    def callLater(self, delay: float, call: Callable[[], None]) -> None:  # Twisted's name
        self.scheduled.append((delay, call))


@pytest.fixture
def reactor(monkeypatch: pytest.MonkeyPatch) -> Reactor:
    fake = Reactor()
    monkeypatch.setattr(serve, "reactor", fake)
    return fake


def spread_server(connections: list[Connection]) -> Any:
    server = serve.SpreadServer.__new__(serve.SpreadServer)  # daphne's __init__ wants a whole deployment
    server.connections = {connection: {} for connection in connections}
    return server


def test_each_tick_checks_one_slice_and_every_connection_is_checked_once_per_round(reactor: Reactor) -> None:
    connections = [Connection() for _ in range(5000)]
    server = spread_server(connections)

    server.timeout_checker()
    first_tick = sum(connection.checks for connection in connections)
    for _ in range(serve.TIMEOUT_CHECK_SLICES - 1):
        server.timeout_checker()

    assert first_tick == len(connections) / serve.TIMEOUT_CHECK_SLICES
    assert [connection.checks for connection in connections] == [1] * len(connections)
    assert reactor.scheduled[0] == (0.2, server.timeout_checker)
    assert len(reactor.scheduled) == serve.TIMEOUT_CHECK_SLICES


def test_with_no_connections_it_looks_again_at_daphnes_pace_not_every_slice(reactor: Reactor) -> None:
    server = spread_server([])
    server.timeout_checker()
    assert reactor.scheduled == [(serve.TIMEOUT_CHECK_SECONDS, server.timeout_checker)]

    opened = Connection()
    server.connections[opened] = {}
    for _ in range(serve.TIMEOUT_CHECK_SLICES):
        server.timeout_checker()
    assert opened.checks == 1
    assert reactor.scheduled[-1] == (0.2, server.timeout_checker)


def test_a_connection_opened_mid_round_is_checked_in_the_next_and_a_closed_one_no_more(
    reactor: Reactor,
) -> None:
    connections = [Connection() for _ in range(50)]
    server = spread_server(connections)
    server.timeout_checker()
    late, closed = Connection(), connections[-1]
    server.connections[late] = {}
    del server.connections[closed]  # daphne reaps a closed connection from its dict
    for _ in range(2 * serve.TIMEOUT_CHECK_SLICES - 1):
        server.timeout_checker()
    assert late.checks == 1
    assert closed.checks == 0  # its slice came after it was reaped
    assert [connection.checks for connection in connections[:-1]] == [2] * 49


@pytest.fixture(scope="module")
def short_lived_sockets_server(django_db_setup: None) -> Iterator[LiveServer]:
    # daphne's --websocket_timeout closes a socket that old: enforced by the timeout walk, so it shows every
    # connection is reached at the walk's pace.
    server = LiveServer(args=["--websocket_timeout", "2"])
    server.start()
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_served_walk_reaches_every_socket_at_daphnes_pace(
    short_lived_sockets_server: LiveServer, agent_with_key: tuple[Agent, str]
) -> None:
    _, key = agent_with_key
    url = short_lived_sockets_server.ws_url + "/ws/agent/"

    async def seconds_until_closed() -> tuple[float, float]:
        """(seconds from asking to connect, seconds from the hello) until the server closed the socket."""
        asked = time.monotonic()
        async with connect(url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=30) as ws:
            assert json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] == "hello"
            greeted = time.monotonic()
            with pytest.raises(ConnectionClosed):
                while True:
                    await asyncio.wait_for(ws.recv(), 10)
            return time.monotonic() - asked, time.monotonic() - greeted

    async def several() -> list[tuple[float, float]]:
        return list(await asyncio.gather(*(seconds_until_closed() for _ in range(12))))

    lifetimes = asyncio.run(several())
    # daphne counts a socket's age from its connection, which a loaded machine makes before the hello by up to a
    # second or so: never closed before 2 s from asking (0.1 s for daphne's wall clock against this monotonic one),
    # and found within at most two rounds (4 s) of opening, plus 1 s of slack: never left open past that.
    assert all(since_asked >= 1.9 and since_hello <= 5.0 for since_asked, since_hello in lifetimes), lifetimes
