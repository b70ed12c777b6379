"""The escalation chain (reach), per queue (models.EscalationPolicy): not claimed within T1 → tell tier 1
(`notify_next_tier`); not answered by T2 → move to the escalation queue or assign to a supervisor
(`reassign_unanswered`); at the deadline the queue's expiry outcome (`deadlines.expire_request`, which may itself
escalate) is the last step.

A live claim is an acknowledgement, as on-call tools treat one: at T2 a request a reviewer holds (lease not run
out) is not taken from them unless the policy says `move`; `notify` (the default) tells the holder and the queue's
supervisors instead (reach's tier 2), `keep` tells nobody. Either leaves an audit row. A lease that runs out
resumes the chain: the request is as good as pending, and the next sweep moves it.

Times count from the request's arrival in its current queue, so a request moved to another queue starts that
queue's chain afresh. Each step is an audit row written under the request's row lock after checking that the step
has not been taken since the arrival: two sweepers racing on one request take it once."""

from datetime import datetime, timedelta
from uuid import UUID

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from elicitation.models import (
    OPEN_STATUSES,
    ClaimedAtT2,
    ElicitationRequest,
    EscalationPolicy,
    Queue,
    RequestEvent,
    Status,
)
from elicitation.queue import clock, signals
from elicitation.queue.audit import record_event
from elicitation.queue.errors import InvalidTransition
from elicitation.queue.transitions.path import announce, guarded_update, lock_request

TIER_NOTIFIED = "tier_notified"
REASSIGNED = "reassigned_to_supervisor"
# Step 2 met a live claim: the holder and supervisors were told (`notify`), or nothing was done (`keep`).
HOLDER_NOTIFIED = "unanswered_holder_notified"
HOLDER_KEPT = "unanswered_holder_kept"
LEFT_WITH_HOLDER = {ClaimedAtT2.NOTIFY: HOLDER_NOTIFIED, ClaimedAtT2.KEEP: HOLDER_KEPT}
ARRIVAL_KINDS = ("created", "escalated")


def _since_arrival(request_id: UUID) -> list[RequestEvent]:
    """The request's audit rows since it arrived in its current queue (that arrival row first)."""
    events = list(RequestEvent.objects.filter(request_id=request_id).order_by("-id")[:200])
    since: list[RequestEvent] = []
    for event in events:
        since.append(event)
        if event.kind in ARRIVAL_KINDS:
            break
    return list(reversed(since))


def _step_due(
    request: ElicitationRequest,
    seconds: int | None,
    now: datetime,
    step_kinds: tuple[str, ...],
    history: list[RequestEvent] | None = None,
) -> bool:
    if seconds is None:
        return False
    history = _since_arrival(request.pk) if history is None else history
    arrived = history[0].at if history else request.created_at
    if now < arrived + timedelta(seconds=seconds):
        return False
    return not any(event.kind in step_kinds for event in history[1:])


def _claim_is_live(request: ElicitationRequest, now: datetime) -> bool:
    """Someone holds the request and their lease has not run out (a lapsed claim is as good as pending)."""
    return (
        request.status == Status.CLAIMED
        and request.lease_expires_at is not None
        and request.lease_expires_at > now
    )


def notify_next_tier(request_id: UUID, *, now: datetime | None = None) -> bool:
    """Step 1: a request still unclaimed T1 after its arrival is announced to the queue's tier 1. Returns whether
    this call took the step (False: not due, already taken, claimed or closed)."""
    now = now or clock.now()
    with transaction.atomic():
        request = lock_request(request_id)
        if request is None or request.status != Status.PENDING:
            return False
        policy = getattr(request.queue, "escalation_policy", None)
        if policy is None or not _step_due(request, policy.unclaimed_after_seconds, now, (TIER_NOTIFIED,)):
            return False
        record_event(
            request,
            TIER_NOTIFIED,
            from_status=request.status,
            to_status=request.status,
            detail={"step": 1, "queue": request.queue.slug, "after_seconds": policy.unclaimed_after_seconds},
            prev_hash=request.audit_head,
        )
        signals.escalation_step_taken.send(sender=ElicitationRequest, request=request, step=1)
    return True


def reassign_unanswered(request_id: UUID, *, now: datetime | None = None) -> bool:
    """Step 2: a request still open T2 after its arrival moves to the queue's escalation queue (keeping the
    agent's deadline) or is assigned to the queue's first active supervisor (a claim lasting until the
    deadline) — unless a reviewer holds it and the policy's `claimed_at_t2` is not `move`
    (`_leave_with_holder`). Returns whether this call took a step."""
    now = now or clock.now()
    with transaction.atomic():
        request = lock_request(request_id)
        if request is None or request.status not in OPEN_STATUSES or request.deadline <= now:
            return False
        queue = request.queue
        policy = getattr(queue, "escalation_policy", None)
        if policy is None:
            return False
        history = _since_arrival(request.pk)
        if not _step_due(request, policy.unanswered_after_seconds, now, (REASSIGNED,), history):
            return False
        if _claim_is_live(request, now) and policy.claimed_at_t2 != ClaimedAtT2.MOVE:
            return _leave_with_holder(request, policy, history)
        if policy.unanswered_goes_to == "supervisor":
            supervisor = queue.supervisors.filter(is_active=True).order_by("pk").first()
            if supervisor is None or request.claimed_by_id == supervisor.pk:
                return False
            previous, moved = guarded_update(
                request_id,
                allowed=Q(status__in=OPEN_STATUSES, queue=queue),
                changes={
                    "status": Status.CLAIMED,
                    "claimed_by": supervisor,
                    "claimed_at": now,
                    "lease_expires_at": request.deadline,
                    "first_claimed_at": Coalesce(F("first_claimed_at"), now),
                },
                what="assign to a supervisor",
            )
            announce(
                moved,
                REASSIGNED,
                previous=previous,
                detail={"step": 2, "queue": queue.slug, "supervisor": supervisor.get_username()},
                page_kind="claimed",
            )
            return True
        target = _escalation_target_of(request, queue.escalation_queue)
        if target is None:
            return False
        previous, moved = guarded_update(
            request_id,
            allowed=Q(status__in=OPEN_STATUSES, queue=queue),
            changes={
                "status": Status.PENDING,
                "queue": target,
                "claimed_by": None,
                "claimed_at": None,
                "lease_expires_at": None,
            },
            what="escalate",
        )
        announce(
            moved,
            "escalated",
            previous=previous,
            detail={"from_queue": queue.slug, "to_queue": target.slug, "step": 2, "reason": "unanswered"},
            left_queue_id=queue.pk,
        )
    return True


