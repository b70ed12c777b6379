"""A working day replayed through the real transitions, to measure how far `expectedWaitSeconds` lands from the wait
each request then had.

Seeded and synthetic: Poisson arrivals whose rate follows the day (a morning and an afternoon peak, a lunch dip;
one in ten urgent), about as many over the day as the reviewers on shift can answer (0.97 of it: the line grows at
the peaks and drains at lunch); three reviewers with exponential answer times of their own means, on shifts that
start and end, each taking the queue's next request whenever free (`claim_next`: priority, then age). Every step
goes through `create_request`, `claim_next` and `respond` under the test's clock, and the estimate at each arrival
is the one the agent's GET would give at that moment (`seconds_by_request`, through the per-queue snapshot kept a
few seconds).

The figure is the median absolute percentage error, |estimate - wait| / wait, over every estimated request. It is
set against two others from the same replay:

- the best a single number can do as an estimate of the mean: an oracle that knows every reviewer's true mean,
  the shifts to come and the arrival rate, and averages ORACLE_RUNS futures played from the state at arrival.
  Even it stays well above 0: a request a free reviewer takes at once waits one exponential answer time, whose
  median error against its own mean is 63 %, whatever the estimate;
- what the queue could say without the model: the median time to answer of its recent answers.

On this day the estimate's error is 26 %, the oracle's 22 %, the baseline's 74 %. Over five other seeds it was
23-42 % (the oracle's 20-33 %, the baseline's 64-82 %): the gap to the oracle, 2-10 points, is what rows cannot
tell (shifts about to start or end, reviewers' paces read from a few dozen exponential times). The error falls as
the line grows, since a long wait is the sum of many answers and strays less from its mean: with a tenth fewer
arrivals it was 33 % on this day and 24-47 % over the other seeds (the oracle's 22-36 %). The test holds this
day's error under 30 %, within 10 points of the oracle and under 60 % of the baseline's, and the mean estimate
within 25 % of the mean wait.
"""

import heapq
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User

from elicitation.models import Agent, ElicitationRequest, Queue, Status
from elicitation.queue import expected_wait, transitions
from tests.conftest import FORM_SCHEMA, Clock

pytestmark = pytest.mark.django_db

SEED = 20260302
DAY = 8 * 3600.0
MEAN_RATE = 1 / 105  # arrivals a second over the day
URGENT_SHARE = 0.1
URGENT = 5
ORACLE_RUNS = 30


@dataclass(frozen=True)
class Shift:
    name: str
    start: float
    end: float  # DAY: stays until the queue is empty
    mean_answer: float


SHIFTS = (
    Shift("ana", 0, 5 * 3600, 200),
    Shift("ben", 1800, DAY, 260),
    Shift("cy", 2 * 3600, DAY, 240),
)


def arrival_rate(t: float) -> float:
    """Arrivals a second at `t` seconds into the day: a morning peak, a lunch dip, an afternoon peak."""
    hours = t / 3600
    shape = 0.55 + 0.9 * math.exp(-(((hours - 2) / 1.0) ** 2)) + 0.8 * math.exp(-(((hours - 5.5) / 1.2) ** 2))
    return MEAN_RATE * shape / 0.96  # the shape averages 0.96 over the day


PEAK_RATE = MEAN_RATE * 2.0


def arrivals(rng: random.Random) -> list[tuple[float, int]]:
    """(time, priority) of the day's arrivals: a Poisson process thinned to the day's rate."""
    found, t = [], 0.0
    while True:
        t += rng.expovariate(PEAK_RATE)
        if t >= DAY:
            return found
        if rng.random() < arrival_rate(t) / PEAK_RATE:
            found.append((t, URGENT if rng.random() < URGENT_SHARE else 0))


@dataclass
class Line:
    """The queue as the replay knows it (it mirrors the rows: the test checks that every claim agrees)."""

    waiting: list[tuple[int, float, int]] = field(default_factory=list)  # (-priority, arrived, number)
    busy: dict[int, int] = field(default_factory=dict)  # reviewer → request number
    on_shift: set[int] = field(default_factory=set)


