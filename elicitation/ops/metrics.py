"""Operational figures for the dashboard and /metrics: reads only, selectors-style.

Everything is computed with a handful of aggregate queries that run on SQLite and PostgreSQL alike. Percentiles
use PostgreSQL's `percentile_cont` there, and elsewhere the same linear interpolation in Python over a bounded
sample (the most recent MAX_SAMPLE requests per queue). Queue depth over time is replayed from the audit trail
(RequestEvent): the requests open when the period starts, then every created/escalated/closed event in it.

Times to a first claim and to an answer are kept by the queue a request arrived in (`arrival_queue`), not the one
it sits in now: a request escalated for being slow stays in the figures of the queue that missed its target, and
does not charge the queue it went to with time spent elsewhere. /metrics adds the current queue as a second label.
"""

from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import (
    Aggregate,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    Q,
    QuerySet,
)
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Coalesce
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector, CollectorRegistry

from elicitation.models import (
    ActorType,
    DeliveryStatus,
    ElicitationRequest,
    Queue,
    RequestEvent,
    Status,
    WebhookDelivery,
)
from elicitation.queue import clock, expected_wait, selectors

CLOSING_KINDS = ("completed", "expired", "withdrawn")
BREACH_KINDS = ("expired", "escalated")
OUTCOMES = ("accept", "decline", "cancel", "expired", "withdrawn")
OUTCOME_STATUSES = (Status.COMPLETED, Status.EXPIRED, Status.WITHDRAWN)
MAX_SAMPLE = 5000
PERIOD_DAYS = (1, 3, 7, 30)


# --- periods ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Period:
    start: datetime
    end: datetime

    @classmethod
    def last(cls, days: int, now: datetime | None = None) -> "Period":
        end = now or clock.now()
        return cls(end - timedelta(days=days), end)

    @property
    def length(self) -> timedelta:
        return self.end - self.start

    def buckets(self) -> tuple[timedelta, list[datetime]]:
        """Hourly buckets for up to two days, daily beyond; each starts on a whole hour or day (UTC)."""
        if self.length <= timedelta(days=2):
            size, first = timedelta(hours=1), self.start.replace(minute=0, second=0, microsecond=0)
        else:
            size, first = timedelta(days=1), self.start.replace(hour=0, minute=0, second=0, microsecond=0)
        starts, moment = [], first
        while moment < self.end:
            starts.append(moment)
            moment += size
        return size, starts


# --- percentiles -----------------------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], fraction: float) -> float | None:
    """Linear interpolation between closest ranks: what PostgreSQL's percentile_cont computes."""
    if not sorted_values:
        return None
    position = fraction * (len(sorted_values) - 1)
    lower = int(position)
    upper = min(lower + 1, len(sorted_values) - 1)
    return sorted_values[lower] + (sorted_values[upper] - sorted_values[lower]) * (position - lower)


class PercentileCont(Aggregate):
    """PostgreSQL's ordered-set aggregate; `fraction` is a constant from this module, never user input."""

    function = "PERCENTILE_CONT"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"

    def __init__(self, expression: Any, fraction: float, **extra: Any) -> None:
        super().__init__(expression, fraction=float(fraction), output_field=DurationField(), **extra)


@dataclass(frozen=True)
class Latency:
    p50: float | None  # seconds
    p90: float | None
    count: int


def _between(start_field: str, end_field: str) -> ExpressionWrapper[CombinedExpression]:
    return ExpressionWrapper(F(end_field) - F(start_field), output_field=DurationField())


# --- arrival queues --------------------------------------------------------------------------------------------


def arrival_queue_id() -> Coalesce:
    """A request's arrival queue as a column: `arrival_queue`, or `queue` on rows written outside intake."""
    return Coalesce(F("arrival_queue_id"), F("queue_id"))


def arrived_in(queues: Iterable[Queue]) -> Q:
    """Requests that arrived in one of `queues` (written so that the arrival queue's index serves it)."""
    ids = [q.pk for q in queues]
    return Q(arrival_queue__in=ids) | Q(arrival_queue__isnull=True, queue__in=ids)


def arrived_in_or_now_in(queues: Iterable[Queue]) -> Q:
    """Requests that arrived in one of `queues` or sit in one now (escalated there from elsewhere)."""
    queues = list(queues)
    return arrived_in(queues) | Q(queue__in=[q.pk for q in queues])


