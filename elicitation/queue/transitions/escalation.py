"""The escalation chain (reach), per queue (models.EscalationPolicy): not claimed within T1 → tell tier 1
(`notify_next_tier`); not answered by T2 → move to the escalation queue or assign to a supervisor
(`reassign_unanswered`); at the deadline the queue's expiry outcome (`deadlines.expire_request`, which may itself
escalate) is the last step.

Times count from the request's arrival in its current queue, so a request moved to another queue starts that
queue's chain afresh. Each step is an audit row written under the request's row lock after checking that the step
has not been taken since the arrival: two sweepers racing on one request take it once."""

from datetime import datetime, timedelta
from uuid import UUID

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from elicitation.models import OPEN_STATUSES, ElicitationRequest, Queue, RequestEvent, Status
from elicitation.queue import clock, signals
from elicitation.queue.audit import record_event
from elicitation.queue.errors import InvalidTransition
from elicitation.queue.transitions.path import announce, guarded_update, lock_request

TIER_NOTIFIED = "tier_notified"
REASSIGNED = "reassigned_to_supervisor"
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
    request: ElicitationRequest, seconds: int | None, now: datetime, step_kinds: tuple[str, ...]
) -> bool:
    if seconds is None:
        return False
    history = _since_arrival(request.pk)
    arrived = history[0].at if history else request.created_at
    if now < arrived + timedelta(seconds=seconds):
        return False
    return not any(event.kind in step_kinds for event in history[1:])


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
    deadline). Returns whether this call took the step."""
    now = now or clock.now()
    with transaction.atomic():
        request = lock_request(request_id)
        if request is None or request.status not in OPEN_STATUSES or request.deadline <= now:
            return False
        queue = request.queue
        policy = getattr(queue, "escalation_policy", None)
        if policy is None or not _step_due(request, policy.unanswered_after_seconds, now, (REASSIGNED,)):
            return False
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
    # Unlocked first cut, so a sweep does not lock every open request: steps already taken in the current queue
    # (a request never re-enters a queue) and steps whose time has not come are left out. The locked check in
    # each step function is the one that decides.
    candidates = (
        ElicitationRequest.objects.filter(
            status__in=OPEN_STATUSES, queue__escalation_policy__isnull=False, deadline__gt=now
        )
        .annotate(
            t1_taken=_step_taken_here(TIER_NOTIFIED),
            t2_taken=_step_taken_here(REASSIGNED),
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
            | Q(t2_taken=False, queue__escalation_policy__unanswered_after_seconds__isnull=False)
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
