"""The dashboard's figures, computed from a small history whose answers are known."""

import bisect
import os
from datetime import datetime, timedelta

import pytest
from django.contrib.auth.models import User
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from elicitation.models import ElicitationRequest, ExpiryOutcome, Queue
from elicitation.ops import metrics
from elicitation.queue import transitions


def exposed() -> str:
    """The text the metrics endpoint serves for ReviewHub's own figures (its registry, encoded by prometheus_client)."""
    return generate_latest(metrics.registry()).decode()


@pytest.fixture
def arrive(make_request, clock):
    """Create a request at the clock's time (created_at is auto_now_add, so it is set to the clock here)."""

    def make(**fields) -> ElicitationRequest:
        request = make_request(**fields)
        ElicitationRequest.objects.filter(pk=request.pk).update(created_at=clock.current)
        request.refresh_from_db()
        return request

    return make


def at(times: list[datetime], moment: datetime) -> int:
    """Index of the interval holding `moment`."""
    return bisect.bisect_right(times, moment) - 1


@pytest.mark.parametrize(
    ("values", "fraction", "expected"),
    [([], 0.5, None), ([7.0], 0.9, 7.0), ([10, 20, 30, 40, 50], 0.5, 30), ([10, 20, 30, 40, 50], 0.9, 46)],
)
def test_percentile_interpolates_like_percentile_cont(values, fraction, expected) -> None:
    assert metrics.percentile(values, fraction) == expected


def test_time_to_first_claim_and_completion_per_queue(arrive, reviewer, queue, clock) -> None:
    start = clock.current
    for wait in (10, 20, 30, 40, 50):
        request = arrive()
        clock.advance(seconds=wait)
        transitions.claim_request(request.pk, user=reviewer)
        clock.advance(seconds=wait)
        transitions.respond(request.pk, user=reviewer, action="decline")
    arrive()  # never claimed: counts for neither
    period = metrics.Period(start - timedelta(minutes=1), clock.advance(seconds=1))

    first = metrics.time_to_first_claim([queue], period)[queue.pk]
    done = metrics.time_to_completion([queue], period)[queue.pk]

    assert (first.p50, first.p90, first.count) == (30, 46, 5)
    assert (done.p50, done.p90, done.count) == (60, 92, 5)


def test_outcomes_per_queue(arrive, reviewer, agent, queue, other_queue, clock, admin_user) -> None:
    start = clock.current
    for action in ("accept", "decline", "decline", "cancel"):
        request = arrive()
        transitions.claim_request(request.pk, user=reviewer)
        content = {"approve": True} if action == "accept" else None
        transitions.respond(request.pk, user=reviewer, action=action, content=content)
    transitions.withdraw_request(arrive().pk, agent=agent)
    transitions.expire_request(arrive().pk, actor_user=admin_user)
    arrive()  # still open: no outcome yet

    result = metrics.outcomes([queue, other_queue], metrics.Period(start, clock.advance(seconds=1)))

    assert result == {queue.pk: {"accept": 1, "decline": 2, "cancel": 1, "expired": 1, "withdrawn": 1}}


@pytest.fixture
def escalating(queue: Queue) -> Queue:
    seniors = Queue.objects.create(slug="seniors", name="Seniors", default_deadline_seconds=3600)
    queue.expiry_outcome, queue.escalation_queue = ExpiryOutcome.ESCALATE, seniors
    queue.save()
    return seniors


def test_breaches_count_system_expiries_and_escalations_out_of_the_queue(
    arrive, queue, escalating, clock, admin_user
) -> None:
    start = clock.current
    arrive(expires_in=60)
    arrive(expires_in=60)
    clock.advance(seconds=61)
    transitions.expire_overdue_requests()  # two escalations out of payments
    clock.advance(hours=2)
    transitions.expire_overdue_requests()  # both expire in seniors
    transitions.expire_request(arrive().pk, actor_user=admin_user)  # an operator's decision: no breach
    period = metrics.Period(start, clock.advance(seconds=1))

    assert metrics.breach_counts([queue, escalating], period) == {"payments": 2, "seniors": 2}
    over_time = metrics.breaches_over_time([queue, escalating], period)
    assert over_time.bucket_size == timedelta(hours=1)
    assert sum(over_time.by_queue["payments"]) == 2
    assert over_time.by_queue["seniors"][-1] == 2


def test_reviewer_throughput_is_busiest_first_by_action(arrive, make_reviewer, queue, clock) -> None:
    start = clock.current
    bob = make_reviewer("bob", queue)
    cleo = make_reviewer("cleo", queue)
    for user, actions in ((bob, ["decline"]), (cleo, ["decline", "cancel", "decline"])):
        for action in actions:
            request = arrive()
            transitions.claim_request(request.pk, user=user)
            transitions.respond(request.pk, user=user, action=action)

    result = metrics.reviewer_throughput([queue], metrics.Period(start, clock.advance(seconds=1)))

    assert list(result) == ["cleo", "bob"]
    assert result["cleo"] == {"accept": 0, "decline": 2, "cancel": 1}


