"""Fault (services leg): Redis dies while agents wait, so every push in that window is lost. Every agent still
gets every answer, once, through the sockets' outbox recheck and the client's long-poll fallback.

The test runs its own redis-server on a free loopback port (never the machine's shared one), kills it and starts
it again on the same port; both ASGI processes point REDIS_URL at it."""

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from django.db.models import Count

from elicitation.models import AgentEvent, Queue
from elicitation.queue import accounts
from reviewhub_client import AsyncReviewHubClient, ElicitResult
from reviewhub_client.client import AgentSocket
from tests.conftest import FORM_SCHEMA
from tests.delivery.liveserver import LiveServer, RedisServer, answer_through_api, eventually, start_all

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

AGENTS = 4
PER_AGENT = 5


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.kill()


@pytest.fixture
def servers(redis: RedisServer) -> Iterator[list[LiveServer]]:
    # Short rechecks keep the test quick; they are what finds the answers whose pushes were lost.
    env = {"REDIS_URL": redis.url, "AGENT_SOCKET_RECHECK_SECONDS": "2", "LONG_POLL_RECHECK_SECONDS": "1"}
    pair = [LiveServer(env=env), LiveServer(env=env)]
    start_all(*pair)
    yield pair
    for server in pair:
        server.stop()


def test_every_waiting_agent_gets_every_answer_once_through_a_redis_outage(
    servers: list[LiveServer],
    redis: RedisServer,
    queue: Queue,
    reviewer: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    received: dict[int, list[int]] = {}  # per client socket: every cursor it took in
    original = AgentSocket._record

    def record(socket: AgentSocket, cursor: int) -> None:
        received.setdefault(id(socket), []).append(cursor)
        original(socket, cursor)

    monkeypatch.setattr(AgentSocket, "_record", record)
    agents = [accounts.create_agent(f"fault-{n}", queue_slugs=[queue.slug]) for n in range(AGENTS)]
    token = accounts.create_reviewer_token(reviewer)
    timings: dict[str, float] = {}

    async def scenario() -> dict[str, ElicitResult]:
        clients = [
            AsyncReviewHubClient(servers[n % 2].url, key, timeout=5) for n, (_, key) in enumerate(agents)
        ]
        try:
            owner: dict[str, AsyncReviewHubClient] = {}
            for n, client in enumerate(clients):
                for m in range(PER_AGENT):
                    created = await client.create(f"agent {n} question {m}", FORM_SCHEMA, queue=queue.slug)
                    owner[created.id] = client
            waits = {
                rid: asyncio.ensure_future(client.wait(rid, timeout=120)) for rid, client in owner.items()
            }
            sockets = [client._socket for client in clients]
            await eventually(lambda: all(s is not None and s.connected for s in sockets), what="sockets up")
            await asyncio.sleep(0.5)  # subscribed

            ids = list(owner)
            during, after = ids[::2], ids[1::2]
            redis.kill()
            started = time.monotonic()
            for n, rid in enumerate(during):  # through both processes; every push is lost
                content = {"approve": True, "note": rid}
                await asyncio.to_thread(answer_through_api, servers[n % 2].url, token, rid, "accept", content)
            timings["answers while down"] = time.monotonic() - started
            await asyncio.sleep(1)
            redis.start()
            for n, rid in enumerate(after):
                await asyncio.to_thread(answer_through_api, servers[n % 2].url, token, rid, "decline")
            results = dict(zip(waits, await asyncio.gather(*waits.values()), strict=True))
            timings["all answered"] = time.monotonic() - started
            return results
        finally:
            for client in clients:
                await client.aclose()

    results = asyncio.run(scenario())

    assert len(results) == AGENTS * PER_AGENT
    for rid, result in results.items():
        expected = ("accept", {"approve": True, "note": rid}) if result.accepted else ("decline", None)
        assert (result.action, result.content) == expected
    assert Counter(result.action for result in results.values()) == {"accept": 10, "decline": 10}
    # Nothing duplicated: one outbox event per request, and no socket took any cursor in twice.
    per_request = AgentEvent.objects.values("request").annotate(n=Count("id"))
    assert sorted(row["n"] for row in per_request) == [1] * (AGENTS * PER_AGENT)
    for cursors in received.values():
        assert len(cursors) == len(set(cursors)), cursors
    print(f"\nRedis outage: {timings}")  # the measured figures, for the report (-s)
