"""Rate limits counted exactly (api/throttling.py): every call is one atomic count in the shared cache (memory, or
Redis in the services leg), so concurrent clients of one agent get exactly the limit, no call refused before it
and none let through after it."""

import threading
from typing import Any

import pytest
from django.db import connection

from elicitation.api import throttling
from elicitation.models import Agent
from reviewhub.rates import Rate, parse_rate
from tests.conftest import Clock
from tests.security.test_limits import agent_client

CLIENTS = 4
CALLS_PER_CLIENT = 90  # 360 calls against a limit of 320


def calls_from_threads(key: str) -> list[list[tuple[int, str | None]]]:
    """Each client, in a thread of its own, makes its calls as fast as it can once all are ready; (status,
    Retry-After) of each call, per client, in the order that client made them."""
    ready = threading.Barrier(CLIENTS)
    answers: list[list[tuple[int, str | None]]] = [[] for _ in range(CLIENTS)]

    def client_calls(made: list[tuple[int, str | None]]) -> None:
        try:
            client = agent_client(key)
            ready.wait()
            for _ in range(CALLS_PER_CLIENT):
                response = client.get("/api/v1/requests")
                made.append((response.status_code, response.headers.get("Retry-After")))
        finally:
            connection.close()  # this thread's own: the test database must be droppable

    threads = [threading.Thread(target=client_calls, args=(made,)) for made in answers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return answers


@pytest.mark.django_db(transaction=True)
def test_concurrent_clients_of_one_agent_get_exactly_the_limit_then_429_with_retry_after(
    settings: Any, clock: Clock, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("320/hour")
    _, key = agent_with_key

    answers = calls_from_threads(key)

    assert [len(made) for made in answers] == [CALLS_PER_CLIENT] * CLIENTS
    statuses = [status for made in answers for status, _ in made]
    assert statuses.count(200) == 320  # none refused early
    assert statuses.count(429) == CLIENTS * CALLS_PER_CLIENT - 320
    for made in answers:
        # Within each client, once refused always refused: its 200s all come before its first 429.
        client_statuses = [status for status, _ in made]
        assert client_statuses == sorted(client_statuses)
        refusals = [retry for status, retry in made if status == 429]
        assert all(retry is not None and 1 <= int(retry) <= 3600 for retry in refusals), refusals
    assert agent_client(key).get("/api/v1/requests").status_code == 429  # and every later call


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
