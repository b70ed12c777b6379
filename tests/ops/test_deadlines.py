"""Deadlines and leases: each expiry outcome, escalation, lease return, and sweeps that are safe to repeat."""

import asyncio
import threading
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from elicitation.delivery import pushes
from elicitation.models import AgentEvent, ExpiryOutcome, Queue, RequestEvent, Status
from elicitation.queue import transitions
from elicitation.queue.errors import InvalidTransition


def _agent_told(request) -> list[AgentEvent]:
    return list(AgentEvent.objects.filter(request=request).order_by("seq"))


def test_a_request_without_expires_in_gets_the_queue_default_deadline(make_request, queue, clock) -> None:
    request = make_request()
    assert request.deadline == clock.current + timedelta(seconds=queue.default_deadline_seconds)


def test_expires_in_overrides_the_queue_default(make_request, clock) -> None:
    request = make_request(expires_in=30)
    assert request.deadline == clock.current + timedelta(seconds=30)


@pytest.mark.parametrize("outcome", [ExpiryOutcome.CANCEL, ExpiryOutcome.DECLINE])
def test_overdue_request_expires_with_the_queue_outcome_and_the_agent_is_told(
    make_request, queue, clock, outcome: str
) -> None:
    queue.expiry_outcome = outcome
    queue.save()
    request = make_request(expires_in=30)
    clock.advance(seconds=29)
    assert transitions.expire_overdue_requests() == 0

    clock.advance(seconds=1)
    assert transitions.expire_overdue_requests() == 1

    request.refresh_from_db()
    assert (request.status, request.action, request.closed_at) == (Status.EXPIRED, outcome, clock.current)
    [told] = _agent_told(request)
    assert told.kind == "expired"
    assert told.payload["result"] == {"action": outcome}
    assert request.events.filter(kind="expired", actor_type="system").count() == 1


def test_the_default_outcome_is_cancel(db) -> None:
    assert Queue.objects.create(slug="fresh", name="Fresh").expiry_outcome == ExpiryOutcome.CANCEL


def test_the_agent_socket_group_hears_of_the_expiry_at_once(
    make_request, agent, clock, django_capture_on_commit_callbacks, settings
) -> None:
    # What matters here is that the expiry is pushed to the agent's group; the in-memory layer shows it
    # synchronously (the Redis transport has its own tests in the services leg).
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(pushes.layer_group(pushes.agent_group(agent.pk)), channel)
    request = make_request(expires_in=10)
    clock.advance(seconds=11)

    with django_capture_on_commit_callbacks(execute=True):
        transitions.expire_overdue_requests()

    message = async_to_sync(asyncio.wait_for)(layer.receive(channel), timeout=2)
    assert message["type"] == "agent.event"
    assert message["event"]["id"] == str(request.pk)
    assert message["event"]["result"] == {"action": "cancel"}


def test_a_claimed_request_past_its_deadline_expires_and_the_claim_is_cleared(
    make_request, reviewer, clock
) -> None:
    request = make_request(expires_in=30)
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=31)

    transitions.expire_overdue_requests()

    request.refresh_from_db()
    assert (request.status, request.claimed_by, request.lease_expires_at) == (Status.EXPIRED, None, None)


def test_expiry_sweep_twice_changes_nothing_the_second_time(make_request, clock) -> None:
    for _ in range(3):
        make_request(expires_in=5)
    clock.advance(seconds=6)
    assert transitions.expire_overdue_requests() == 3
    audit_rows, outbox_rows = RequestEvent.objects.count(), AgentEvent.objects.count()

    assert transitions.expire_overdue_requests() == 0
    assert (RequestEvent.objects.count(), AgentEvent.objects.count()) == (audit_rows, outbox_rows)


@pytest.fixture
def escalating(queue: Queue, db) -> Queue:
    seniors = Queue.objects.create(slug="seniors", name="Seniors", default_deadline_seconds=1200)
    queue.expiry_outcome = ExpiryOutcome.ESCALATE
    queue.escalation_queue = seniors
    queue.save()
    return seniors


def test_escalation_moves_the_request_with_a_new_deadline_and_tells_the_agent_nothing(
    make_request, reviewer, escalating, clock
) -> None:
    request = make_request(expires_in=30)
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=31)

    assert transitions.expire_overdue_requests() == 1

    request.refresh_from_db()
    assert request.queue == escalating
    assert (request.status, request.claimed_by, request.action) == (Status.PENDING, None, "")
    assert request.deadline == clock.current + timedelta(seconds=1200)
    assert _agent_told(request) == []
    escalated = request.events.get(kind="escalated")
    assert escalated.detail == {"from_queue": "payments", "to_queue": "seniors"}
    # A second sweep at the same moment neither escalates again nor expires it.
    assert transitions.expire_overdue_requests() == 0


