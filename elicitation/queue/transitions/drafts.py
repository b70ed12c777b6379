"""The shared drafts of a claimed request, one per question: only the claim holder writes them, every reviewer
looking on sees them change, and an accept sent without content carries the submitted ones."""

from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import transaction

from elicitation.models import Draft, DraftState, ElicitationRequest, Status
from elicitation.queue import schemas, signals
from elicitation.queue.errors import InvalidInput, InvalidTransition
from elicitation.queue.transitions.path import reload_request


def _question(request: ElicitationRequest, question_id: str) -> schemas.Question:
    for question in schemas.questions_from_json(request.questions):
        if question.id == question_id:
            return question
    raise InvalidInput(
        "No such question.", {"question": f"{question_id!r} is not a question of this request"}
    )


def save_draft(
    request_id: UUID, *, user: User, question_id: str, value: Any, state: str = DraftState.DRAFT
) -> Draft:
    """Save one question's shared draft. Only the claim holder writes; submitted answers must be valid."""
    request = reload_request(request_id)
    question = _question(request, question_id)
    if state == DraftState.SKIPPED:
        value = None
    elif state == DraftState.SUBMITTED:
        try:
            value = schemas.validate_answer(question, value)
        except schemas.AnswerInvalid as exc:
            raise InvalidInput("The answer is not valid.", exc.errors) from None
    with transaction.atomic():
        locked = ElicitationRequest.objects.select_for_update().filter(pk=request_id).first()
        if locked is None or locked.status != Status.CLAIMED or locked.claimed_by_id != user.pk:
            raise InvalidTransition(
                "Only the reviewer holding the claim can edit answers.",
                current_status=locked.status if locked else None,
            )
        draft, _ = Draft.objects.update_or_create(
            request_id=request_id,
            question_id=question_id,
            defaults={"value": value, "state": state, "updated_by": user},
        )
        signals.draft_changed.send(sender=Draft, request_id=request_id, draft=draft_payload(draft, user))
    return draft


def draft_payload(draft: Draft, user: User) -> dict[str, Any]:
    return {
        "question": draft.question_id,
        "value": draft.value,
        "state": draft.state,
        "updated_by": user.get_username() if user else None,
        "updated_at": draft.updated_at.isoformat(),
    }


def content_from_drafts(request: ElicitationRequest) -> dict[str, Any]:
    return {
        draft.question_id: draft.value
        for draft in request.drafts.all()
        if draft.state == DraftState.SUBMITTED and draft.value is not None
    }
