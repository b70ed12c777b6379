"""Scale-out (services leg): two ASGI processes share PostgreSQL and Redis. An agent connected to one hears, at
once, an answer given through the other; a ticket issued by one is spent for both."""

import asyncio
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from elicitation.models import Agent, Queue
from elicitation.queue import accounts, transitions
from tests.answers import answer_of
from tests.conftest import FORM_SCHEMA
from tests.delivery.liveserver import LiveServer, answer_through_api, closing_connection, start_all

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

# Rechecks far longer than the tests: anything that arrives fast crossed processes through Redis.
SLOW_RECHECKS = {"AGENT_SOCKET_RECHECK_SECONDS": "60", "LONG_POLL_RECHECK_SECONDS": "60"}


@pytest.fixture(scope="module")
def two_servers(django_db_setup: None) -> Iterator[tuple[LiveServer, LiveServer]]:
    env = {**SLOW_RECHECKS, "REDIS_URL": os.environ["REDIS_URL"]}
    a, b = LiveServer(env=env), LiveServer(env=env)
    start_all(a, b)
    yield a, b
    a.stop()
    b.stop()


def new_request(agent: Agent, queue: Queue) -> Any:
    return transitions.create_request(
        agent=agent,
        queue_slug=queue.slug,
        message="Cross-process?",
        mode="form",
        requested_schema=FORM_SCHEMA,
    )[0]


def test_an_answer_given_through_one_process_reaches_a_socket_on_the_other_at_once(
    two_servers: tuple[LiveServer, LiveServer], agent_with_key: tuple[Agent, str], queue: Queue, reviewer: Any
) -> None:
    a, b = two_servers
    agent, key = agent_with_key
    request = new_request(agent, queue)
    token = accounts.create_reviewer_token(reviewer)

    async def scenario() -> tuple[dict[str, Any], float]:
        async with connect(
            f"{a.ws_url}/ws/agent/", additional_headers={"Authorization": f"Bearer {key}"}
        ) as ws:
            assert json.loads(await ws.recv())["type"] == "hello"
            await ws.send(json.dumps({"type": "subscribe", "ids": [str(request.pk)]}))
            assert json.loads(await ws.recv())["status"] == "pending"
            await asyncio.to_thread(answer_through_api, b.url, token, request.pk, "accept", {"approve": True})
            answered_at = time.monotonic()
            message = json.loads(await asyncio.wait_for(ws.recv(), timeout=10))
            return message, time.monotonic() - answered_at

    message, latency = asyncio.run(scenario())

    assert (message["type"], message["id"], answer_of(message["result"])) == (
        "completed",
        str(request.pk),
        {"action": "accept", "content": {"approve": True}},
    )
    assert latency < 5, latency  # pushed through Redis (milliseconds when idle), not the 60 s recheck


def test_a_long_poll_on_one_process_wakes_for_an_answer_through_the_other(
    two_servers: tuple[LiveServer, LiveServer], agent_with_key: tuple[Agent, str], queue: Queue, reviewer: Any
) -> None:
    a, b = two_servers
    agent, key = agent_with_key
    request = new_request(agent, queue)
    token = accounts.create_reviewer_token(reviewer)

    async def scenario() -> tuple[httpx.Response, float]:
        async with httpx.AsyncClient(
            base_url=a.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        ) as http:
            poll = asyncio.ensure_future(http.get(f"/api/v1/requests/{request.pk}", params={"wait": 50}))
            await asyncio.sleep(1)
            assert not poll.done()
            await asyncio.to_thread(answer_through_api, b.url, token, request.pk, "decline")
            answered_at = time.monotonic()
            response = await poll
            return response, time.monotonic() - answered_at

    response, latency = asyncio.run(scenario())
    assert answer_of(response.json()["result"]) == {"action": "decline"}
    assert latency < 5, latency


def test_revoking_a_key_closes_its_sockets_on_every_process(
    two_servers: tuple[LiveServer, LiveServer], agent_with_key: tuple[Agent, str]
) -> None:
    agent, key = agent_with_key

    async def scenario() -> list[int | None]:
        sockets = [
            await connect(f"{server.ws_url}/ws/agent/", additional_headers={"Authorization": f"Bearer {key}"})
            for server in two_servers
        ]
        for ws in sockets:
            await ws.recv()  # hello
        await asyncio.to_thread(closing_connection(accounts.revoke_agent), agent)
        codes = []
        for ws in sockets:
            try:
                await asyncio.wait_for(ws.recv(), timeout=5)
            except ConnectionClosed as closed:
                codes.append(closed.rcvd.code if closed.rcvd else None)
        return codes

    assert asyncio.run(scenario()) == [4401, 4401]


def test_a_ticket_is_single_use_across_processes(
    two_servers: tuple[LiveServer, LiveServer], agent_with_key: tuple[Agent, str]
) -> None:
    a, b = two_servers
    key = agent_with_key[1]
    ticket = httpx.post(f"{a.url}/api/v1/ws-ticket", headers={"Authorization": f"Bearer {key}"}).json()[
        "ticket"
    ]

    async def scenario() -> tuple[str, int | None]:
        async with connect(f"{b.ws_url}/ws/agent/?ticket={ticket}") as first:
            hello = json.loads(await first.recv())["type"]
            async with connect(f"{a.ws_url}/ws/agent/?ticket={ticket}") as again:
                try:
                    await asyncio.wait_for(again.recv(), timeout=5)
                except ConnectionClosed as closed:
                    return hello, closed.rcvd.code if closed.rcvd else None
        return hello, None

    assert asyncio.run(scenario()) == ("hello", 4401)
