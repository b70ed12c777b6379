"""Rate counting in slices (api/throttling.py `CallSlices`): a process reserves a window's calls from the shared count
a slice at a time and numbers calls from it itself. Counted here: the round trips, the numbers handed out, what
several processes sharing one count let through. The count is the suite's cache: memory, or Redis in the services
leg."""

import random
import threading
from collections import Counter
from typing import Any

import pytest
from django.core.cache import cache

from elicitation.api import throttling
from reviewhub.rates import parse_rate
from tests.conftest import Clock

RATE = parse_rate("640/min")  # slices of 10


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each reservation made against the shared count."""
    made: list[int] = []
    real_count_hit = throttling.count_hit

    def count_hit(scope: str, ident: str, rate: Any, calls: int = 1) -> tuple[int, int]:
        made.append(calls)
        return real_count_hit(scope, ident, rate, calls)

    monkeypatch.setattr(throttling, "count_hit", count_hit)
    return made


def allowed(slices: throttling.CallSlices, rate: Any = RATE, ident: str = "7") -> bool:
    """One call through `slices` (a process's own), as charge_call numbers it: within the rate?"""
    number, _ = slices.number_from_held("agent", ident, rate) or slices.reserve("agent", ident, rate)
    return number <= rate.limit


def test_a_slice_is_a_sixty_fourth_of_the_limit_and_small_rates_count_every_call() -> None:
    assert throttling.slice_size(parse_rate("600/min")) == 9
    assert throttling.slice_size(RATE) == 10
    assert throttling.slice_size(parse_rate("63/min")) == 1
    assert throttling.slice_size(parse_rate("1/min")) == 1


@pytest.mark.django_db
def test_most_calls_are_counted_without_a_round_trip_and_the_count_reads_the_calls_made(
    clock: Clock, round_trips: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(throttling, "call_slices", throttling.CallSlices())
    for _ in range(25):
        assert throttling.charge_call("agent", "7", RATE).retry_after is None

    assert round_trips == [10, 10, 10]
    key, _ = throttling.window("agent", "7", RATE)
    assert cache.get(key) == 30  # reserved
    assert throttling.current_count("agent", "7", RATE)[0] == 25  # made
    assert throttling.charge_call("agent", "7", RATE).left == 640 - 26


@pytest.mark.django_db
def test_a_small_rate_is_exact_and_a_spent_window_refuses_without_asking_again(
    clock: Clock, round_trips: list[int], monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    monkeypatch.setattr(throttling, "call_slices", throttling.CallSlices())
    rate = settings.AGENT_RATE = parse_rate("3/min")
    answers = [throttling.charge_call("agent", "7", rate).retry_after for _ in range(6)]

    assert answers[:3] == [None, None, None]
    assert all(isinstance(seconds, int) and 1 <= seconds <= 60 for seconds in answers[3:]), answers
    assert round_trips == [1, 1, 1]  # one call at a time; past the third, the window is known to be spent
    assert throttling.agent_retry_after(7) is not None

    clock.advance(seconds=60)  # the next window
    assert throttling.charge_call("agent", "7", rate).retry_after is None
    assert round_trips == [1, 1, 1, 1]


@pytest.mark.django_db
def test_processes_sharing_a_count_never_let_more_than_the_limit_through(clock: Clock) -> None:
    """Three processes (three CallSlices on one count) take calls in a random order until all are refused: together
    they let through at most the limit, and at least the limit less what the other two may hold unused."""
    processes = [throttling.CallSlices() for _ in range(3)]
    chooser = random.Random(19)
    passed = refused = 0
    for _ in range(800):
        if allowed(chooser.choice(processes)):
            passed += 1
        else:
            refused += 1

    assert passed <= RATE.limit
    assert passed >= RATE.limit - 2 * (throttling.slice_size(RATE) - 1)
    assert refused == 800 - passed
    # Each process now refuses, whichever held numbers of the window.
    assert not any(allowed(process) for process in processes)


@pytest.mark.django_db(transaction=True)
def test_threads_reserving_at_once_never_get_the_same_number(clock: Clock) -> None:
    """The losing side of the reservation race: two threads that both found the slice used up reserve two slices;
    one is kept, the other's rest goes unused, and no number is handed out twice."""
    slices = throttling.CallSlices()
    numbers: list[int] = []
    start = threading.Barrier(8)

    def caller() -> None:
        start.wait()
        for _ in range(40):
            number = slices.number_from_held("agent", "8", RATE) or slices.reserve("agent", "8", RATE)
            numbers.append(number[0])

    threads = [threading.Thread(target=caller) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert len(numbers) == 320
    assert [number for number, times in Counter(numbers).items() if times > 1] == []
    key, _ = throttling.window("agent", "8", RATE)
    assert max(numbers) <= cache.get(key)


@pytest.mark.django_db
def test_a_rate_lowered_mid_window_still_counts_the_calls_already_made(clock: Clock) -> None:
    """Numbers are places in the window's shared count, so a smaller rate set mid-window refuses at once when the
    calls already made exceed it, even though they came from a larger slice."""
    slices = throttling.CallSlices()
    assert allowed(slices) and allowed(slices)
    assert not allowed(slices, parse_rate("2/min"))


@pytest.mark.django_db
def test_a_slice_reserved_as_its_window_ends_is_not_kept_for_the_next(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window rolls over during the reservation's round trip: the numbers were places in the old window's count,
    so none of them is handed out in the new one."""
    slices = throttling.CallSlices()
    real_count_hit = throttling.count_hit

    def count_hit_then_roll_over(scope: str, ident: str, rate: Any, calls: int = 1) -> tuple[int, int]:
        counted = real_count_hit(scope, ident, rate, calls)
        clock.advance(seconds=60)
        return counted

    monkeypatch.setattr(throttling, "count_hit", count_hit_then_roll_over)
    assert slices.reserve("agent", "9", RATE)[0] == 1
    assert slices.number_from_held("agent", "9", RATE) is None
