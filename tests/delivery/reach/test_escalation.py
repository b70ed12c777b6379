"""The escalation chain and routing: T1 tells the next tier, T2 moves the request (unless a reviewer holds it: then
the policy's `claimed_at_t2` says keep, notify or move), the deadline is the last step; each step an audit row
taken once, at the right time on a controllable clock; quiet hours respected."""

from collections.abc import Callable
from datetime import UTC, datetime, time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from elicitation.delivery import routing
from elicitation.models import (
    Channel,
    ClaimedAtT2,
    ElicitationRequest,
    EscalationPolicy,
    ExpiryOutcome,
    Notice,
    NoticeStatus,
    Queue,
    ReachRule,
    RequestEvent,
    ReviewerReach,
    Status,
)
from elicitation.queue import transitions
from tests.races import at_once


def kinds(request: ElicitationRequest) -> list[str]:
    return list(RequestEvent.objects.filter(request=request).order_by("id").values_list("kind", flat=True))


@pytest.fixture
def on_call(make_reviewer: Callable[..., User], queue: Queue) -> User:
    user = make_reviewer("oncall", queue)
    user.email = "oncall@example.com"
    user.save()
    rule = ReachRule.objects.create(queue=queue, tier=1, channel=Channel.EMAIL, audience="people")
    rule.people.add(user)
    return user


@pytest.fixture
def policy(queue: Queue, other_queue: Queue) -> EscalationPolicy:
    queue.escalation_queue = other_queue
    queue.save()
    return EscalationPolicy.objects.create(
        queue=queue, unclaimed_after_seconds=60, unanswered_after_seconds=120
    )


