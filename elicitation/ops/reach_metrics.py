"""Time to a human, per request: arrival → first notification sent (per channel) → first viewed → claimed →
answered. Charted per queue and stage on the metrics page; exported on /metrics.

Each stage is measured from the request's creation: the first notice `sent_at` of each channel (reach's Notice
rows: e-mail accepted by the mail server, Slack post acknowledged, desktop notification shown by the page), the
first `viewed` audit row (a reviewer opened its page), `first_claimed_at`, and `closed_at` of a completed request.
Tier-2 notices (a holder reminded at T2) are not counted: by then a human had the request already.
Figures cover requests created in the period, the most recent MAX_SAMPLE per arrival queue, computed in Python so
that SQLite and PostgreSQL agree; percentiles interpolate linearly between ranks (as PostgreSQL's percentile_cont).

Figures are kept by the queue a request arrived in, with the queue it is in now as a second key: a request
escalated for being slow stays in the figures of the queue that missed its target (`metrics.arrived_in`). The
page charts each arrival queue's figures, then those of its requests now elsewhere ("payments → seniors");
/metrics labels every series with both (`queue`, `current_queue`).
"""

import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.db.models import Min
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from elicitation.delivery.routing import HOLDER_TIER
from elicitation.models import Channel, ElicitationRequest, Notice, NoticeStatus, Queue, RequestEvent, Status
from elicitation.ops import charts
from elicitation.ops.metrics import arrival_queue_id, arrived_in
from elicitation.queue import clock

STAGES: tuple[str, ...] = (
    "notified:" + Channel.EMAIL,
    "notified:" + Channel.SLACK,
    "notified:" + Channel.BROWSER,
    "notified:" + Channel.PUSH,
    "viewed",
    "claimed",
    "answered",
)
# The chart's row labels are narrow: "payments e-mail" rather than "payments notified:email".
SHORT_LABELS = {
    "notified:email": "e-mail",
    "notified:slack": "Slack",
    "notified:browser": "browser",
    "notified:push": "Web Push",
}
MAX_SAMPLE = 5000
EXPORT_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class StageFigures:
    p50: float | None  # seconds
    p90: float | None
    count: int


class FiguresKey(NamedTuple):
    arrival: int  # the queue the requests arrived in
    current: (
        int | None
    )  # the queue they are in now; None: wherever they are now (the arrival queue's figures)
    stage: str


def quantile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[round(fraction * 100) - 1]


def _seconds(start: datetime, end: datetime | None) -> float | None:
    return None if end is None else max((end - start).total_seconds(), 0.0)


def _requests(queues: list[Queue], start: datetime, end: datetime) -> list[dict[str, Any]]:
    """Requests created in [start, end) that arrived in one of `queues` (the newest MAX_SAMPLE per queue), and
    those escalated into one of them from elsewhere (the newest MAX_SAMPLE)."""
    created = ElicitationRequest.objects.filter(created_at__gte=start, created_at__lt=end).annotate(
        arrived=arrival_queue_id()
    )
    fields = ("pk", "arrived", "queue_id", "created_at", "first_claimed_at", "closed_at", "status")
    newest = created.order_by("-created_at").values(*fields)
    found: dict[object, dict[str, Any]] = {}
    for queue in queues:
        found.update((r["pk"], r) for r in newest.filter(arrived_in([queue]))[:MAX_SAMPLE])
    from_elsewhere = newest.filter(queue__in=[q.pk for q in queues]).exclude(arrived_in(queues))
    found.update((r["pk"], r) for r in from_elsewhere[:MAX_SAMPLE])
    return list(found.values())


