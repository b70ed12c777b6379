"""Time-to-a-human figures are kept by the queue a request arrived in: a request escalated for being slow stays in
the figures of the queue that missed its target (and shows where it is now), on the metrics page and in /metrics."""

import importlib
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import (
    Channel,
    ElicitationRequest,
    ExpiryOutcome,
    Notice,
    NoticeStatus,
    Queue,
    RequestEvent,
)
from elicitation.ops import metrics, reach_metrics
from elicitation.queue import transitions


@pytest.fixture
def escalated(
    clock: Any,
    queue: Queue,
    other_queue: Queue,
    make_reviewer: Callable[..., User],
    make_request: Callable[..., ElicitationRequest],
) -> ElicitationRequest:
    """Arrived in payments, nobody took it for 10 minutes, escalated to other, claimed there a minute later (660 s
    after arrival) and answered 30 s after that; a second payments request was claimed and answered in 20 s."""
    queue.expiry_outcome, queue.escalation_queue = ExpiryOutcome.ESCALATE, other_queue
    queue.save()
    senior = make_reviewer("senior", other_queue)
    alice = make_reviewer("alice-fast", queue)
    slow = make_request(expires_in=600)
    clock.current = slow.created_at
    quick = make_request()
    ElicitationRequest.objects.filter(pk=quick.pk).update(created_at=clock.current)
    clock.advance(seconds=20)
    transitions.claim_request(quick.pk, user=alice)
    transitions.respond(quick.pk, user=alice, action="decline")
    clock.advance(seconds=581)
    assert transitions.expire_overdue_requests() == 1
    clock.advance(seconds=59)
    transitions.claim_request(slow.pk, user=senior)
    clock.advance(seconds=30)
    transitions.respond(slow.pk, user=senior, action="decline")
    moved = ElicitationRequest.objects.get(pk=slow.pk)
    assert (moved.queue, moved.arrival_queue) == (other_queue, queue)
    return moved


def test_an_escalated_request_counts_in_its_arrival_queues_figures(
    escalated: ElicitationRequest, queue: Queue, other_queue: Queue, clock: Any
) -> None:
    start, end = clock.now() - timedelta(hours=1), clock.now() + timedelta(seconds=1)
    figures = reach_metrics.time_to_human([queue, other_queue], start, end)
    claimed = {(k.arrival, k.current): f for k, f in figures.items() if k.stage == "claimed"}
    assert {key: (f.count, f.p90) for key, f in claimed.items()} == {
        (queue.pk, None): (2, pytest.approx(596.0)),  # p90 of 20 s and 660 s
        (queue.pk, queue.pk): (1, 20.0),
        (queue.pk, other_queue.pk): (1, 660.0),
    }
    # The queue it went to is not charged with the ten minutes spent in payments.
    assert not any(k.arrival == other_queue.pk for k in figures)

    period = metrics.Period(start, end)
    first_claim = metrics.time_to_first_claim([queue, other_queue], period)
    assert {q: (f.count, f.p50) for q, f in first_claim.items()} == {queue.pk: (2, 340.0)}
    done = metrics.time_to_completion([queue, other_queue], period)
    assert {q: (f.count, f.p90) for q, f in done.items()} == {queue.pk: (2, pytest.approx(623.0))}
    by_pair = metrics.time_to_first_claim_by_queue_pair([other_queue], period)
    assert {pair: f.p50 for pair, f in by_pair.items()} == {(queue.pk, other_queue.pk): 660.0}


def test_metrics_exports_figures_by_arrival_queue_with_the_current_queue_as_a_label(
    escalated: ElicitationRequest, clock: Any, settings: Any
) -> None:
    settings.METRICS_TOKEN = "scrape-me"
    response = Client().get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert response.status_code == 200
    lines = response.content.decode().splitlines()
    assert (
        'reviewhub_time_to_human_requests{current_queue="other",queue="payments",stage="claimed"} 1.0'
        in lines
    )
    assert (
        'reviewhub_time_to_human_requests{current_queue="payments",queue="payments",stage="claimed"} 1.0'
        in lines
    )
    assert (
        'reviewhub_time_to_human_seconds{current_queue="other",quantile="0.5",queue="payments",stage="answered"} '
        "690.0" in lines
    )
    assert (
        'reviewhub_time_to_first_claim_seconds{current_queue="other",quantile="0.5",queue="payments"} 660.0'
        in lines
    )
    assert (
        'reviewhub_time_to_completion_seconds{current_queue="payments",quantile="0.5",queue="payments"} 20.0'
        in lines
    )
    # No series says a request arrived in the escalation queue.
    assert not [line for line in lines if re.search(r'[{,]queue="other"', line) and "time_to" in line]


def test_the_metrics_page_charts_an_escalated_request_under_its_arrival_queue(
    escalated: ElicitationRequest, make_reviewer: Callable[..., User], queue: Queue, other_queue: Queue
) -> None:
    boss = make_reviewer("boss", queue, supervisor=True)
    client = Client()
    client.force_login(boss)
    page = client.get("/dashboard/").content.decode()
    assert "payments claimed: median 5.7 min, p90 9.9 min, 2 requests" in page
    assert "payments → other claimed: median 11 min, p90 11 min, 1 requests" in page
    assert "payments: median 5.7 min, p90 9.9 min, 2 requests" in page  # time to first claim

    # The escalation queue's supervisor sees the request under the queue it came from, never as one of theirs.
    senior_boss = make_reviewer("senior-boss", other_queue, supervisor=True)
    client.force_login(senior_boss)
    page = client.get("/dashboard/").content.decode()
    assert "payments → other claimed: median 11 min" in page
    assert "other claimed" not in page.replace("→ other claimed", "")


def test_the_migration_finds_the_arrival_queue_in_the_audit_trail(
    escalated: ElicitationRequest,
    queue: Queue,
    other_queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    stayed = make_request()
    # A second hop: the first `escalated` row names the arrival queue, not the latest one.
    RequestEvent.objects.create(
        request=escalated,
        kind="escalated",
        actor_type="system",
        detail={"from_queue": "other", "to_queue": "third"},
        at=escalated.created_at + timedelta(hours=1),
    )
    ElicitationRequest.objects.update(arrival_queue=None)
    migration = importlib.import_module("elicitation.migrations.0008_claim_at_t2_and_arrival_queue")
    migration.backfill_arrival_queue(apps, None)
    arrivals = dict(ElicitationRequest.objects.values_list("pk", "arrival_queue"))
    assert arrivals[escalated.pk] == queue.pk
    assert arrivals[stayed.pk] == queue.pk
    assert ElicitationRequest.objects.get(pk=escalated.pk).queue == other_queue


def test_a_reminder_to_the_holder_at_t2_is_not_a_first_notification(
    clock: Any, queue: Queue, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request()
    clock.current = request.created_at
    transitions.claim_request(request.pk, user=reviewer)
    for tier, channel, seconds in ((2, Channel.EMAIL, 120), (0, Channel.SLACK, 3)):
        Notice.objects.create(
            request=request,
            channel=channel,
            recipient=f"t2:{queue.pk}:user:{reviewer.pk}" if tier == 2 else f"user:{reviewer.pk}",
            user=reviewer,
            tier=tier,
            status=NoticeStatus.SENT,
            created_at=request.created_at,
            sent_at=request.created_at + timedelta(seconds=seconds),
        )
    figures = reach_metrics.time_to_human(
        [queue], clock.now() - timedelta(hours=1), clock.now() + timedelta(1)
    )
    stages = {key.stage: f.p50 for key, f in figures.items() if key.current is None}
    assert stages == {"notified:slack": 3.0, "claimed": 0.0}
