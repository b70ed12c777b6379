"""The rate limit's breaker (api/throttling.py): a cache that fails or hangs is asked once, then left alone for
a short window while requests pass uncounted; then one request at a time probes it, and counting resumes as soon
as it answers. Without it a hung Redis costs every API call a full operation timeout before it is let through."""

from typing import Any

import pytest

from elicitation.api import throttling
from elicitation.models import Agent, Queue
from reviewhub.rates import Rate, parse_rate
from tests.conftest import Clock
from tests.security.test_limits import agent_client


class Now:
    def __init__(self) -> None:
        self.value = 1000.0

    def __call__(self) -> float:
        return self.value


@pytest.fixture
def now(monkeypatch: pytest.MonkeyPatch) -> Now:
    moment = Now()
    monkeypatch.setattr(throttling.time, "monotonic", moment)
    return moment


def test_after_a_failure_the_cache_is_left_alone_for_the_window_then_probed_once(now: Now) -> None:
    breaker = throttling.CacheBreaker(5)
    assert breaker.allow()
    breaker.failed()

    assert not breaker.allow()
    now.value += 4.9
    assert not breaker.allow()
    now.value += 0.2
    assert breaker.allow()  # the probe
    assert not breaker.allow()  # nobody else while it is out
    breaker.failed()  # still hung: another window
    assert not breaker.allow()
    now.value += 5.1
    assert breaker.allow()
    breaker.succeeded()
    assert breaker.allow() and breaker.allow()


@pytest.mark.django_db
def test_a_hung_cache_costs_one_request_the_wait_then_counting_resumes_when_it_answers(
    settings: Any,
    now: Now,
    clock: Clock,  # frozen: the three counted requests share one rate window
    monkeypatch: pytest.MonkeyPatch,
    queue: Queue,
    agent_with_key: tuple[Agent, str],
) -> None:
    settings.AGENT_RATE = parse_rate("2/min")
    real_count_hit = throttling.count_hit
    calls: list[str] = []
    hung = [True]

    def count_hit(scope: str, ident: str, rate: Rate) -> tuple[int, int]:
        calls.append(scope)
        if hung[0]:
            raise TimeoutError("Timeout reading from socket")  # what redis-py raises after socket_timeout
        return real_count_hit(scope, ident, rate)

    monkeypatch.setattr(throttling, "count_hit", count_hit)
    client = agent_client(agent_with_key[1])

    assert [client.get("/api/v1/requests").status_code for _ in range(5)] == [200] * 5
    assert len(calls) == 1  # only the first waited for the cache

    hung[0] = False
    now.value += throttling.BREAKER_OPEN_SECONDS + 0.1
    statuses = [client.get("/api/v1/requests").status_code for _ in range(3)]

    assert statuses == [200, 200, 429]  # the probe counted, the breaker closed, the limit holds again
    assert len(calls) == 4  # each of them counted once in the cache, the refusal too