def test_depth_over_time_replays_the_audit_including_escalation(
    arrive, reviewer, agent, queue, escalating, clock
) -> None:
    t0 = clock.current.replace(minute=0, second=0, microsecond=0) - timedelta(days=1)
    clock.current = t0
    arrive(expires_in=86400)  # before the period: counted from its start
    clock.current = t0 + timedelta(hours=1)
    first, second = arrive(expires_in=86400), arrive(expires_in=86400)
    clock.current = t0 + timedelta(hours=3)
    transitions.claim_request(first.pk, user=reviewer)
    transitions.respond(first.pk, user=reviewer, action="decline")
    clock.current = t0 + timedelta(hours=5)
    transitions.withdraw_request(second.pk, agent=agent)
    clock.current = t0 + timedelta(hours=6)
    late = arrive(expires_in=600)
    clock.current = t0 + timedelta(hours=6, minutes=20)
    transitions.expire_overdue_requests()  # `late` escalates to seniors
    period = metrics.Period(t0 + timedelta(minutes=30), t0 + timedelta(hours=12))

    depth = metrics.depth_over_time([queue, escalating], period)
    times, payments, seniors = depth.times, depth.by_queue["payments"], depth.by_queue["seniors"]

    assert len(times) == len(payments) + 1
    assert times[1] - times[0] == timedelta(minutes=5)
    assert payments[0] == 1  # already_open
    assert payments[at(times, t0 + timedelta(hours=2))] == 3
    assert payments[at(times, t0 + timedelta(hours=4))] == 2
    assert payments[at(times, t0 + timedelta(hours=5, minutes=30))] == 1
    assert payments[at(times, t0 + timedelta(hours=6, minutes=10))] == 2
    assert (payments[-1], seniors[-1]) == (1, 1)
    assert seniors[at(times, t0 + timedelta(hours=6, minutes=5))] == 0
    assert ElicitationRequest.objects.get(pk=late.pk).queue == escalating


def test_depth_peaks_catch_a_burst_between_samples(arrive, agent, queue, clock) -> None:
    t0 = clock.current.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)
    clock.current = t0 + timedelta(minutes=1)
    burst = [arrive() for _ in range(4)]
    clock.current = t0 + timedelta(minutes=2)
    for request in burst:
        transitions.withdraw_request(request.pk, agent=agent)

    depth = metrics.depth_over_time([queue], metrics.Period(t0, t0 + timedelta(hours=1)))

    assert depth.by_queue["payments"][0] == 4
    assert depth.by_queue["payments"][1] == 0


def test_queues_now(arrive, reviewer, queue, clock) -> None:
    arrive()
    transitions.claim_request(arrive().pk, user=reviewer)
    arrive(expires_in=5)
    clock.advance(seconds=10)

    [now] = metrics.queues_now([queue])

    assert (now.pending, now.claimed, now.overdue) == (2, 1, 1)


def test_prometheus_exposition(arrive, reviewer, queue, clock) -> None:
    request = arrive()
    clock.advance(seconds=30)
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=30)
    transitions.respond(request.pk, user=reviewer, action="decline")
    arrive()
    clock.advance(seconds=1)

    text = exposed()
    lines = text.splitlines()

    # prometheus_client writes labels sorted by name and every value as a float.
    assert 'reviewhub_queue_open_requests{queue="payments",status="pending"} 1.0' in lines
    assert 'reviewhub_requests_closed_total{outcome="decline",queue="payments"} 1.0' in lines
    here = 'current_queue="payments",quantile'
    assert f'reviewhub_time_to_first_claim_seconds{{{here}="0.5",queue="payments"}} 30.0' in lines
    assert f'reviewhub_time_to_completion_seconds{{{here}="0.9",queue="payments"}} 60.0' in lines
    assert 'reviewhub_reviewer_answers_total{reviewer="alice"} 1.0' in lines
    assert 'reviewhub_webhook_deliveries{status="dead"} 0.0' in lines
    assert "# TYPE reviewhub_deadline_breaches_total counter" in lines
    assert "# TYPE reviewhub_queue_oldest_pending_age_seconds gauge" in lines
    for line in lines:
        assert line.startswith("#") or line.rsplit(" ", 1)[1].replace(".", "", 1).isdigit(), line


def test_prometheus_parses_what_is_exposed_and_each_scrape_reads_the_database_afresh(
    arrive, reviewer, queue
) -> None:
    arrive()
    first = {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(exposed())
        if family.name == "reviewhub_queue_open_requests"
        for sample in family.samples
    }
    transitions.claim_request(arrive().pk, user=reviewer)
    second = {
        sample.labels["status"]: sample.value
        for family in text_string_to_metric_families(exposed())
        if family.name == "reviewhub_queue_open_requests"
        for sample in family.samples
    }

    assert first == {"pending": 1, "claimed": 0}
    assert second == {"pending": 1, "claimed": 1}


def test_prometheus_labels_are_escaped(arrive, queue, make_reviewer) -> None:
    # Usernames are validated by forms, not by the ORM: a label value must survive any text.
    user = make_reviewer("plain", queue)
    User.objects.filter(pk=user.pk).update(username='a"b\\c\nd')
    user.refresh_from_db()
    request = arrive()
    transitions.claim_request(request.pk, user=user)
    transitions.respond(request.pk, user=user, action="decline")

    lines = exposed().splitlines()

    assert 'reviewhub_reviewer_answers_total{reviewer="a\\"b\\\\c\\nd"} 1.0' in lines


@pytest.mark.services
def test_postgresql_percentile_cont_agrees_with_the_python_path(
    arrive, reviewer, queue, clock, monkeypatch
) -> None:
    from django.db import connection

    assert connection.vendor == "postgresql", os.environ.get("DATABASE_URL")
    start = clock.current
    for wait in (3, 5, 8, 13, 21, 34, 55):
        request = arrive()
        clock.advance(seconds=wait)
        transitions.claim_request(request.pk, user=reviewer)
    period = metrics.Period(start - timedelta(minutes=1), clock.advance(seconds=1))

    on_postgres = metrics.time_to_first_claim([queue], period)[queue.pk]
    monkeypatch.setattr(connection, "vendor", "sqlite")
    in_python = metrics.time_to_first_claim([queue], period)[queue.pk]

    assert (on_postgres.p50, on_postgres.count) == (in_python.p50, in_python.count) == (13.0, 7)
    assert on_postgres.p90 == pytest.approx(in_python.p90) == pytest.approx(42.4)
