"""An answer that waits out its undo window before the agent hears of it.

The reviewer page's answer is checked now (`answers.checked_answer`: the claim, the action, the content) and kept
as a `HeldAnswer` row; the claim stays the reviewer's. At `send_at` the same `respond` every door uses commits it
(quorum, rules and audit unchanged), from a timer set after commit (delivery/held_answers.py) or, if that timer
was lost with its process, from the sweep (`send_due_answers`). Until then `take_back` deletes the row and the
agent is told nothing. Commit and undo race through one guarded DELETE whose row count says who won."""

import logging
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import transaction

from elicitation.models import ElicitationRequest, HeldAnswer, Status
from elicitation.queue import clock, quorum, signals, step_up
from elicitation.queue.errors import InvalidInput, InvalidTransition
from elicitation.queue.transitions.answers import checked_answer, respond
from elicitation.queue.transitions.deadlines import expire_if_overdue
from elicitation.queue.transitions.drafts import save_draft
from elicitation.queue.transitions.path import lock_request, reload_request

logger = logging.getLogger(__name__)

UNDO_SECONDS = 5.0
# A request this close to its deadline is answered at once: an undo window past the deadline would lose the answer.
DEADLINE_MARGIN_SECONDS = 2.0
# The claim is kept at least this long past `send_at`, so a late timer still finds it the reviewer's.
LEASE_MARGIN_SECONDS = 60


def hold_answer(
    request_id: UUID,
    *,
    user: Any,
    action: str,
    content: dict[str, Any] | None = None,
    seconds: float = UNDO_SECONDS,
) -> HeldAnswer | None:
    """Check the answer and keep it for `seconds`. None when it cannot wait (a quorum's approvals are answered
    at once; so is a request whose deadline falls inside the window, and a passkey-signed accept, whose signature
    is checked once, now): the caller then calls `respond`."""
    request = expire_if_overdue(reload_request(request_id))
    now = clock.now()
    send_at = now + timedelta(seconds=seconds)
    if (action == "accept" and step_up.required(request)) or quorum.requirement(request) is not None:
        return None
    if request.deadline <= send_at + timedelta(seconds=DEADLINE_MARGIN_SECONDS):
        return None
    clean = checked_answer(request, user=user, action=action, content=content)
    with transaction.atomic():
        locked = lock_request(request_id)
        if locked is None or locked.status != Status.CLAIMED or locked.claimed_by_id != user.pk:
            raise InvalidTransition(
                "Only the reviewer holding the claim can answer it.",
                current_status=locked.status if locked else None,
            )
        lease_floor = send_at + timedelta(seconds=LEASE_MARGIN_SECONDS)
        ElicitationRequest.objects.filter(pk=request_id, lease_expires_at__lt=lease_floor).update(
            lease_expires_at=lease_floor
        )
        held, _ = HeldAnswer.objects.update_or_create(
            request_id=request_id,
            defaults={"user": user, "action": action, "content": clean, "send_at": send_at, "held_at": now},
        )
        signals.answer_held.send(sender=HeldAnswer, held=held)
    return held


def take_back(request_id: UUID, *, user: Any) -> HeldAnswer:
    """Undo: the held answer is deleted before it was sent, and its content goes back into the shared drafts,
    so the page opens on the form as it was sent. InvalidTransition when it was sent already (or is not this
    reviewer's)."""
    with transaction.atomic():
        held = HeldAnswer.objects.filter(request_id=request_id, user=user).first()
        if held is None or HeldAnswer.objects.filter(pk=held.pk, send_at=held.send_at).delete()[0] == 0:
            found = ElicitationRequest.objects.filter(pk=request_id).values_list("status", flat=True).first()
            raise InvalidTransition("Too late to undo: the answer was sent.", current_status=found)
        for question_id, value in (held.content or {}).items():
            save_draft(request_id, user=user, question_id=question_id, value=value)
    return held


def send_held_answer(request_id: UUID) -> ElicitationRequest | None:
    """Commit a held answer whose window has closed, through `respond`. None when there is nothing due (taken
    back, sent by another process, or not due yet). An answer `respond` refuses now (the claim was taken over,
    the request withdrawn) is dropped and logged: the page's reviewer sees the request's outcome instead."""
    held = HeldAnswer.objects.select_related("user").filter(pk=request_id).first()
    if held is None or held.send_at > clock.now():
        return None
    with transaction.atomic():
        if HeldAnswer.objects.filter(pk=request_id, send_at=held.send_at).delete()[0] == 0:
            return None  # taken back, or sent by another process, since the read
        try:
            with transaction.atomic():
                return respond(request_id, user=held.user, action=held.action, content=held.content)
        except (InvalidTransition, InvalidInput, ElicitationRequest.DoesNotExist) as exc:
            logger.warning("held answer to %s not sent: %s", request_id, getattr(exc, "detail", exc))
            return None


def send_due_answers() -> int:
    """The sweep: commit every held answer whose window has closed (a timer lost with its process). Returns how
    many it sent."""
    due = list(HeldAnswer.objects.filter(send_at__lte=clock.now()).values_list("pk", flat=True)[:500])
    return sum(1 for request_id in due if send_held_answer(request_id) is not None)