# Latency figures grouped by the arrival queue alone (the page), or by arrival and current queue (/metrics).
BY_ARRIVAL = ("arrival",)
BY_ARRIVAL_AND_CURRENT = ("arrival", "current")


def _grouping(names: tuple[str, ...]) -> dict[str, Any]:
    columns = {"arrival": arrival_queue_id(), "current": F("queue_id")}
    return {name: columns[name] for name in names}


def _latency_grouped(
    requests: QuerySet[ElicitationRequest], group_by: tuple[str, ...], start_field: str, end_field: str
) -> dict[tuple[int, ...], Latency]:
    requests = requests.annotate(**_grouping(group_by))
    if connection.vendor == "postgresql":
        elapsed = _between(start_field, end_field)
        rows = requests.values(*group_by).annotate(
            p50=PercentileCont(elapsed, 0.5), p90=PercentileCont(elapsed, 0.9), n=Count("pk")
        )
        return {
            tuple(row[name] for name in group_by): Latency(
                row["p50"].total_seconds() if row["p50"] is not None else None,
                row["p90"].total_seconds() if row["p90"] is not None else None,
                row["n"],
            )
            for row in rows.order_by()
        }
    result = {}
    for key in set(requests.values_list(*group_by).order_by().distinct()):
        sample = (
            requests.filter(**dict(zip(group_by, key, strict=True)))
            .order_by(f"-{end_field}")
            .values_list(start_field, end_field)
        )
        seconds = sorted(max((end - begin).total_seconds(), 0.0) for begin, end in sample[:MAX_SAMPLE])
        result[tuple(key)] = Latency(percentile(seconds, 0.5), percentile(seconds, 0.9), len(seconds))
    return result


def _first_claims(period: Period) -> QuerySet[ElicitationRequest]:
    return ElicitationRequest.objects.filter(
        created_at__gte=period.start, created_at__lt=period.end, first_claimed_at__isnull=False
    )


def _completions(period: Period) -> QuerySet[ElicitationRequest]:
    return ElicitationRequest.objects.filter(
        status=Status.COMPLETED, closed_at__gte=period.start, closed_at__lt=period.end
    )


def time_to_first_claim(queues: Iterable[Queue], period: Period) -> dict[int, Latency]:
    """From arrival to first claim (wherever it was claimed), per arrival queue, for requests that arrived in the
    period and were claimed."""
    requests = _first_claims(period).filter(arrived_in(queues))
    figures = _latency_grouped(requests, BY_ARRIVAL, "created_at", "first_claimed_at")
    return {arrival: figure for (arrival,), figure in figures.items()}


def time_to_completion(queues: Iterable[Queue], period: Period) -> dict[int, Latency]:
    """From arrival to a reviewer's answer (wherever it was answered), per arrival queue, for requests answered in
    the period."""
    requests = _completions(period).filter(arrived_in(queues))
    figures = _latency_grouped(requests, BY_ARRIVAL, "created_at", "closed_at")
    return {arrival: figure for (arrival,), figure in figures.items()}


def time_to_first_claim_by_queue_pair(
    queues: Iterable[Queue], period: Period
) -> dict[tuple[int, int], Latency]:
    """`time_to_first_claim` per (arrival queue, current queue), for requests that arrived in or are now in one of
    `queues`."""
    requests = _first_claims(period).filter(arrived_in_or_now_in(queues))
    figures = _latency_grouped(requests, BY_ARRIVAL_AND_CURRENT, "created_at", "first_claimed_at")
    return {(arrival, current): figure for (arrival, current), figure in figures.items()}


def time_to_completion_by_queue_pair(
    queues: Iterable[Queue], period: Period
) -> dict[tuple[int, int], Latency]:
    """`time_to_completion` per (arrival queue, current queue)."""
    requests = _completions(period).filter(arrived_in_or_now_in(queues))
    figures = _latency_grouped(requests, BY_ARRIVAL_AND_CURRENT, "created_at", "closed_at")
    return {(arrival, current): figure for (arrival, current), figure in figures.items()}


# --- outcomes, breaches, throughput ----------------------------------------------------------------------------


def outcome_of(status: str, action: str) -> str:
    return action if status == Status.COMPLETED else status


