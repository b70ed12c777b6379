"""The metrics dashboard (`/dashboard/`, supervisors and staff) and the Prometheus endpoint (`/metrics`)."""

import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client.exposition import choose_encoder

from elicitation.models import Queue
from elicitation.ops import charts, metrics, reach_metrics
from elicitation.queue import access, clock
from elicitation.queue.keys import bearer_token

WIDE, HALF = 1100, 540  # viewBox widths matching the cards' rendered widths, so text keeps its size
NARROW = 360  # a card on a 390 px phone


def _period_days(request: HttpRequest) -> int:
    try:
        days = int(request.GET.get("days", "7"))
    except ValueError:
        days = 7
    return days if days in metrics.PERIOD_DAYS else 7


def _label_for(period: metrics.Period) -> Any:
    hourly = period.length <= timedelta(days=2)
    return (lambda t: t.strftime("%H:%M")) if hourly else (lambda t: t.strftime("%d %b"))


def build_dashboard(queues: list[Queue], period: metrics.Period, now: datetime) -> dict[str, Any]:
    """The figures and their charts for these queues over the period: each chart drawn for a desktop card and
    again for a phone's (NARROW), the page showing the one that fits, so text keeps its size on both."""
    slug_of = {q.pk: q.slug for q in queues}
    current = metrics.queues_now(queues, now)
    depth = metrics.depth_over_time(queues, period)
    first_claim = metrics.time_to_first_claim(queues, period)
    completion = metrics.time_to_completion(queues, period)
    closed = metrics.outcomes(queues, period)
    breaches = metrics.breaches_over_time(queues, period)
    throughput = metrics.reviewer_throughput(queues, period)
    reach_spreads = reach_metrics.spreads(queues, period.start, period.end)

    def spreads(figures: dict[int, metrics.Latency]) -> list[charts.Spread]:
        return [
            charts.Spread(slug_of[queue_id], f.p50, f.p90, f.count)
            for queue_id, f in sorted(figures.items(), key=lambda item: slug_of[item[0]])
        ]

    queue_ids = sorted(closed, key=lambda queue_id: slug_of[queue_id])
    label = _label_for(period)
    reviewers = list(throughput)

    def draw(wide: int, half: int) -> dict[str, Any]:
        return {
            "depth": charts.line_chart(
                "Open requests per queue",
                depth.times,
                [charts.Series(slug, values) for slug, values in depth.by_queue.items()],
                y_label="open requests (peak)",
                width=wide,
            ),
            "first_claim": charts.percentile_chart("Time to first claim", spreads(first_claim), width=half),
            "completion": charts.percentile_chart("Time to completion", spreads(completion), width=half),
            "time_to_human": charts.percentile_chart("Time to a human", reach_spreads, width=wide),
            "outcome": charts.stacked_bars(
                "Outcomes per queue",
                [slug_of[queue_id] for queue_id in queue_ids],
                [
                    charts.Series(
                        outcome,
                        [closed[queue_id][outcome] for queue_id in queue_ids],
                        charts.OUTCOME_COLOURS[outcome],
                    )
                    for outcome in metrics.OUTCOMES
                ],
                width=half,
            ),
            "breach": charts.stacked_bars(
                "Deadline breaches",
                [label(start) for start in breaches.bucket_starts],
                [charts.Series(slug, counts) for slug, counts in breaches.by_queue.items() if any(counts)],
                horizontal=False,
                width=half,
            ),
            "throughput": charts.stacked_bars(
                "Answers per reviewer",
                reviewers,
                [
                    charts.Series(
                        action,
                        [throughput[name][action] for name in reviewers],
                        charts.OUTCOME_COLOURS[action],
                    )
                    for action in ("accept", "decline", "cancel")
                ],
                width=wide,
            ),
        }

    all_outcomes = {outcome: sum(by[outcome] for by in closed.values()) for outcome in metrics.OUTCOMES}
    breach_total = sum(sum(counts) for counts in breaches.by_queue.values())
    return {
        "tiles": [
            ("Open now", sum(q.pending + q.claimed for q in current), "pending or claimed"),
            ("Past deadline", sum(q.overdue for q in current), "waiting for the sweep"),
            (
                "Answered",
                all_outcomes["accept"] + all_outcomes["decline"] + all_outcomes["cancel"],
                "in this period",
            ),
            ("Deadline breaches", breach_total, "in this period"),
        ],
        "backlog": [
            BacklogRow(q, metrics.expected_wait_for_arrival(q.queue, now))
            for q in current
            if q.queue.pk in slug_of
        ],
        "charts": {"wide": draw(WIDE, HALF), "narrow": draw(NARROW, NARROW)},
        "outcome_legend": metrics.OUTCOMES,
    }


@dataclass(frozen=True)
class BacklogRow:
    """A queue's open requests now, beside how long a request arriving now would likely wait."""

    now: metrics.QueueNow
    expected_wait: float | None

    @property
    def expected_wait_text(self) -> str:
        return charts.format_duration(self.expected_wait) if self.expected_wait is not None else "no estimate"


@never_cache
@login_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    if not access.can_view_metrics(request.user):
        raise PermissionDenied("The metrics dashboard is for queue supervisors and staff.")
    queues = list(access.metrics_queues(request.user).order_by("slug"))
    selected = request.GET.get("queue", "")
    if selected:
        queues = [q for q in queues if q.slug == selected] or queues
        selected = selected if any(q.slug == selected for q in queues) else ""
    days = _period_days(request)
    now = clock.now()
    period = metrics.Period.last(days, now)
    context = {
        "days": days,
        "period_choices": metrics.PERIOD_DAYS,
        "period": period,
        "queues": list(access.metrics_queues(request.user).order_by("slug")),
        "selected": selected,
        "now": now,
        **build_dashboard(queues, period, now),
    }
    return render(request, "dashboard/metrics.html", context)


@never_cache
@require_GET
def prometheus(request: HttpRequest) -> HttpResponse:
    """Staff session, or `Authorization: Bearer $METRICS_TOKEN` for a scraper."""
    token = bearer_token(request.headers)
    expected = getattr(settings, "METRICS_TOKEN", "")
    if token is not None:
        if not (expected and hmac.compare_digest(token.encode(), expected.encode())):
            return _unauthorized()
    elif not request.user.is_authenticated:
        return _unauthorized()
    elif not request.user.is_staff:
        return HttpResponse("Staff only.\n", status=403, content_type="text/plain; charset=utf-8")
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    scrape = metrics.registry()
    scrape.register(reach_metrics.ReachCollector())
    return HttpResponse(encode(scrape), content_type=content_type)


def _unauthorized() -> HttpResponse:
    response = HttpResponse(
        "Authentication required.\n", status=401, content_type="text/plain; charset=utf-8"
    )
    response["WWW-Authenticate"] = 'Bearer realm="reviewhub-metrics"'
    return response
