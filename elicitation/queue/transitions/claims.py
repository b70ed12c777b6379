"""A reviewer's claim on a request: claim one or the queue's next, take one over (a supervisor), renew its lease
(heartbeat), release it, and the sweep that returns claims whose lease ran out."""

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import F, Q
from django.db.models.functions import Coalesce

from elicitation.models import OPEN_STATUSES, ElicitationRequest, Queue, Status
from elicitation.queue import clock, selectors
from elicitation.queue.errors import InvalidTransition
from elicitation.queue.transitions.path import (
    announce,
    apply_transition,
    guarded_update,
    lock_request,
    reload_request,
)


def _claim_changes(user: User, queue: Queue, now: datetime) -> dict[str, Any]:
    return {
        "status": Status.CLAIMED,
        "claimed_by": user,
        "claimed_at": now,
        "lease_expires_at": now + timedelta(seconds=queue.lease_seconds),
        "first_claimed_at": Coalesce(F("first_claimed_at"), now),
    }


RELEASED = {"status": Status.PENDING, "claimed_by": None, "claimed_at": None, "lease_expires_at": None}


def _claimable(now: datetime) -> Q:
    # A claim whose lease ran out is as good as pending even before the sweep returns it.
    return Q(deadline__gt=now) & (
        Q(status=Status.PENDING) | Q(status=Status.CLAIMED, lease_expires_at__lte=now)
    )


def claim_request(request_id: UUID, *, user: User) -> ElicitationRequest:
    now = clock.now()
    request = reload_request(request_id)
    return apply_transition(
        request_id,
        allowed=_claimable(now) | Q(status=Status.CLAIMED, claimed_by=user),
        changes=_claim_changes(user, request.queue, now),
        what="claim",
        kind="claimed",
        actor_user=user,
    )


def held_claim_id(queue: Queue, user: User, now: datetime) -> UUID | None:
    """The most urgent request of the queue this reviewer still holds on a live lease, if any."""
    return (
        ElicitationRequest.objects.filter(
            queue=queue, status=Status.CLAIMED, claimed_by=user, lease_expires_at__gt=now, deadline__gt=now
        )
        .filter(held_answer__isnull=True)  # answered, in its undo window: not one to resume
        .order_by("-priority", "created_at")
        .values_list("pk", flat=True)
        .first()
    )


def claim_next(
    queue: Queue, *, user: User, resume_held: bool = False, attempts: int = 20
) -> ElicitationRequest | None:
    """Claim the queue's most urgent pending request: priority first, then age. None when the queue is empty.

    With `resume_held` (the reviewer pages' "next request"), a request the reviewer already holds comes first,
    resumed through the same claim path (which renews its lease): otherwise each "next" past an unanswered claim
    would leave it held, blocking teammates until its lease ran out. API clients that claim several at once
    keep the plain behaviour."""
    held = held_claim_id(queue, user, clock.now()) if resume_held else None
    if held is not None:
        try:
            return claim_request(held, user=user)
        except InvalidTransition:
            pass  # answered, taken over or run out since the read: claim a pending one instead
    for _ in range(attempts):
        now = clock.now()
        with transaction.atomic():
            candidate = selectors.next_claimable_id(queue, now)
            if candidate is None:
                return None
            updated = ElicitationRequest.objects.filter(Q(pk=candidate) & _claimable(now)).update(
                **_claim_changes(user, queue, now), updated_at=now
            )
            if updated == 0:
                continue  # another reviewer took it between our read and write (SQLite path): try the next one
            claimed = lock_request(candidate)  # already ours: the UPDATE holds the row until commit
            assert claimed is not None
            announce(claimed, "claimed", previous=Status.PENDING, actor_user=user)
            return claimed
    raise InvalidTransition("The queue is too contended right now; try again.")


def take_over_claim(request_id: UUID, *, supervisor: User) -> ElicitationRequest:
    now = clock.now()
    request = reload_request(request_id)
    previous_holder = request.claimed_by.get_username() if request.claimed_by else None
    return apply_transition(
        request_id,
        allowed=Q(status__in=OPEN_STATUSES, deadline__gt=now),
        changes=_claim_changes(supervisor, request.queue, now),
        what="take over",
        kind="taken_over",
        page_kind="claimed",
        actor_user=supervisor,
        detail={"previous_holder": previous_holder},
    )


def renew_claim(request_id: UUID, *, user: User) -> ElicitationRequest:
    """Heartbeat: extend the lease, only while this reviewer still holds the claim. Not audited: nothing changed
    hands."""
    now = clock.now()
    request = reload_request(request_id)
    with transaction.atomic():
        _, renewed = guarded_update(
            request_id,
            allowed=Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now),
            changes={"lease_expires_at": now + timedelta(seconds=request.queue.lease_seconds)},
            what="renew the claim",
        )
    return renewed


def release_claim(request_id: UUID, *, user: User) -> ElicitationRequest:
    return apply_transition(
        request_id,
        allowed=Q(status=Status.CLAIMED, claimed_by=user),
        changes=RELEASED,
        what="release",
        kind="released",
        actor_user=user,
    )


def release_claim_as_operator(request_id: UUID, *, operator: Any) -> ElicitationRequest:
    """An operator (the admin's release action) returns a claim to the queue; the audit names operator and holder."""
    holder = reload_request(request_id).claimed_by
    return apply_transition(
        request_id,
        # Pinned to the holder we read: if the claim changed hands meanwhile, the operator must look again.
        allowed=Q(status=Status.CLAIMED, claimed_by=holder),
        changes=RELEASED,
        what="release",
        kind="released",
        actor_user=operator,
        detail={"holder": holder.get_username() if holder else None, "by": "operator"},
    )


def release_expired_claims(now: datetime | None = None) -> int:
    """Sweep: claims whose lease ran out go back to the queue. Running it twice changes nothing the second time."""
    now = now or clock.now()
    released = 0
    overdue = ElicitationRequest.objects.filter(status=Status.CLAIMED, lease_expires_at__lte=now)
    for request_id in overdue.values_list("pk", flat=True)[:1000]:
        try:
            apply_transition(
                request_id,
                allowed=Q(status=Status.CLAIMED, lease_expires_at__lte=now),
                changes=RELEASED,
                what="release an expired lease",
                kind="lease_expired",
                page_kind="released",
            )
        except InvalidTransition:
            continue  # renewed or answered since we looked
        released += 1
    return released
