"""Rate limits counted exactly (api/throttling.py): every call is one atomic count in the shared cache (memory, or
Redis in the services leg), so concurrent clients of one agent get exactly the limit, no call refused before it
and none let through after it."""

import asyncio
import threading
from typing import Any

import pytest

from elicitation.api import throttling
from elicitation.models import Agent
from reviewhub.rates import Rate, parse_rate
from tests.conftest import Clock
from tests.security.test_limits import agent_client

CLIENTS = 4
CALLS_PER_CLIENT = 90  # 360 calls against a limit of 320


def charges_from_threads(ident: str, rate: Rate) -> list[list[int | None]]:
    """Each client, in a thread of its own, is counted as fast as it can once all are ready (what the throttle of
    every door calls); the seconds to wait (None: within the rate) of each call, per client, in the order made.
    No database: the count alone is under test, and a thread per client must not wait for a pooled connection."""
    ready = threading.Barrier(CLIENTS)
    answers: list[list[int | None]] = [[] for _ in range(CLIENTS)]

    def client_calls(made: list[int | None]) -> None:
        ready.wait()
        for _ in range(CALLS_PER_CLIENT):
            made.append(throttling.charge(throttling.AgentRateThrottle.scope, ident, rate))

    threads = [threading.Thread(target=client_calls, args=(made,)) for made in answers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


def test_concurrent_clients_of_one_agent_get_exactly_the_limit_then_a_wait(clock: Clock) -> None:
    rate = parse_rate("320/hour")

    answers = charges_from_threads("7", rate)

    assert [len(made) for made in answers] == [CALLS_PER_CLIENT] * CLIENTS
    waits = [wait for made in answers for wait in made]
    assert waits.count(None) == 320  # none refused early
    assert len(waits) - waits.count(None) == CLIENTS * CALLS_PER_CLIENT - 320  # none let through after
    for made in answers:
        # Within each client, once refused always refused: its allowed calls all come before its first refusal.
        refused = [wait is not None for wait in made]
        assert refused == sorted(refused)
        assert all(1 <= wait <= 3600 for wait in made if wait is not None), made


async def test_callers_on_the_event_loop_and_in_threads_draw_on_one_exact_count(clock: Clock) -> None:
    """The MCP doors charge from the event loop (`acharge`: with Redis one awaited round trip, no thread), REST from
    its request threads (`charge`): both at once, one count, exactly the limit."""
    rate = parse_rate("320/hour")
    loop_calls = 120

    from_threads, from_loop = await asyncio.gather(
        asyncio.to_thread(charges_from_threads, "8", rate),
        asyncio.gather(
            *(throttling.acharge(throttling.AgentRateThrottle.scope, "8", rate) for _ in range(loop_calls))
        ),
    )

    waits = [wait for made in from_threads for wait in made] + list(from_loop)
    assert len(waits) == CLIENTS * CALLS_PER_CLIENT + loop_calls
    assert waits.count(None) == 320
    assert all(1 <= wait <= 3600 for wait in waits if wait is not None)


@pytest.mark.django_db
def test_an_agent_over_its_rate_gets_429_with_retry_after(
    settings: Any, clock: Clock, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("2/hour")
    client = agent_client(agent_with_key[1])
    statuses = [client.get("/api/v1/requests") for _ in range(3)]

    assert [response.status_code for response in statuses] == [200, 200, 429]
    assert 1 <= int(statuses[-1]["Retry-After"]) <= 3600


@pytest.mark.django_db
def test_the_next_window_counts_from_zero_to_the_full_limit_again(
    settings: Any, clock: Clock, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("3/min")
    client = agent_client(agent_with_key[1])
    first_window = [client.get("/api/v1/requests") for _ in range(4)]

    clock.advance(seconds=int(first_window[-1]["Retry-After"]))  # exactly where the next window starts
    next_window = [client.get("/api/v1/requests").status_code for _ in range(4)]

    assert [response.status_code for response in first_window] == next_window == [200, 200, 200, 429]


@pytest.mark.django_db
def test_every_call_is_counted_in_the_shared_count_refusals_included(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No process keeps a part of the window for itself: each call is one count, so what one process refuses is
    exactly what the shared count says."""
    rate = parse_rate("3/min")
    counted: list[str] = []
    real_count_hit = throttling.count_hit

    def count_hit(scope: str, ident: str, rate: Rate) -> tuple[int, int]:
        counted.append(ident)
        return real_count_hit(scope, ident, rate)

    monkeypatch.setattr(throttling, "count_hit", count_hit)

    answers = [throttling.charge("agent", "7", rate) for _ in range(5)]

    assert answers[:3] == [None, None, None]
    assert all(isinstance(seconds, int) and 1 <= seconds <= 60 for seconds in answers[3:]), answers
    assert counted == ["7"] * 5