def _leave_with_holder(
    request: ElicitationRequest, policy: EscalationPolicy, history: list[RequestEvent]
) -> bool:
    """T2 reached a request a reviewer holds: leave it with them, once per arrival in the queue. Under `notify`
    the holder and the queue's supervisors are told (reach's listeners, after commit); under `keep`, nobody.
    Either way an audit row says so, and it is the row that makes the step happen once."""
    if any(event.kind in (HOLDER_NOTIFIED, HOLDER_KEPT) for event in history[1:]):
        return False
    choice = ClaimedAtT2(policy.claimed_at_t2)
    record_event(
        request,
        LEFT_WITH_HOLDER[choice],
        from_status=request.status,
        to_status=request.status,
        detail={
            "step": 2,
            "queue": request.queue.slug,
            "after_seconds": policy.unanswered_after_seconds,
            "holder": request.claimed_by.get_username() if request.claimed_by else None,
            "claimed_at_t2": choice.value,
        },
        prev_hash=request.audit_head,
    )
    if choice == ClaimedAtT2.NOTIFY:
        signals.escalation_step_taken.send(sender=ElicitationRequest, request=request, step=2)
    return True


def _escalation_target_of(request: ElicitationRequest, candidate: Queue | None) -> Queue | None:
    """`candidate`, unless the request has already been in it (a cycle a→b→a ends instead of looping)."""
    if candidate is None:
        return None
    visited = {request.queue.slug}
    hops = RequestEvent.objects.filter(request_id=request.pk, kind="escalated").values_list(
        "detail", flat=True
    )
    for detail in hops:
        visited.update({detail.get("from_queue"), detail.get("to_queue")})
    return None if candidate.slug in visited else candidate


def _may_be_due(arrived_at: datetime | None, seconds: int | None, now: datetime) -> bool:
    return seconds is not None and (arrived_at is None or arrived_at + timedelta(seconds=seconds) <= now)


def _step_taken_here(*step_kinds: str) -> Exists:
    """An audit row of one of these steps, taken in the request's current queue."""
    return Exists(
        RequestEvent.objects.filter(request=OuterRef("pk"), kind__in=step_kinds)
        .annotate(step_queue=KT("detail__queue"))
        .filter(step_queue=OuterRef("queue__slug"))
    )


def run_escalation_chain(now: datetime | None = None) -> int:
    """Sweep: take every escalation step that is due, in each queue with a policy. Returns the steps taken.
    Idempotent and safe to run from several processes at once."""
    now = now or clock.now()
    taken = 0
    in_a_chain = ElicitationRequest.objects.filter(
        status__in=OPEN_STATUSES, queue__escalation_policy__isnull=False, deadline__gt=now
    )
    # Most sweeps find nothing: a plain look first costs a tenth of building the query below (an idle process's
    # largest wake-up, BENCHMARKS.md #14).
    if not in_a_chain.exists():
        return 0
    # Unlocked first cut, so a sweep does not lock every open request: steps already taken in the current queue
    # (a request never re-enters a queue) and steps whose time has not come are left out. The locked check in
    # each step function is the one that decides.
    candidates = (
        in_a_chain.annotate(
            t1_taken=_step_taken_here(TIER_NOTIFIED),
            t2_taken=_step_taken_here(REASSIGNED),
            t2_left_with_holder=_step_taken_here(HOLDER_NOTIFIED, HOLDER_KEPT),
            arrived_at=Subquery(
                RequestEvent.objects.filter(request=OuterRef("pk"), kind__in=ARRIVAL_KINDS)
                .order_by("-id")
                .values("at")[:1]
            ),
        )
        .filter(
            Q(
                status=Status.PENDING,
                t1_taken=False,
                queue__escalation_policy__unclaimed_after_seconds__isnull=False,
            )
            | (
                Q(t2_taken=False, queue__escalation_policy__unanswered_after_seconds__isnull=False)
                # Left with its holder already: not again while their claim lives (a lapsed one is moved).
                & (Q(t2_left_with_holder=False) | ~Q(status=Status.CLAIMED) | Q(lease_expires_at__lte=now))
            )
        )
        .order_by("created_at")
        .values_list(
            "pk",
            "status",
            "arrived_at",
            "t1_taken",
            "queue__escalation_policy__unclaimed_after_seconds",
            "queue__escalation_policy__unanswered_after_seconds",
        )
    )
    for request_id, status, arrived_at, t1_taken, t1, t2 in candidates[:1000]:
        t1_may_be_due = status == Status.PENDING and not t1_taken and _may_be_due(arrived_at, t1, now)
        t2_may_be_due = _may_be_due(arrived_at, t2, now)
        try:
            if t1_may_be_due and notify_next_tier(request_id, now=now):
                taken += 1
            if t2_may_be_due and reassign_unanswered(request_id, now=now):
                taken += 1
        except InvalidTransition:
            continue  # answered, withdrawn or moved since we looked
    return taken