class Future:
    """One future of the queue from the replay's state, played with the true parameters until `number` is
    answered: busy reviewers' remaining times (memoryless), shifts, urgent arrivals overtaking it."""

    def __init__(self, line: Line, now: float, rng: random.Random) -> None:
        self.rng = rng
        self.waiting = sorted(line.waiting)
        self.busy = dict(line.busy)
        self.on_shift = set(line.on_shift)
        self.events: list[tuple[float, str, int]] = [
            (self.answer_time(now, who), "done", who) for who in self.busy
        ]
        for who, shift in enumerate(SHIFTS):
            if shift.start > now:
                self.events.append((shift.start, "on", who))
            if now < shift.end < DAY:
                self.events.append((shift.end, "off", who))

    def answer_time(self, now: float, who: int) -> float:
        return now + self.rng.expovariate(1 / SHIFTS[who].mean_answer)

    def take(self, who: int, t: float) -> None:
        if who in self.busy or who not in self.on_shift or not self.waiting:
            return
        self.busy[who] = self.waiting.pop(0)[2]
        heapq.heappush(self.events, (self.answer_time(t, who), "done", who))

    def next_urgent(self, t: float) -> None:
        """Push the next urgent arrival after `t` (drawn one at a time: most futures end long before the day)."""
        while t < DAY:
            t += self.rng.expovariate(PEAK_RATE)
            if self.rng.random() < arrival_rate(t) * URGENT_SHARE / PEAK_RATE:
                heapq.heappush(self.events, (t, "urgent", -1))
                return

    def answered_at(self, number: int, now: float) -> float:
        heapq.heapify(self.events)
        if next(key for key in self.waiting if key[2] == number)[0] == 0:
            self.next_urgent(now)  # urgent arrivals overtake it; those of its own priority queue behind it
        for free in sorted(self.on_shift - set(self.busy)):
            self.take(free, now)  # a reviewer who is free takes it at once, as in the replay
        while True:
            t, kind, who = heapq.heappop(self.events)
            if kind == "done":
                if self.busy.pop(who) == number:
                    return t
                self.take(who, t)
            elif kind == "on":
                self.on_shift.add(who)
                self.take(who, t)
            elif kind == "off":
                self.on_shift.discard(who)
            else:
                self.waiting.insert(sum(1 for key in self.waiting if key[0] < 0), (-URGENT, t, -1))
                for free in sorted(self.on_shift - set(self.busy)):
                    self.take(free, t)
                    break
                self.next_urgent(t)


def oracle_wait(line: Line, number: int, now: float, rng: random.Random) -> float:
    """The mean of ORACLE_RUNS futures' times to answer `number`: the best single number a mean can give."""
    return statistics.fmean(Future(line, now, rng).answered_at(number, now) - now for _ in range(ORACLE_RUNS))


def median_error(pairs: list[tuple[float, float]]) -> float:
    return statistics.median(abs(estimate - wait) / wait for estimate, wait in pairs)


@dataclass
class Day:
    """What the replay recorded, by request number."""

    waits: dict[int, float] = field(default_factory=dict)
    estimates: dict[int, float] = field(default_factory=dict)
    oracle: dict[int, float] = field(default_factory=dict)
    queue_median: dict[int, float] = field(default_factory=dict)
    ahead: dict[int, int] = field(default_factory=dict)  # waiting before it in claim order, at arrival

    def error(self, of: dict[int, float], among: Callable[[int], bool] = lambda n: True) -> float:
        return statistics.median(
            abs(of[n] - self.waits[n]) / self.waits[n] for n in self.estimates if among(n)
        )