def test_an_escalated_request_gets_the_final_outcome_of_its_new_queue(
    make_request, escalating, clock
) -> None:
    escalating.expiry_outcome = ExpiryOutcome.DECLINE
    escalating.save()
    request = make_request(expires_in=30)
    clock.advance(seconds=31)
    transitions.expire_overdue_requests()
    clock.advance(seconds=1199)
    assert transitions.expire_overdue_requests() == 0

    clock.advance(seconds=1)
    assert transitions.expire_overdue_requests() == 1

    request.refresh_from_db()
    assert (request.status, request.action) == (Status.EXPIRED, "decline")
    [told] = _agent_told(request)
    assert told.payload["result"] == {"action": "decline"}


def test_an_escalation_cycle_still_ends_with_an_answer_to_the_agent(
    make_request, queue, escalating, clock
) -> None:
    escalating.expiry_outcome = ExpiryOutcome.ESCALATE
    escalating.escalation_queue = queue
    escalating.save()
    request = make_request(expires_in=30)

    clock.advance(seconds=31)
    transitions.expire_overdue_requests()  # payments -> seniors
    clock.advance(seconds=1201)
    transitions.expire_overdue_requests()  # seniors would go back to payments: it has been there, so it ends

    request.refresh_from_db()
    assert (request.status, request.action, request.queue) == (Status.EXPIRED, "cancel", escalating)
    assert len(_agent_told(request)) == 1


def test_answering_after_the_deadline_is_refused_and_the_agent_gets_the_expiry(
    make_request, reviewer, clock
) -> None:
    request = make_request(expires_in=30)
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=31)

    with pytest.raises(InvalidTransition) as refused:
        transitions.respond(request.pk, user=reviewer, action="decline")

    assert refused.value.current_status == Status.EXPIRED
    assert [e.kind for e in _agent_told(request)] == ["expired"]


def test_the_agent_reading_an_overdue_request_before_any_sweep_sees_it_overdue_and_nothing_changes(
    make_request, agent_client, clock
) -> None:
    request = make_request(expires_in=30)
    clock.advance(seconds=31)

    body = agent_client.get(f"/api/v1/requests/{request.pk}").json()

    assert (body["status"], body["overdue"], body["result"]) == ("pending", True, None)
    assert list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True)) == ["created"]


def test_admin_expiry_before_the_deadline_is_recorded_with_the_operator(make_request, admin_user) -> None:
    request = make_request()
    expired = transitions.expire_request(request.pk, actor_user=admin_user)
    assert expired.status == Status.EXPIRED
    assert expired.events.get(kind="expired").actor_user == admin_user


def test_an_unrenewed_lease_returns_the_request_to_the_queue(
    make_request, reviewer, make_reviewer, queue, clock
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=queue.lease_seconds - 1)
    assert transitions.release_expired_claims() == 0

    clock.advance(seconds=1)
    assert transitions.release_expired_claims() == 1
    assert transitions.release_expired_claims() == 0

    request.refresh_from_db()
    assert (request.status, request.claimed_by, request.lease_expires_at) == (Status.PENDING, None, None)
    assert request.events.filter(kind="lease_expired", actor_type="system").count() == 1
    bob = make_reviewer("bob", queue)
    assert transitions.claim_next(queue, user=bob).pk == request.pk
    # The request kept its place and its deadline: the agent was told nothing.
    assert _agent_told(request) == []


def test_a_renewed_lease_is_not_released(make_request, reviewer, queue, clock) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=queue.lease_seconds - 5)
    transitions.renew_claim(request.pk, user=reviewer)
    clock.advance(seconds=10)

    assert transitions.release_expired_claims() == 0
    request.refresh_from_db()
    assert request.claimed_by == reviewer


def _in_threads(function, count: int = 4) -> list:
    """Run `function` in `count` threads released together; each thread closes its own connection."""
    from django.db import connection

    barrier = threading.Barrier(count)
    results: list = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(function())
        finally:
            connection.close()

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return results


@pytest.mark.django_db(transaction=True)
def test_concurrent_sweeps_expire_each_request_once(make_request, clock) -> None:
    requests = [make_request(expires_in=5) for _ in range(6)]
    clock.advance(seconds=6)

    results = _in_threads(transitions.expire_overdue_requests)

    assert sum(results) == 6  # the losers of each row's race skipped it
    for request in requests:
        assert AgentEvent.objects.filter(request=request, kind="expired").count() == 1
        assert RequestEvent.objects.filter(request=request, kind="expired").count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_digest_sweeps_send_one_message(make_request, make_reviewer, queue, clock) -> None:
    from django.core import mail

    from elicitation.ops import notifications

    queue.priority_threshold = 1
    queue.save()
    member = make_reviewer("dora", queue)
    member.email = "dora@example.test"
    member.save()
    for _ in range(5):
        make_request(priority=3)
    clock.advance(seconds=61)

    results = _in_threads(notifications.send_due_digests)

    assert sum(results) == 1
    assert len(mail.outbox) == 1