def outcomes(queues: Iterable[Queue], period: Period | None) -> dict[int, dict[str, int]]:
    """Closed requests per queue by outcome: accept, decline, cancel (answered), expired, withdrawn."""
    requests = ElicitationRequest.objects.filter(queue__in=list(queues), status__in=OUTCOME_STATUSES)
    if period is not None:
        requests = requests.filter(closed_at__gte=period.start, closed_at__lt=period.end)
    result: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(OUTCOMES, 0))
    for row in requests.values("queue_id", "status", "action").annotate(n=Count("pk")).order_by():
        result[row["queue_id"]][outcome_of(row["status"], row["action"])] += row["n"]
    return dict(result)


def _breach_events(period: Period | None) -> QuerySet[RequestEvent]:
    # Only the system's expiries are breaches: an operator expiring a request early is a decision, not a miss.
    events = RequestEvent.objects.filter(kind__in=BREACH_KINDS, actor_type=ActorType.SYSTEM)
    if period is not None:
        events = events.filter(at__gte=period.start, at__lt=period.end)
    return events


def breach_counts(queues: Iterable[Queue], period: Period | None = None) -> dict[str, int]:
    """Deadline breaches per queue slug: expiries in it, and escalations out of it."""
    slugs = {q.slug for q in queues}
    counts: dict[str, int] = defaultdict(int)
    events = _breach_events(period)
    for row in (
        events.filter(kind="expired").values("request__queue__slug").annotate(n=Count("pk")).order_by()
    ):
        counts[row["request__queue__slug"]] += row["n"]
    escalated = events.filter(kind="escalated").values("detail__from_queue").annotate(n=Count("pk"))
    for moved in escalated.order_by():
        counts[moved["detail__from_queue"]] += moved["n"]
    return {slug: n for slug, n in counts.items() if slug in slugs}


@dataclass
class Breaches:
    bucket_starts: list[datetime]
    bucket_size: timedelta
    by_queue: dict[str, list[int]] = field(default_factory=dict)


def breaches_over_time(queues: Iterable[Queue], period: Period) -> Breaches:
    size, starts = period.buckets()
    slugs = sorted(q.slug for q in queues)
    result = Breaches(starts, size, {slug: [0] * len(starts) for slug in slugs})
    if not starts:
        return result
    rows = _breach_events(period).values_list("at", "kind", "detail", "request__queue__slug")
    for at, kind, detail, current_slug in rows.iterator():
        slug = (detail or {}).get("from_queue") if kind == "escalated" else current_slug
        if slug in result.by_queue:
            index = min(int((at - starts[0]) / size), len(starts) - 1)
            result.by_queue[slug][index] += 1
    return result


def reviewer_throughput(
    queues: Iterable[Queue], period: Period, limit: int = 12
) -> dict[str, dict[str, int]]:
    """Answers per reviewer in the period, by action; the busiest `limit` reviewers, busiest first."""
    rows = (
        ElicitationRequest.objects.filter(
            queue__in=list(queues),
            status=Status.COMPLETED,
            closed_at__gte=period.start,
            closed_at__lt=period.end,
            answered_by__isnull=False,
        )
        .values("answered_by__username", "action")
        .annotate(n=Count("pk"))
        .order_by()
    )
    per: dict[str, dict[str, int]] = defaultdict(lambda: {"accept": 0, "decline": 0, "cancel": 0})
    for row in rows:
        per[row["answered_by__username"]][row["action"]] += row["n"]
    busiest = sorted(per.items(), key=lambda item: (-sum(item[1].values()), item[0]))[:limit]
    return dict(busiest)


# --- queue depth over time -------------------------------------------------------------------------------------


DEPTH_INTERVALS = [timedelta(minutes=m) for m in (5, 15, 30, 60, 120, 240, 360, 720, 1440)]


@dataclass
class DepthSeries:
    times: list[datetime]  # interval boundaries: one more than the values
    by_queue: dict[str, list[int]]


