"""Time to a human, per request: arrival → first notification sent (per channel) → first viewed → claimed →
answered. Charted per queue and stage on the metrics page; exported on /metrics.

Each stage is measured from the request's creation: the first notice `sent_at` of each channel (reach's Notice
rows: e-mail accepted by the mail server, Slack post acknowledged, desktop notification shown by the page), the
first `viewed` audit row (a reviewer opened its page), `first_claimed_at`, and `closed_at` of a completed request.
Figures cover requests created in the period, the most recent MAX_SAMPLE per queue, computed in Python so that
SQLite and PostgreSQL agree; percentiles interpolate linearly between ranks (as PostgreSQL's percentile_cont).
"""

import statistics
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Min
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from elicitation.models import Channel, ElicitationRequest, Notice, NoticeStatus, Queue, RequestEvent, Status
from elicitation.ops import charts
from elicitation.queue import clock

STAGES: tuple[str, ...] = (
    "notified:" + Channel.EMAIL,
    "notified:" + Channel.SLACK,
    "notified:" + Channel.BROWSER,
    "viewed",
    "claimed",
    "answered",
)
# The chart's row labels are narrow: "payments e-mail" rather than "payments notified:email".
SHORT_LABELS = {"notified:email": "e-mail", "notified:slack": "Slack", "notified:browser": "browser"}
MAX_SAMPLE = 5000
EXPORT_WINDOW = timedelta(days=1)


@dataclass(frozen=True)
class StageFigures:
    p50: float | None  # seconds
    p90: float | None
    count: int


def quantile(values: list[float], fraction: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[round(fraction * 100) - 1]


def _seconds(start: datetime, end: datetime | None) -> float | None:
    return None if end is None else max((end - start).total_seconds(), 0.0)


def time_to_human(
    queues: Iterable[Queue], start: datetime, end: datetime
) -> dict[tuple[int, str], StageFigures]:
    """{(queue id, stage): figures} for requests created in [start, end)."""
    samples: dict[tuple[int, str], list[float]] = defaultdict(list)
    for queue in queues:
        requests = list(
            ElicitationRequest.objects.filter(queue=queue, created_at__gte=start, created_at__lt=end)
            .order_by("-created_at")
            .values("pk", "created_at", "first_claimed_at", "closed_at", "status")[:MAX_SAMPLE]
        )
        if not requests:
            continue
        ids = [r["pk"] for r in requests]
        firsts: dict[tuple[object, str], datetime] = {
            (row["request_id"], row["channel"]): row["first"]
            for row in Notice.objects.filter(request_id__in=ids, status=NoticeStatus.SENT)
            .values("request_id", "channel")
            .annotate(first=Min("sent_at"))
        }
        viewed = {
            row["request_id"]: row["first"]
            for row in RequestEvent.objects.filter(request_id__in=ids, kind="viewed")
            .values("request_id")
            .annotate(first=Min("at"))
        }
        for r in requests:
            arrived = r["created_at"]
            moments = {stage: firsts.get((r["pk"], stage.split(":", 1)[1])) for stage in STAGES[:3]}
            moments["viewed"] = viewed.get(r["pk"])
            moments["claimed"] = r["first_claimed_at"]
            moments["answered"] = r["closed_at"] if r["status"] == Status.COMPLETED else None
            for stage, moment in moments.items():
                took = _seconds(arrived, moment)
                if took is not None:
                    samples[(queue.pk, stage)].append(took)
    return {
        key: StageFigures(quantile(sorted(values), 0.5), quantile(sorted(values), 0.9), len(values))
        for key, values in samples.items()
    }


def spreads(queues: list[Queue], start: datetime, end: datetime) -> list[charts.Spread]:
    """Rows for the metrics page's chart: one per queue and stage that has figures, in stage order."""
    figures = time_to_human(queues, start, end)
    rows = []
    for queue in sorted(queues, key=lambda q: q.slug):
        for stage in STAGES:
            found = figures.get((queue.pk, stage))
            if found is not None:
                label = f"{queue.slug} {SHORT_LABELS.get(stage, stage)}"
                rows.append(charts.Spread(label, found.p50, found.p90, found.count))
    return rows


def chart(queues: list[Queue], start: datetime, end: datetime, width: int) -> str:
    return charts.percentile_chart("Time to a human", spreads(queues, start, end), width=width)


class ReachCollector(Collector):
    """`reviewhub_time_to_human_seconds{queue, stage, quantile}` and `reviewhub_time_to_human_requests{queue,
    stage}` over the requests created in the last day."""

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
            "answered), over requests created in the last day.",
            labels=["queue", "stage", "quantile"],
        )
        counts = GaugeMetricFamily(
            "reviewhub_time_to_human_requests",
            "Requests created in the last day that reached each stage.",
            labels=["queue", "stage"],
        )
        for (queue_id, stage), found in sorted(
            figures.items(), key=lambda item: (slug[item[0][0]], item[0][1])
        ):
            for label, value in (("0.5", found.p50), ("0.9", found.p90)):
                if value is not None:
                    seconds.add_metric([slug[queue_id], stage, label], value)
            counts.add_metric([slug[queue_id], stage], found.count)
        yield seconds
        yield counts
