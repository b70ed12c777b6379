"""Long-polls under a real ASGI server: hundreds of waiting agents cost no threads, and an answer still reaches
its waiter at once."""

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import accounts, transitions
from tests.answers import answer_of
from tests.conftest import FORM_SCHEMA
from tests.delivery.liveserver import LiveServer, answer_through_api

pytestmark = pytest.mark.django_db(transaction=True)

WAITERS = 200
AGENTS = 4


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[LiveServer]:
    # A recheck far longer than the tests: whatever returns early was woken by a push.
    live = LiveServer(env={"LONG_POLL_RECHECK_SECONDS": "30"}).start()
    yield live
    live.stop()


def make_agents(queue: Queue) -> list[tuple[Agent, str]]:
    return [accounts.create_agent(f"poller-{n}", queue_slugs=[queue.slug]) for n in range(AGENTS)]


def make_requests(agent: Agent, queue: Queue, count: int) -> list[ElicitationRequest]:
    return [
        transitions.create_request(
            agent=agent, queue_slug=queue.slug, message=f"q{n}", mode="form", requested_schema=FORM_SCHEMA
        )[0]
        for n in range(count)
    ]


@pytest.mark.slow
def test_200_concurrent_long_polls_hold_no_threads_and_an_answer_gets_through_at_once(
    server: LiveServer, queue: Queue, reviewer: Any
) -> None:
    agents = make_agents(queue)
    per_agent = (WAITERS - AGENTS) // AGENTS  # one feed long-poll per agent, the rest wait on requests
    requests = {agent.pk: make_requests(agent, queue, per_agent) for agent, _ in agents}
    token = accounts.create_reviewer_token(reviewer)
    target_agent, _target_key = agents[0]
    target = requests[target_agent.pk][0]
    threads_idle = server.threads()

    async def scenario() -> dict[str, Any]:
        limits = httpx.Limits(max_connections=WAITERS + 20, max_keepalive_connections=WAITERS + 20)
        clients = {
            agent.pk: httpx.AsyncClient(
                base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=60, limits=limits
            )
            for agent, key in agents
        }
        polls: dict[str, asyncio.Task[httpx.Response]] = {}
        for agent, _ in agents:
            client = clients[agent.pk]
            for request in requests[agent.pk]:
                polls[str(request.pk)] = asyncio.create_task(
                    client.get(f"/api/v1/requests/{request.pk}", params={"wait": 30})
                )
            polls[f"feed-{agent.pk}"] = asyncio.create_task(
                client.get("/api/v1/events", params={"after": 0, "wait": 30})
            )
        assert len(polls) == WAITERS
        await asyncio.sleep(2)  # every poll is in and waiting
        early = [key for key, task in polls.items() if task.done()]
        threads_waiting = server.threads()

        await asyncio.to_thread(answer_through_api, server.url, token, target.pk, "decline")
        answered_at = time.monotonic()
        detail = await polls[str(target.pk)]
        detail_latency = time.monotonic() - answered_at
        feed = await polls[f"feed-{target_agent.pk}"]
        feed_latency = time.monotonic() - answered_at
        await asyncio.sleep(0.3)
        still_waiting = sum(1 for task in polls.values() if not task.done())
        for task in polls.values():
            task.cancel()
        await asyncio.gather(*polls.values(), return_exceptions=True)
        for client in clients.values():
            await client.aclose()
        return {
            "early": early,
            "threads_waiting": threads_waiting,
            "detail": detail,
            "detail_latency": detail_latency,
            "feed": feed,
            "feed_latency": feed_latency,
            "still_waiting": still_waiting,
        }

    outcome = asyncio.run(scenario())

    assert outcome["early"] == []
    # One thread per waiter would be 200+; a handful serve them all.
    assert outcome["threads_waiting"] <= threads_idle + 16, (threads_idle, outcome["threads_waiting"])
    assert outcome["detail"].status_code == 200
    assert answer_of(outcome["detail"].json()["result"]) == {"action": "decline"}
    # Milliseconds when the machine is idle (see the printout); generous here so a loaded CI box cannot flake.
    assert outcome["detail_latency"] < 5, outcome["detail_latency"]
    assert outcome["feed"].status_code == 200
    assert [(e["id"], e["type"]) for e in outcome["feed"].json()["events"]] == [(str(target.pk), "completed")]
    assert outcome["feed_latency"] < 5, outcome["feed_latency"]
    # Nobody else was woken: the other 198 still wait.
    assert outcome["still_waiting"] == WAITERS - 2
    print(
        f"\n{WAITERS} long-polls: threads idle={threads_idle} waiting={outcome['threads_waiting']}; "
        f"answer->detail {outcome['detail_latency'] * 1000:.0f} ms, answer->feed {outcome['feed_latency'] * 1000:.0f} ms"
    )


def test_a_long_poll_with_a_bad_cursor_or_key_is_answered_at_once(server: LiveServer, agent: Agent) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        started = time.monotonic()
        unauthenticated = http.get("/api/v1/events", params={"after": 0, "wait": 30})
        bad_cursor = http.get(
            "/api/v1/events",
            params={"after": "x", "wait": 30},
            headers={"Authorization": "Bearer rh_00000000_wrong"},
        )
        assert time.monotonic() - started < 2
    assert unauthenticated.status_code == 401
    assert bad_cursor.status_code == 401


def test_a_long_poll_times_out_with_the_current_state(
    server: LiveServer, agent_with_key: tuple[Agent, str], queue: Queue
) -> None:
    agent, key = agent_with_key
    [request] = make_requests(agent, queue, 1)
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=10) as http:
        started = time.monotonic()
        detail = http.get(f"/api/v1/requests/{request.pk}", params={"wait": 1})
        feed = http.get("/api/v1/events", params={"after": 0, "wait": 1})
        elapsed = time.monotonic() - started
    assert detail.json()["status"] == "pending"
    assert feed.json() == {"events": [], "cursor": 0}
    assert 1.9 <= elapsed < 5