def time_to_human(queues: Iterable[Queue], start: datetime, end: datetime) -> dict[FiguresKey, StageFigures]:
    """Figures of requests created in [start, end) that arrived in, or are now in, one of `queues`: per arrival
    queue, current queue and stage, and, for arrival queues among `queues`, per arrival queue and stage wherever
    the requests are now (`current` None)."""
    queues = list(queues)
    shown = {q.pk for q in queues}
    requests = _requests(queues, start, end)
    ids = [r["pk"] for r in requests]
    firsts: dict[tuple[object, str], datetime] = {
        (row["request_id"], row["channel"]): row["first"]
        for row in Notice.objects.filter(request_id__in=ids, status=NoticeStatus.SENT, tier__lt=HOLDER_TIER)
        .values("request_id", "channel")
        .annotate(first=Min("sent_at"))
    }
    viewed = {
        row["request_id"]: row["first"]
        for row in RequestEvent.objects.filter(request_id__in=ids, kind="viewed")
        .values("request_id")
        .annotate(first=Min("at"))
    }
    samples: dict[FiguresKey, list[float]] = defaultdict(list)
    for r in requests:
        arrived = r["created_at"]
        moments = {stage: firsts.get((r["pk"], stage.split(":", 1)[1])) for stage in STAGES[:4]}
        moments["viewed"] = viewed.get(r["pk"])
        moments["claimed"] = r["first_claimed_at"]
        moments["answered"] = r["closed_at"] if r["status"] == Status.COMPLETED else None
        for stage, moment in moments.items():
            took = _seconds(arrived, moment)
            if took is None:
                continue
            samples[FiguresKey(r["arrived"], r["queue_id"], stage)].append(took)
            if r["arrived"] in shown:
                samples[FiguresKey(r["arrived"], None, stage)].append(took)
    return {
        key: StageFigures(quantile(sorted(values), 0.5), quantile(sorted(values), 0.9), len(values))
        for key, values in samples.items()
    }


def spreads(queues: list[Queue], start: datetime, end: datetime) -> list[charts.Spread]:
    """Rows for the metrics page's chart, in stage order: each arrival queue's figures ("payments claimed"), then
    those of its requests now in another queue ("payments → seniors claimed"); requests escalated into one of
    `queues` from a queue not shown appear under their arrival queue's name too."""
    figures = time_to_human(queues, start, end)
    slug_of = dict(
        Queue.objects.filter(
            pk__in={k.arrival for k in figures} | {k.current for k in figures if k.current}
        ).values_list("pk", "slug")
    )
    rows = []
    for arrival in sorted({key.arrival for key in figures}, key=lambda pk: slug_of[pk]):
        elsewhere = sorted(
            {key.current for key in figures if key.arrival == arrival and key.current not in (None, arrival)},
            key=lambda pk: slug_of[pk],
        )
        for current in (None, *elsewhere):
            name = slug_of[arrival] if current is None else f"{slug_of[arrival]} → {slug_of[current]}"
            for stage in STAGES:
                found = figures.get(FiguresKey(arrival, current, stage))
                if found is not None:
                    rows.append(
                        charts.Spread(
                            f"{name} {SHORT_LABELS.get(stage, stage)}", found.p50, found.p90, found.count
                        )
                    )
    return rows


def chart(queues: list[Queue], start: datetime, end: datetime, width: int) -> str:
    return charts.percentile_chart("Time to a human", spreads(queues, start, end), width=width)


class ReachCollector(Collector):
    """`reviewhub_time_to_human_seconds{queue, current_queue, stage, quantile}` and
    `reviewhub_time_to_human_requests{queue, current_queue, stage}` over the requests created in the last day:
    `queue` is the queue a request arrived in, `current_queue` the one it is in now."""

    def __init__(self, now: datetime | None = None) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        end = self.now or clock.now()
        queues = list(Queue.objects.all())
        slug = {q.pk: q.slug for q in queues}
        figures = time_to_human(queues, end - EXPORT_WINDOW, end)
        seconds = GaugeMetricFamily(
            "reviewhub_time_to_human_seconds",
            "Seconds from a request's arrival to each stage (first notification per channel, viewed, claimed, "
            "answered), per queue it arrived in (queue) and queue it is in now (current_queue), over requests "
            "created in the last day.",
            labels=["queue", "current_queue", "stage", "quantile"],
        )
        counts = GaugeMetricFamily(
            "reviewhub_time_to_human_requests",
            "Requests created in the last day that reached each stage, per queue they arrived in (queue) and "
            "queue they are in now (current_queue).",
            labels=["queue", "current_queue", "stage"],
        )
        # Every (arrival, current) pair: counts add up across current queues; the arrival queue's own figures
        # (current None) are the page's, since quantiles of a whole do not follow from those of its parts.
        by_pair = [
            ([slug[key.arrival], slug[key.current], key.stage], found)
            for key, found in figures.items()
            if key.current is not None
        ]
        for labels, found in sorted(by_pair, key=lambda item: item[0]):
            for label, value in (("0.5", found.p50), ("0.9", found.p90)):
                if value is not None:
                    seconds.add_metric([*labels, label], value)
            counts.add_metric(labels, found.count)
        yield seconds
        yield counts