class Replay:
    """The day through the real transitions, the replay's own `Line` mirroring the rows for the oracle."""

    def __init__(self, clock: Clock, agent: Agent, queue: Queue, reviewers: list[User]) -> None:
        self.clock, self.agent, self.queue, self.reviewers = clock, agent, queue, reviewers
        self.rng = random.Random(SEED)
        self.oracle_rng = random.Random(SEED + 1)
        self.opened = clock.now()
        self.line = Line()
        self.events: list[tuple[float, int, str, Any]] = []
        self.requests: dict[int, ElicitationRequest] = {}
        self.number_of: dict[Any, int] = {}
        self.arrived: dict[int, float] = {}
        self.day = Day()

    def run(self) -> Day:
        for number, (t, priority) in enumerate(arrivals(self.rng)):
            heapq.heappush(self.events, (t, 1, "arrive", (number, priority)))
        for who, shift in enumerate(SHIFTS):
            heapq.heappush(self.events, (shift.start, 0, "on", who))
            if shift.end < DAY:
                heapq.heappush(self.events, (shift.end, 0, "off", who))
        while self.events:
            t, _, kind, what = heapq.heappop(self.events)
            self.clock.current = self.opened + timedelta(seconds=t)
            if kind == "arrive":
                self.arrive(t, *what)
            elif kind == "done":
                number = self.line.busy.pop(what)
                transitions.respond(
                    self.requests[number].pk,
                    user=self.reviewers[what],
                    action="accept",
                    content={"approve": True},
                )
                self.day.waits[number] = t - self.arrived[number]
                self.take(what, t)
            elif kind == "on":
                self.line.on_shift.add(what)
                self.take(what, t)
            else:
                self.line.on_shift.discard(what)
        return self.day

    def arrive(self, t: float, number: int, priority: int) -> None:
        request, _ = transitions.create_request(
            agent=self.agent,
            queue_slug=self.queue.slug,
            message=f"Request {number}",
            mode="form",
            requested_schema=FORM_SCHEMA,
            priority=priority,
            expires_in=24 * 3600,  # nothing expires: every request gets its answer
        )
        self.requests[number], self.number_of[request.pk], self.arrived[number] = request, number, t
        heapq.heappush(self.line.waiting, (-priority, t, number))
        # What the agent's GET would say now, before any reviewer moved.
        estimate = expected_wait.seconds_by_request([request]).get(request.pk)
        free = sorted(self.line.on_shift - set(self.line.busy))
        if estimate is not None:
            snapshot = expected_wait.queue_snapshot(self.queue, self.clock.now())
            self.day.estimates[number] = estimate
            self.day.queue_median[number] = (
                expected_wait.still_to_wait((total for _, _, total in snapshot.answers), 0) or 0.0
            )
            self.day.oracle[number] = oracle_wait(self.line, number, t, self.oracle_rng)
            self.day.ahead[number] = sum(1 for key in self.line.waiting if key < (-priority, t, number))
        if free:
            self.take(free[0], t)

    def take(self, who: int, t: float) -> None:
        if who in self.line.busy or who not in self.line.on_shift or not self.line.waiting:
            return
        claimed = transitions.claim_next(self.queue, user=self.reviewers[who])
        assert claimed is not None
        number = heapq.heappop(self.line.waiting)[2]
        assert self.number_of[claimed.pk] == number  # the rows' claim order is the one the oracle plays
        self.line.busy[who] = number
        answer_at = t + self.rng.expovariate(1 / SHIFTS[who].mean_answer)
        heapq.heappush(self.events, (answer_at, 0, "done", who))


@pytest.fixture
def rows_clock(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> Clock:
    """The clock fixture, also behind the rows' `auto_now` columns, so the rows carry the replay's times."""
    monkeypatch.setattr("django.utils.timezone.now", clock.now)
    expected_wait.forget_snapshots()
    return clock


def test_over_a_day_the_estimate_lands_within_30_percent_near_the_best_a_mean_can_do(
    rows_clock: Clock, agent: Agent, queue: Queue, make_reviewer: Callable[..., User]
) -> None:
    # A reviewer's page renews the claim while they work; here the lease outlasts any answer instead.
    Queue.objects.filter(pk=queue.pk).update(lease_seconds=3600)
    queue.refresh_from_db()
    reviewers = [make_reviewer(shift.name, queue) for shift in SHIFTS]
    day = Replay(rows_clock, agent, queue, reviewers).run()

    assert ElicitationRequest.objects.filter(queue=queue, status=Status.COMPLETED).count() == len(day.waits)
    ours, best, queue_median = day.error(day.estimates), day.error(day.oracle), day.error(day.queue_median)
    # An estimate of the mean: over the day, the mean estimate and the mean wait agree.
    bias = statistics.fmean(day.estimates.values()) / statistics.fmean(day.waits[n] for n in day.estimates)
    behind = day.error(day.estimates, lambda n: day.ahead[n] >= 6)
    print(
        f"\nexpected wait over a day of {len(day.waits)} requests ({len(day.estimates)} estimated): median "
        f"absolute percentage error {ours:.0%} ({behind:.0%} for those behind six or more); the best a mean "
        f"can do {best:.0%}; the queue's median time to answer {queue_median:.0%}; mean estimate / mean wait "
        f"{bias:.2f}"
    )
    assert len(day.waits) >= 200
    assert len(day.estimates) >= 0.95 * len(day.waits)  # only the day's first arrivals have nothing to go on
    assert ours <= 0.30
    assert ours <= best + 0.10
    assert ours <= 0.6 * queue_median
    assert 0.8 <= bias <= 1.25
