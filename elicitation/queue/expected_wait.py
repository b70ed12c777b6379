"""Expected wait: how long an open request will likely wait for its answer, read from what its queue does now.

The model treats a queue as M/M/c, every figure read from the queue's rows:

- c, the reviewers at work: those holding a live claim in the queue (a page's heartbeat renews its lease) and
  those who answered in it in the last ACTIVE;
- μ, each one's answer rate: 1 / their mean claim → answer time over the queue's newest SERVICE_SAMPLES answers
  of the last ANSWERS_WINDOW (of the last FALLBACK_WINDOW when that holds fewer than MIN_SERVICE_SAMPLES), drawn
  towards the team's mean as if MIN_OWN_SAMPLES more answers had taken it;
- λ, the arrival rate over the last ARRIVALS_WINDOW by priority: only arrivals of a higher priority overtake a
  request that waits (claims go by priority, then age).

A pending request with k requests ahead of it in claim order, while f of the c reviewers are free, is taken at
once if k < f; otherwise it waits for k - f + 1 answers, which come at Σμ a second less the overtaking arrivals
λ_higher. Its own answer then takes c / Σμ (the team's mean, faster reviewers taking more):

    wait ≈ max(0, k - f + 1) / (Σμ - λ_higher) + c / Σμ

A claimed request waits its holder's mean answer time (memoryless, as the model's service times are). When the
model has nothing to stand on (too few answers, or nobody at work) the estimate falls back to the queue's recent
time to answer: the median of what requests that had waited as long as this one still had to wait. No history at
all, or a request past its deadline: no estimate (None). The deadline bounds every estimate, since the request
closes then, answered or not; higher-priority arrivals faster than the reviewers answer push it to the deadline.

Limits: a reviewer at work who neither claimed nor answered in the last ACTIVE is not seen (page sockets are not
counted), shifts about to start or end are not known, and with nobody at work the fallback cannot know when the
next shift starts. tests/queue/test_expected_wait_simulation.py replays a day through the real transitions and
measures the error against the best any estimate of the mean could do.

Cost: a queue's figures are one snapshot, read in three queries (its open rows, its recent answers, its recent
arrivals by priority; a fourth for the day's answers when the window is thin) and kept per process for
SNAPSHOT_SECONDS, so polling an open request mostly reads nothing more and a list of requests reads once per
queue, not per row.
"""

import bisect
import functools
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from uuid import UUID

from django.db.models import Count, QuerySet

from elicitation.models import OPEN_STATUSES, ElicitationRequest, Queue, Status
from elicitation.queue import clock

ARRIVALS_WINDOW = timedelta(hours=2)
ANSWERS_WINDOW = timedelta(hours=3)
FALLBACK_WINDOW = timedelta(days=1)
ACTIVE = timedelta(minutes=10)
SERVICE_SAMPLES = 200
MIN_SERVICE_SAMPLES = 5
# A reviewer's own mean answer time is drawn towards the team's, as if this many more answers had taken it.
MIN_OWN_SAMPLES = 3
# Positions past this many waiting requests read as this many: the wait is then hours, past most deadlines.
MAX_WAITING_READ = 1000
SNAPSHOT_SECONDS = 5


