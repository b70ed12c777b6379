"""A synthetic working day for the expected wait (issue "Time to a human"): arrivals, reviewers on shifts and their
answers replayed through the real transitions, recording at each arrival the estimate the agent's GET would give
(`expectedWaitSeconds`), the wait the request then had, and two yardsticks from the same replay: the best a single
number can do (an oracle averaging futures played with the true parameters) and the queue's median time to answer.

Seeded, so every run replays the same day. `tests/queue/test_expected_wait_simulation.py` holds its figures to their
targets on the test database; `python -m bench expected_wait` reports them in BENCHMARKS.md.
"""

import heapq
import math
import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.contrib.auth.models import User

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import expected_wait, transitions

# Every request asks the same yes/no question: the day is about when answers come, not what they say.
FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve?"}},
    "required": ["approve"],
}


class ReplayClock(Protocol):
    """The replay's "now", which it sets at each event (the tests' `Clock`, or the bench's)."""

    current: datetime

    def now(self) -> datetime: ...


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
    found: list[tuple[float, int]] = []
    t = 0.0
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

    def __init__(self, clock: ReplayClock, agent: Agent, queue: Queue, reviewers: list[User]) -> None:
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
