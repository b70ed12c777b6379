"""Deadlines: an open request past its deadline gets its queue's expiry outcome (cancel or decline answered for
the reviewer, or escalation to another queue), from the sweep or before any write acts on it."""

from datetime import datetime, timedelta
from uuid import UUID

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from elicitation.models import (
    OPEN_STATUSES,
    Action,
    ElicitationRequest,
    ExpiryOutcome,
    Queue,
    RequestEvent,
    Status,
)
from elicitation.queue import clock
from elicitation.queue.errors import InvalidTransition
from elicitation.queue.transitions.path import announce, apply_transition, guarded_update, reload_request


def expire_request(
    request_id: UUID, *, now: datetime | None = None, actor_user: User | None = None
) -> ElicitationRequest:
    """Apply the queue's expiry outcome: answer cancel/decline for the reviewer, or escalate to another queue."""
    now = now or clock.now()
    request = reload_request(request_id)
    queue = request.queue
    # Pinned to the queue we read: of two racing expiries (sweep and admin), only one escalates.
    due = Q(status__in=OPEN_STATUSES, queue=queue) & (Q(deadline__lte=now) if actor_user is None else Q())
    cleared = {"claimed_by": None, "claimed_at": None, "lease_expires_at": None}
    with transaction.atomic():
        target = _escalation_target(request)
        if target is not None:
            previous, moved = guarded_update(
                request_id,
                allowed=due,
                changes={
                    **cleared,
                    "status": Status.PENDING,
                    "queue": target,
                    "deadline": now + timedelta(seconds=target.default_deadline_seconds),
                },
                what="escalate",
            )
            announce(
                moved,
                "escalated",
                previous=previous,
                actor_user=actor_user,
                detail={"from_queue": queue.slug, "to_queue": target.slug},
                left_queue_id=queue.pk,
            )
            return moved
        action = Action.DECLINE if queue.expiry_outcome == ExpiryOutcome.DECLINE else Action.CANCEL
        return apply_transition(
            request_id,
            allowed=due,
            changes={**cleared, "status": Status.EXPIRED, "action": action, "closed_at": now},
            what="expire",
            kind="expired",
            actor_user=actor_user,
            detail={"action": action},
            tell_agent="expired",
        )


def _escalation_target(request: ElicitationRequest) -> Queue | None:
    """The queue to escalate to, or None for a final outcome. A request never re-enters a queue it has been in,
    so a cycle of escalating queues (a→b→a) still ends with an answer to the agent (cancel)."""
    queue = request.queue
    if queue.expiry_outcome != ExpiryOutcome.ESCALATE or queue.escalation_queue is None:
        return None
    hops = RequestEvent.objects.filter(request_id=request.pk, kind="escalated").order_by("id")
    visited = {queue.slug}
    for detail in hops.values_list("detail", flat=True):
        visited.update({detail.get("from_queue"), detail.get("to_queue")})
    return None if queue.escalation_queue.slug in visited else queue.escalation_queue


def expire_overdue_requests(now: datetime | None = None) -> int:
    """Sweep: every open request past its deadline gets its queue's outcome. Idempotent."""
    now = now or clock.now()
    done = 0
    overdue = ElicitationRequest.objects.filter(status__in=OPEN_STATUSES, deadline__lte=now)
    for request_id in overdue.values_list("pk", flat=True)[:1000]:
        try:
            expire_request(request_id, now=now)
        except InvalidTransition:
            continue  # answered or withdrawn since we looked
        done += 1
    return done


def expire_if_overdue(request: ElicitationRequest) -> ElicitationRequest:
    """Before a write acts on a request: one past its deadline is expired first, sweep or no sweep. Reads never
    call this; they show such a request as overdue until the sweeper closes it."""
    if request.status in OPEN_STATUSES and request.deadline <= clock.now():
        try:
            return expire_request(request.pk)
        except InvalidTransition:
            return reload_request(request.pk)
    return request