@dataclass(frozen=True)
class QueueSnapshot:
    """What a queue is doing, as the estimate reads it: one per queue, shared by all of its requests."""

    # Claimable requests as (-priority, created_at): claim order, so a request's position is a bisection.
    waiting: tuple[tuple[int, datetime], ...] = ()
    claim_holders: frozenset[int] = frozenset()
    recent_answerers: frozenset[int] = frozenset()
    # The newest answers, newest first: (reviewer, claim → answer seconds, arrival → answer seconds).
    answers: tuple[tuple[int, float, float], ...] = ()
    arrivals_by_priority: dict[int, int] = field(default_factory=dict)
    window_seconds: float = ARRIVALS_WINDOW.total_seconds()

    @property
    def at_work(self) -> frozenset[int]:
        return self.claim_holders | self.recent_answerers

    @functools.cached_property
    def team_mean_answer(self) -> float:
        return statistics.fmean(seconds for _, seconds, _ in self.answers)

    @functools.cached_property
    def own_answers(self) -> dict[int, list[float]]:
        own: dict[int, list[float]] = {}
        for who, seconds, _ in self.answers:
            own.setdefault(who, []).append(seconds)
        return own

    def mean_answer(self, reviewer: int) -> float:
        """A reviewer's mean claim → answer time: their own answers, drawn towards the team's mean as if
        MIN_OWN_SAMPLES more answers had taken it (a few exponential times say little on their own)."""
        own = self.own_answers.get(reviewer, [])
        return (sum(own) + MIN_OWN_SAMPLES * self.team_mean_answer) / (len(own) + MIN_OWN_SAMPLES)

    def answer_rate(self) -> float:
        """Answers a second while every reviewer at work is busy: Σμ, each reviewer at their own pace."""
        return sum(1 / self.mean_answer(who) for who in self.at_work)

    def arrival_rate_above(self, priority: int) -> float:
        """Arrivals a second that would be claimed before a waiting request of `priority`."""
        overtaking = sum(count for level, count in self.arrivals_by_priority.items() if level > priority)
        return overtaking / self.window_seconds


def expected_wait_seconds(
    snapshot: QueueSnapshot,
    *,
    priority: int,
    created_at: datetime,
    holder: int | None,
    deadline: datetime,
    now: datetime,
) -> float | None:
    """Seconds from `now` until a request of the queue is likely answered (or closed by its deadline); None
    when there is nothing to go on or the request is past its deadline. `holder`: the reviewer holding a live
    claim on it, if one does."""
    left = (deadline - now).total_seconds()
    if left <= 0:
        return None
    at_work = snapshot.at_work
    if len(snapshot.answers) < MIN_SERVICE_SAMPLES or not at_work:
        guess = still_to_wait((total for _, _, total in snapshot.answers), (now - created_at).total_seconds())
        return None if guess is None else min(guess, left)
    if holder is not None:
        return min(snapshot.mean_answer(holder), left)
    answer_rate = snapshot.answer_rate()
    # Whoever takes it answers in the mean time of the team, weighted by pace: faster reviewers take more.
    own_answer = len(at_work) / answer_rate
    ahead = bisect.bisect_left(snapshot.waiting, (-priority, created_at))
    free = len(at_work) - len(snapshot.claim_holders)
    answers_first = max(ahead - free + 1, 0)
    if answers_first == 0:
        return min(own_answer, left)
    drain = answer_rate - snapshot.arrival_rate_above(priority)
    if drain <= 0:
        return left  # overtaken faster than the reviewers answer: it waits for its deadline
    return min(answers_first / drain + own_answer, left)


def still_to_wait(answer_seconds: Iterable[float], waited: float) -> float | None:
    """The median of what the recent requests that had waited `waited` seconds still waited; None without any."""
    remaining = [total - waited for total in answer_seconds if total > waited]
    return statistics.median(remaining) if remaining else None