def depth_intervals(period: Period, most: int = 200) -> list[datetime]:
    """Boundaries of equal intervals on a round grid (5 min to a day) covering the period, at most `most`."""
    size = next((s for s in DEPTH_INTERVALS if period.length / s <= most), DEPTH_INTERVALS[-1])
    midnight = period.start.replace(hour=0, minute=0, second=0, microsecond=0)
    moment = midnight + size * ((period.start - midnight) // size)
    boundaries = [moment]
    while moment < period.end:
        moment += size
        boundaries.append(moment)
    return boundaries


def depth_over_time(queues: Iterable[Queue], period: Period) -> DepthSeries:
    """The peak number of open requests (pending or claimed) per queue in each interval of the period.

    Peaks rather than point samples: a burst that came and went between two samples still shows.
    """
    slugs = sorted(q.slug for q in queues)
    slug_of = dict(Queue.objects.values_list("pk", "slug"))
    times = depth_intervals(period)
    begin, finish = times[0], times[-1]
    window_events = RequestEvent.objects.filter(
        at__gte=begin, at__lt=finish, kind__in=("created", "escalated", *CLOSING_KINDS)
    )
    # Where an escalated request sat before its first escalation in the period: its queue at the start.
    first_from: dict[Any, str] = {}
    escalations = window_events.filter(kind="escalated").order_by("id").values_list("request_id", "detail")
    for request_id, detail in escalations:
        first_from.setdefault(request_id, (detail or {}).get("from_queue", ""))

    depth: dict[str, int] = defaultdict(int)
    location: dict[Any, str] = {}
    open_at_start = ElicitationRequest.objects.filter(created_at__lt=begin).filter(
        Q(closed_at__isnull=True) | Q(closed_at__gte=begin)
    )
    for request_id, queue_id in open_at_start.values_list("pk", "queue_id").iterator():
        slug = first_from.get(request_id, slug_of.get(queue_id, ""))
        location[request_id] = slug
        depth[slug] += 1

    peaks: dict[str, list[int]] = {slug: [] for slug in slugs}
    current: dict[str, int] = {slug: depth[slug] for slug in slugs}  # the open interval's peak so far
    interval = 0
    rows = window_events.order_by("at", "id").values_list(
        "request_id", "kind", "at", "detail", "request__queue_id"
    )
    for request_id, kind, at, detail, queue_id in rows.iterator():
        while at >= times[interval + 1]:
            for slug in slugs:
                peaks[slug].append(current[slug])
                current[slug] = max(depth[slug], 0)
            interval += 1
        if kind == "created":
            if request_id in location:
                continue  # already counted as open at the start
            slug = first_from.get(request_id, slug_of.get(queue_id, ""))
            location[request_id] = slug
            depth[slug] += 1
        elif kind == "escalated":
            moved = detail or {}
            if location.pop(request_id, None) is not None:
                depth[moved.get("from_queue", "")] -= 1
            location[request_id] = moved.get("to_queue", "")
            depth[location[request_id]] += 1
        elif request_id in location:
            depth[location.pop(request_id)] -= 1
        for slug in slugs:
            current[slug] = max(current[slug], depth[slug])
    while interval < len(times) - 1:
        for slug in slugs:
            peaks[slug].append(current[slug])
            current[slug] = max(depth[slug], 0)
        interval += 1
    return DepthSeries(times, peaks)


# --- the current state -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QueueNow:
    queue: Queue
    pending: int
    claimed: int
    overdue: int
    oldest_pending_at: datetime | None


def queues_now(queues: Iterable[Queue], now: datetime | None = None) -> list[QueueNow]:
    # Counted by the selector the dashboard, queue page and reviewer API use: one definition of each count.
    summaries = selectors.open_counts(Queue.objects.filter(pk__in=[q.pk for q in queues]), now)
    return [QueueNow(s.queue, s.pending, s.claimed, s.overdue, s.oldest_pending_at) for s in summaries]


def expected_wait_for_arrival(queue: Queue, now: datetime) -> float | None:
    """Seconds a request arriving now (priority 0, the queue's default deadline) would likely wait for its answer,
    by the estimate agents are given (queue/expected_wait.py); None when the queue's history says nothing."""
    return expected_wait.expected_wait_seconds(
        expected_wait.queue_snapshot(queue, now),
        priority=0,
        created_at=now,
        holder=None,
        deadline=now + timedelta(seconds=queue.default_deadline_seconds),
        now=now,
    )


# --- Prometheus exposition -------------------------------------------------------------------------------------


class ReviewHubCollector(Collector):
    """The dashboard's figures as Prometheus families, read from the database on every collect (a scrape).

    Counters are all-time; latency quantiles cover the last 24 hours."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        now = self.now or clock.now()
        queues = list(Queue.objects.order_by("slug"))
        slug_of = {q.pk: q.slug for q in queues}
        current = queues_now(queues, now)
        open_requests = GaugeMetricFamily(
            "reviewhub_queue_open_requests", "Open requests per queue and status.", labels=["queue", "status"]
        )
        overdue = GaugeMetricFamily(
            "reviewhub_queue_overdue_requests",
            "Open requests past their deadline that the sweep has not expired yet.",
            labels=["queue"],
        )
        oldest = GaugeMetricFamily(
            "reviewhub_queue_oldest_pending_age_seconds",
            "Age of the oldest pending request per queue (0 when none is pending).",
            labels=["queue"],
        )
        for status in ("pending", "claimed"):
            for q in current:
                open_requests.add_metric([q.queue.slug, status], getattr(q, status))
        waits = GaugeMetricFamily(
            "reviewhub_queue_expected_wait_seconds",
            "How long a request arriving now would likely wait for its answer (the estimate agents get as "
            "expectedWaitSeconds); absent for a queue without enough history.",
            labels=["queue"],
        )
        for q in current:
            overdue.add_metric([q.queue.slug], q.overdue)
            age = (now - q.oldest_pending_at).total_seconds() if q.oldest_pending_at else 0
            oldest.add_metric([q.queue.slug], max(age, 0))
            wait = expected_wait_for_arrival(q.queue, now)
            if wait is not None:
                waits.add_metric([q.queue.slug], wait)
        yield from (open_requests, overdue, oldest, waits)

        closed = CounterMetricFamily(
            "reviewhub_requests_closed_total",
            "Closed requests per queue and outcome (accept, decline, cancel, expired, withdrawn).",
            labels=["queue", "outcome"],
        )
        for queue_id, by_outcome in sorted(outcomes(queues, None).items(), key=lambda item: slug_of[item[0]]):
            for outcome, count in by_outcome.items():
                closed.add_metric([slug_of[queue_id], outcome], count)
        yield closed

        breaches = breach_counts(queues)
        breached = CounterMetricFamily(
            "reviewhub_deadline_breaches_total",
            "Requests whose deadline passed in a queue (expired there, or escalated out of it).",
            labels=["queue"],
        )
        for queue in queues:
            breached.add_metric([queue.slug], breaches.get(queue.slug, 0))
        yield breached

        day = Period.last(1, now)
        for name, figures, what in (
            (
                "reviewhub_time_to_first_claim_seconds",
                time_to_first_claim_by_queue_pair(queues, day),
                "arrival to first claim",
            ),
            (
                "reviewhub_time_to_completion_seconds",
                time_to_completion_by_queue_pair(queues, day),
                "arrival to answer",
            ),
        ):
            latency = GaugeMetricFamily(
                name,
                f"Seconds from {what}, per queue the request arrived in (queue) and queue it is in now "
                "(current_queue), over the last 24 hours (quantiles 0.5 and 0.9).",
                labels=["queue", "current_queue", "quantile"],
            )
            for (arrival_id, current_id), figure in sorted(
                figures.items(), key=lambda item: (slug_of[item[0][0]], slug_of[item[0][1]])
            ):
                for label, value in (("0.5", figure.p50), ("0.9", figure.p90)):
                    if value is not None:
                        latency.add_metric([slug_of[arrival_id], slug_of[current_id], label], value)
            yield latency

        answered = CounterMetricFamily(
            "reviewhub_reviewer_answers_total", "Requests answered per reviewer.", labels=["reviewer"]
        )
        rows = (
            ElicitationRequest.objects.filter(status=Status.COMPLETED, answered_by__isnull=False)
            .values("answered_by__username")
            .annotate(n=Count("pk"))
            .order_by("answered_by__username")
        )
        for row in rows:
            answered.add_metric([row["answered_by__username"]], row["n"])
        yield answered

        counts = dict(WebhookDelivery.objects.values_list("status").annotate(n=Count("pk")).order_by())
        deliveries = GaugeMetricFamily(
            "reviewhub_webhook_deliveries",
            "Webhook deliveries by status (pending, delivered, dead).",
            labels=["status"],
        )
        for status in DeliveryStatus.values:
            deliveries.add_metric([status], counts.get(status, 0))
        yield deliveries


def registry(now: datetime | None = None) -> CollectorRegistry:
    """A registry of its own per scrape: the values come from the database, not from process-local counters,
    so every process answers the same and nothing is registered globally."""
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(ReviewHubCollector(now))
    return scrape
