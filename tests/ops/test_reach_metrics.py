"""Time to a human per request, per queue and stage: charted on the metrics page and exported on /metrics."""

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import Channel, ElicitationRequest, Notice, NoticeStatus, Queue
from elicitation.ops import reach_metrics
from elicitation.queue import audit, transitions


@pytest.fixture
def measured(
    clock: Any, reviewer: User, queue: Queue, make_request: Callable[..., ElicitationRequest]
) -> ElicitationRequest:
    request = make_request()
    arrived = request.created_at
    clock.current = arrived
    for channel, seconds in ((Channel.EMAIL, 4), (Channel.SLACK, 2)):
        Notice.objects.create(
            request=request,
            channel=channel,
            recipient="user:1",
            status=NoticeStatus.SENT,
            created_at=arrived,
            sent_at=arrived + timedelta(seconds=seconds),
        )
    clock.advance(seconds=30)
    audit.record_view(request, user=reviewer)
    clock.advance(seconds=30)
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=30)
    transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    return request


def test_each_stage_is_measured_from_arrival(measured: ElicitationRequest, queue: Queue, clock: Any) -> None:
    figures = reach_metrics.time_to_human(
        [queue], clock.now() - timedelta(hours=1), clock.now() + timedelta(1)
    )
    by_stage = {key.stage: f.p50 for key, f in figures.items() if key == (queue.pk, None, key.stage)}
    assert by_stage == {
        "notified:email": 4.0,
        "notified:slack": 2.0,
        "viewed": 30.0,
        "claimed": 60.0,
        "answered": 90.0,
    }


def test_percentiles_interpolate_between_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0]
    assert reach_metrics.quantile(values, 0.5) == 6.0
    assert reach_metrics.quantile(values, 0.9) == pytest.approx(10.0)
    assert reach_metrics.quantile([7.0], 0.9) == 7.0
    assert reach_metrics.quantile([], 0.5) is None


def test_metrics_exports_time_to_human(measured: ElicitationRequest, clock: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = "scrape-me"
    clock.current = measured.created_at + timedelta(minutes=5)
    response = Client().get("/metrics", headers={"Authorization": "Bearer scrape-me"})
    assert response.status_code == 200
    text = response.content.decode()
    here = 'current_queue="payments",'
    assert (
        f'reviewhub_time_to_human_seconds{{{here}quantile="0.5",queue="payments",stage="notified:slack"}} 2.0'
        in text
    )
    assert (
        f'reviewhub_time_to_human_seconds{{{here}quantile="0.5",queue="payments",stage="answered"}} 90.0'
        in text
    )
    assert f'reviewhub_time_to_human_requests{{{here}queue="payments",stage="claimed"}} 1.0' in text


def test_the_metrics_page_charts_time_to_a_human(
    measured: ElicitationRequest, make_reviewer: Callable[..., User], queue: Queue, clock: Any
) -> None:
    boss = make_reviewer("boss", queue, supervisor=True)
    clock.current = measured.created_at + timedelta(minutes=5)
    client = Client()
    client.force_login(boss)
    response = client.get("/dashboard/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Time to a human" in page
    assert "payments Slack" in page and "payments e-mail" in page and "payments answered" in page