def read_snapshot(queue_id: int, now: datetime) -> QueueSnapshot:
    rows = ElicitationRequest.objects.filter(queue_id=queue_id)
    waiting: list[tuple[int, datetime]] = []
    holders: set[int] = set()
    # In the queue-order index's order: the claims first, then the rest in claim order.
    open_rows = (
        rows.filter(status__in=OPEN_STATUSES)
        .order_by("status", "-priority", "created_at")
        .values_list("status", "priority", "created_at", "deadline", "claimed_by_id", "lease_expires_at")
    )
    for status, priority, created_at, deadline, holder, lease in open_rows[:MAX_WAITING_READ]:
        if status == Status.CLAIMED and lease is not None and lease > now:
            holders.add(holder)
        elif deadline > now:  # a claim whose lease ran out is claimable again; an overdue request is not
            waiting.append((-priority, created_at))
    answers = _answers_since(rows, now - ANSWERS_WINDOW)
    if len(answers) < MIN_SERVICE_SAMPLES:
        answers = _answers_since(rows, now - FALLBACK_WINDOW)
    since = now - ARRIVALS_WINDOW
    # A request that arrived in the window has its deadline after it (the index on status, deadline); one a rule
    # answered at intake never waited, so it overtook nobody.
    arrivals = (
        rows.filter(status__in=Status.values, deadline__gt=since, created_at__gte=since)
        .exclude(status=Status.COMPLETED, answered_by__isnull=True)
        .values_list("priority")
        .annotate(count=Count("pk"))
        .order_by()
    )
    return QueueSnapshot(
        waiting=tuple(sorted(waiting)),
        claim_holders=frozenset(holders),
        recent_answerers=frozenset(who for _, _, closed, who in answers if closed >= now - ACTIVE),
        answers=tuple(
            (who, (closed - claimed).total_seconds(), (closed - created).total_seconds())
            for created, claimed, closed, who in answers
        ),
        arrivals_by_priority=dict(arrivals),
        window_seconds=ARRIVALS_WINDOW.total_seconds(),
    )


def _answers_since(
    rows: QuerySet[ElicitationRequest], since: datetime
) -> list[tuple[datetime, datetime, datetime, int]]:
    """The newest answers a person gave since `since`: (created_at, claimed_at, closed_at, answered_by_id). A
    reviewer answers only before the deadline, so the deadline (indexed with the status) bounds what is read."""
    answers = (
        rows.filter(
            status=Status.COMPLETED,
            deadline__gte=since,
            closed_at__gte=since,
            claimed_at__isnull=False,
            answered_by__isnull=False,
        )
        .order_by("-closed_at")
        .values_list("created_at", "claimed_at", "closed_at", "answered_by_id")[:SERVICE_SAMPLES]
    )
    return [
        (created, claimed, closed, who)
        for created, claimed, closed, who in answers
        if claimed is not None and closed is not None  # as filtered: says so to the type checker
    ]


def queue_snapshot(queue: Queue, now: datetime) -> QueueSnapshot:
    """The queue's snapshot, read at most once per SNAPSHOT_SECONDS per process."""
    return _snapshot_in_bucket(queue.pk, queue.created_at, int(now.timestamp() // SNAPSHOT_SECONDS))


@functools.lru_cache(maxsize=256)
def _snapshot_in_bucket(queue_id: int, queue_created_at: datetime, bucket: int) -> QueueSnapshot:
    # Keyed by the queue's creation time too: a rolled-back queue's id comes back, its creation time does not.
    return read_snapshot(queue_id, clock.now())


def forget_snapshots() -> None:
    """Drop every kept snapshot (tests that change a queue and read it again within SNAPSHOT_SECONDS)."""
    _snapshot_in_bucket.cache_clear()


def seconds_by_request(requests: Iterable[ElicitationRequest]) -> dict[UUID, int]:
    """Whole seconds each open request of `requests` will likely wait (at least 1), for those with an estimate.
    Reads `request.queue`: load it with the requests (`select_related("queue")`, or `access.request_with_relations`)."""
    now = clock.now()
    waits: dict[UUID, int] = {}
    for request in requests:
        if not request.is_open:
            continue
        holding = (
            request.status == Status.CLAIMED
            and request.lease_expires_at is not None
            and request.lease_expires_at > now
        )
        seconds = expected_wait_seconds(
            queue_snapshot(request.queue, now),
            priority=request.priority,
            created_at=request.created_at,
            holder=request.claimed_by_id if holding else None,
            deadline=request.deadline,
            now=now,
        )
        if seconds is not None:
            waits[request.pk] = max(1, round(seconds))
    return waits