def test_unclaimed_request_tells_the_next_tier_at_t1_once(
    clock: Any, policy: EscalationPolicy, on_call: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request()
    clock.advance(seconds=59)
    assert transitions.run_escalation_chain() == 0
    assert mail.outbox == []
    clock.advance(seconds=2)
    with_callbacks = transitions.run_escalation_chain()
    assert with_callbacks == 1
    assert kinds(request) == ["created", "tier_notified"]
    step = RequestEvent.objects.get(request=request, kind="tier_notified")
    assert step.detail == {"step": 1, "queue": "payments", "after_seconds": 60}
    assert step.actor_type == "system"
    assert transitions.run_escalation_chain() == 0
    assert kinds(request).count("tier_notified") == 1


def test_the_tier_is_told_after_commit(
    clock: Any,
    policy: EscalationPolicy,
    on_call: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    request = make_request()
    clock.advance(seconds=61)
    with django_capture_on_commit_callbacks(execute=True):
        transitions.run_escalation_chain()
    notice = Notice.objects.get(request=request)
    assert (notice.channel, notice.user, notice.tier, notice.status) == (
        "email",
        on_call,
        1,
        NoticeStatus.SENT,
    )
    assert [m.to for m in mail.outbox] == [["oncall@example.com"]]


def test_a_claimed_request_is_not_escalated_at_t1(
    clock: Any,
    policy: EscalationPolicy,
    reviewer: User,
    on_call: User,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=61)
    assert transitions.run_escalation_chain() == 0
    assert "tier_notified" not in kinds(request)


def test_unanswered_request_moves_to_the_escalation_queue_at_t2_keeping_its_deadline(
    clock: Any, policy: EscalationPolicy, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=119)
    assert transitions.run_escalation_chain() == 0
    clock.advance(seconds=2)
    assert transitions.run_escalation_chain() == 1
    moved = ElicitationRequest.objects.get(pk=request.pk)
    assert (moved.queue.slug, moved.status, moved.claimed_by) == ("other", Status.PENDING, None)
    assert moved.deadline == request.deadline
    step = RequestEvent.objects.filter(request=request).order_by("-id").first()
    assert step is not None and step.kind == "escalated"
    assert step.detail["step"] == 2 and step.detail["to_queue"] == "other"
    assert transitions.run_escalation_chain() == 0


def test_unanswered_request_is_assigned_to_a_supervisor_at_t2(
    clock: Any,
    policy: EscalationPolicy,
    make_reviewer: Callable[..., User],
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    policy.unanswered_goes_to = "supervisor"
    policy.save()
    boss = make_reviewer("boss", queue, supervisor=True)
    request = make_request()
    clock.advance(seconds=121)
    assert transitions.run_escalation_chain() == 2  # T1 (nobody to tell, still a step) and T2
    assigned = ElicitationRequest.objects.get(pk=request.pk)
    assert (assigned.status, assigned.claimed_by, assigned.lease_expires_at) == (
        Status.CLAIMED,
        boss,
        request.deadline,
    )
    assert kinds(request) == ["created", "tier_notified", "reassigned_to_supervisor"]
    assert transitions.run_escalation_chain() == 0
    # The supervisor answers like anyone holding a claim.
    done = transitions.respond(request.pk, user=boss, action="accept", content={"approve": True})
    assert done.status == Status.COMPLETED


def test_the_deadline_is_the_last_step_and_the_escalate_outcome_still_applies(
    clock: Any,
    queue: Queue,
    other_queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    third = Queue.objects.create(slug="third", name="Third")
    queue.escalation_queue = other_queue
    queue.save()
    other_queue.expiry_outcome = ExpiryOutcome.ESCALATE
    other_queue.escalation_queue = third
    other_queue.save()
    EscalationPolicy.objects.create(queue=queue, unclaimed_after_seconds=60, unanswered_after_seconds=120)
    request = make_request(expires_in=300)
    for seconds in (61, 60, 60, 60):
        clock.advance(seconds=seconds)
        transitions.run_escalation_chain()
        transitions.expire_overdue_requests()
    assert ElicitationRequest.objects.get(pk=request.pk).queue == other_queue
    clock.advance(seconds=61)  # past the agent's deadline: the queue's expiry outcome, here escalate
    assert transitions.run_escalation_chain() == 0
    assert transitions.expire_overdue_requests() == 1
    final = ElicitationRequest.objects.get(pk=request.pk)
    assert final.queue == third
    assert kinds(request) == ["created", "tier_notified", "escalated", "escalated"]


def test_no_policy_no_steps(clock: Any, make_request: Callable[..., ElicitationRequest]) -> None:
    request = make_request()
    clock.advance(seconds=500)
    assert transitions.run_escalation_chain() == 0
    assert kinds(request) == ["created"]


# --- a claim at T2: an acknowledgement ---------------------------------------------------------------------------


@pytest.fixture
def long_lease(queue: Queue) -> Queue:
    """Leases of five minutes: a claim taken before T1 is still live at T2 (120 s)."""
    queue.lease_seconds = 300
    queue.save()
    return queue


@pytest.fixture
def boss(make_reviewer: Callable[..., User], queue: Queue) -> User:
    user = make_reviewer("boss", queue, supervisor=True)
    user.email = "boss@example.com"
    user.save()
    return user


def claimed_before_t1(
    clock: Any, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> ElicitationRequest:
    reviewer.email = "alice@example.com"
    reviewer.save()
    request = make_request()
    clock.advance(seconds=30)
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=91)  # T2 (120 s) has passed; the lease (300 s) has not
    return request


@pytest.mark.parametrize("goes_to", ["escalation_queue", "supervisor"])
def test_a_request_claimed_before_t1_is_not_taken_at_t2_its_holder_and_supervisors_are_told_once(
    goes_to: str,
    clock: Any,
    policy: EscalationPolicy,
    long_lease: Queue,
    boss: User,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    policy.unanswered_goes_to = goes_to
    policy.save()
    assert policy.claimed_at_t2 == ClaimedAtT2.NOTIFY  # the default
    request = claimed_before_t1(clock, reviewer, make_request)
    with django_capture_on_commit_callbacks(execute=True):
        assert transitions.run_escalation_chain() == 1
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as second_sweep:
        assert transitions.run_escalation_chain() == 0  # a second sweep: nothing again
    # The look and its candidates, nothing more: a request left with its holder is not locked.
    assert len(second_sweep.captured_queries) == 2

    kept = ElicitationRequest.objects.get(pk=request.pk)
    assert (kept.queue.slug, kept.status, kept.claimed_by) == ("payments", Status.CLAIMED, reviewer)
    assert kinds(request) == ["created", "claimed", "unanswered_holder_notified"]
    step = RequestEvent.objects.get(request=request, kind="unanswered_holder_notified")
    assert step.detail == {
        "step": 2,
        "queue": "payments",
        "after_seconds": 120,
        "holder": "alice",
        "claimed_at_t2": "notify",
    }
    told = Notice.objects.filter(request=request).order_by("user__username")
    # The queue has no rules: e-mail, to the holder and the supervisor, once each.
    assert [(n.user.username, n.channel, n.tier, n.status) for n in told] == [
        ("alice", "email", 2, NoticeStatus.SENT),
        ("boss", "email", 2, NoticeStatus.SENT),
    ]
    assert sorted(m.to[0] for m in mail.outbox) == ["alice@example.com", "boss@example.com"]


def test_the_t2_notice_is_not_swallowed_by_the_arrival_notice_to_the_same_person(
    clock: Any,
    policy: EscalationPolicy,
    long_lease: Queue,
    boss: User,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    ReachRule.objects.create(queue=long_lease, channel=Channel.EMAIL, audience="members")
    with django_capture_on_commit_callbacks(execute=True):
        request = claimed_before_t1(clock, reviewer, make_request)
    with django_capture_on_commit_callbacks(execute=True):
        transitions.run_escalation_chain()
    told = Notice.objects.filter(request=request, user=reviewer).order_by("tier")
    assert [(n.tier, n.status) for n in told] == [(0, NoticeStatus.SENT), (2, NoticeStatus.SENT)]
    assert [m.to for m in mail.outbox].count(["alice@example.com"]) == 2  # the arrival, and T2


def test_keep_leaves_a_claimed_request_with_its_holder_and_tells_nobody(
    clock: Any,
    policy: EscalationPolicy,
    long_lease: Queue,
    boss: User,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    policy.claimed_at_t2 = ClaimedAtT2.KEEP
    policy.save()
    request = claimed_before_t1(clock, reviewer, make_request)
    with django_capture_on_commit_callbacks(execute=True):
        assert transitions.run_escalation_chain() == 1
        assert transitions.run_escalation_chain() == 0
    kept = ElicitationRequest.objects.get(pk=request.pk)
    assert (kept.queue.slug, kept.status, kept.claimed_by) == ("payments", Status.CLAIMED, reviewer)
    assert kinds(request) == ["created", "claimed", "unanswered_holder_kept"]
    assert not Notice.objects.filter(request=request).exists()
    assert mail.outbox == []


@pytest.mark.parametrize(("goes_to", "expected"), [("escalation_queue", "other"), ("supervisor", "payments")])
def test_move_takes_a_claimed_request_out_of_its_holders_hands_at_t2(
    goes_to: str,
    expected: str,
    clock: Any,
    policy: EscalationPolicy,
    long_lease: Queue,
    boss: User,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    policy.claimed_at_t2 = ClaimedAtT2.MOVE
    policy.unanswered_goes_to = goes_to
    policy.save()
    request = claimed_before_t1(clock, reviewer, make_request)
    with django_capture_on_commit_callbacks(execute=True):
        assert transitions.run_escalation_chain() == 1
    moved = ElicitationRequest.objects.get(pk=request.pk)
    assert moved.queue.slug == expected
    assert moved.claimed_by != reviewer
    assert kinds(request)[-1] == (
        "escalated" if goes_to == "escalation_queue" else "reassigned_to_supervisor"
    )
    assert not Notice.objects.filter(request=request, tier=2).exists()


@pytest.mark.parametrize("released_by_the_sweep", [False, True])
def test_a_lapsed_lease_resumes_the_chain_and_the_next_sweep_moves_the_request(
    released_by_the_sweep: bool,
    clock: Any,
    policy: EscalationPolicy,
    long_lease: Queue,
    boss: User,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    request = claimed_before_t1(clock, reviewer, make_request)
    with django_capture_on_commit_callbacks(execute=True):
        assert transitions.run_escalation_chain() == 1  # notified, kept
    clock.advance(seconds=208)  # the lease (until 330 s) is still live at 329 s
    assert transitions.run_escalation_chain() == 0
    assert ElicitationRequest.objects.get(pk=request.pk).queue.slug == "payments"
    clock.advance(seconds=2)
    if released_by_the_sweep:
        assert transitions.release_expired_claims() == 1
    with django_capture_on_commit_callbacks(execute=True):
        # Pending again past T1, the request is announced to tier 1 as well (a step of its own).
        assert transitions.run_escalation_chain() == (2 if released_by_the_sweep else 1)
    moved = ElicitationRequest.objects.get(pk=request.pk)
    assert (moved.queue.slug, moved.status, moved.claimed_by) == ("other", Status.PENDING, None)
    assert kinds(request)[-1] == "escalated"
    assert Notice.objects.filter(request=request, tier=2).count() == 2  # the T2 notices were not sent again


def test_holder_recipients_follow_the_queues_channels_and_each_persons_preferences(
    clock: Any,
    policy: EscalationPolicy,
    long_lease: Queue,
    boss: User,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    ReachRule.objects.create(
        queue=long_lease, tier=1, channel=Channel.SLACK, slack_channel="C1", audience="slack_channel"
    )
    ReachRule.objects.create(queue=long_lease, tier=0, channel=Channel.EMAIL, audience="members")
    ReachRule.objects.create(queue=long_lease, tier=0, channel=Channel.BROWSER)
    ReviewerReach.objects.create(user=boss, slack_user_id="U0BOSS")
    ReviewerReach.objects.create(user=reviewer, time_zone="UTC", quiet_start=time(22), quiet_end=time(7))
    clock.current = datetime(2026, 1, 15, 3, 0, tzinfo=UTC)  # alice's quiet hours
    request = ElicitationRequest.objects.get(pk=claimed_before_t1(clock, reviewer, make_request).pk)
    told = {
        (r.channel, r.user.username): (r.key, r.slack_channel, r.held)
        for r in routing.recipients(request, routing.HOLDER_TIER, clock.now())
    }
    alice, boss_key = f"t2:{long_lease.pk}:user:{reviewer.pk}", f"t2:{long_lease.pk}:user:{boss.pk}"
    assert told == {
        ("email", "alice"): (alice, "", "quiet hours"),
        ("email", "boss"): (boss_key, "U0BOSS", ""),
        ("slack", "alice"): (alice, "", "no linked Slack account"),
        ("slack", "boss"): (boss_key, "U0BOSS", ""),
    }
    transitions.release_claim(request.pk, user=reviewer)
    released = ElicitationRequest.objects.get(pk=request.pk)
    assert routing.recipients(released, routing.HOLDER_TIER, clock.now()) == []


# --- routing and quiet hours ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("local", "quiet"),
    [
        (time(23, 30), True),
        (time(3, 0), True),
        (time(6, 59), True),
        (time(7, 0), False),
        (time(12, 0), False),
    ],
)
def test_quiet_hours_span_midnight_in_the_reviewers_time_zone(
    local: time, quiet: bool, reviewer: User
) -> None:
    prefs = ReviewerReach.objects.create(
        user=reviewer, time_zone="America/New_York", quiet_start=time(22, 0), quiet_end=time(7, 0)
    )
    # New York is UTC-5 in January.
    now = datetime(2026, 1, 15, (local.hour + 5) % 24, local.minute, tzinfo=UTC)
    assert routing.in_quiet_hours(prefs, now) is quiet


def test_quiet_hours_hold_back_arrival_email_while_others_are_told(
    clock: Any,
    queue: Queue,
    make_reviewer: Callable[..., User],
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    asleep = make_reviewer("asleep", queue)
    awake = make_reviewer("awake", queue)
    for user in (asleep, awake):
        user.email = f"{user.username}@example.com"
        user.save()
    ReviewerReach.objects.create(user=asleep, time_zone="Asia/Tokyo", quiet_start=time(22), quiet_end=time(7))
    ReviewerReach.objects.create(
        user=awake, time_zone="Europe/Paris", quiet_start=time(22), quiet_end=time(7)
    )
    ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")
    clock.current = datetime(2026, 1, 15, 16, 0, tzinfo=UTC)  # 01:00 in Tokyo, 17:00 in Paris
    with django_capture_on_commit_callbacks(execute=True):
        request = make_request()
    notices = {n.user.username: n for n in Notice.objects.filter(request=request).select_related("user")}
    assert (notices["asleep"].status, notices["asleep"].reason) == (NoticeStatus.SKIPPED, "quiet hours")
    assert notices["awake"].status == NoticeStatus.SENT
    assert [m.to for m in mail.outbox] == [["awake@example.com"]]


def test_rules_filter_by_priority(
    queue: Queue,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    reviewer.email = "alice@example.com"
    reviewer.save()
    ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members", min_priority=5)
    with django_capture_on_commit_callbacks(execute=True):
        low = make_request(priority=1)
        high = make_request(priority=7)
    assert not Notice.objects.filter(request=low).exists()
    assert Notice.objects.get(request=high).status == NoticeStatus.SENT


# --- two sweepers at once (PostgreSQL) ---------------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_two_concurrent_sweepers_take_each_step_once(
    clock: Any, policy: EscalationPolicy, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    requests = [make_request() for _ in range(30)]
    for request in requests[10:]:
        transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=100)
    for request in requests[20:]:
        transitions.renew_claim(request.pk, user=reviewer)  # heartbeat: live until 160 s
    clock.advance(seconds=21)  # T1 for the pending ten, T2 for all; the lease of ten claims lapsed, ten live
    taken = at_once(transitions.run_escalation_chain, transitions.run_escalation_chain)
    assert sum(taken) == 40
    for request in requests:
        events = kinds(request)
        assert events.count("escalated") == (0 if request in requests[20:] else 1)
        assert events.count("tier_notified") == (1 if request in requests[:10] else 0)
        assert events.count("unanswered_holder_notified") == (1 if request in requests[20:] else 0)
    assert ElicitationRequest.objects.filter(queue__slug="other").count() == 20
    assert ElicitationRequest.objects.filter(queue__slug="payments", claimed_by=reviewer).count() == 10
