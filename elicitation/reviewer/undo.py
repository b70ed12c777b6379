"""The request page's undo window: an answer sent from the page is held `ANSWER_UNDO_SECONDS` (5 s) before the
agent hears of it, unless the reviewer turned undo off in their preferences; meanwhile the next request opens,
with a banner naming the request and the answer and an Undo button that posts here. The hold, the send and the
undo are transitions (queue/transitions/held_answers.py); this module only decides whether to hold and says what
is held."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from elicitation.models import Action, ElicitationRequest, HeldAnswer, Mode, ReviewerReach
from elicitation.queue import access, schemas, transitions
from elicitation.queue.errors import InvalidTransition
from elicitation.reviewer import presenters
from elicitation.reviewer.errors import domain_errors_as_pages
from elicitation.reviewer.rate_budget import within_reviewer_rate

BANNER_MESSAGE_CHARS = 80
BANNER_ANSWER_CHARS = 120


def undo_seconds(user: Any) -> float:
    """The reviewer's undo window: 0 when the deployment or the reviewer turned it off."""
    seconds = float(getattr(settings, "ANSWER_UNDO_SECONDS", 0))
    if seconds <= 0:
        return 0.0
    wanted = ReviewerReach.objects.filter(user=user).values_list("answer_undo", flat=True).first()
    return seconds if wanted is None or wanted else 0.0


def hold_if_wanted(
    found: ElicitationRequest, user: Any, action: str, content: dict[str, Any] | None = None
) -> HeldAnswer | None:
    """Hold the answer through the reviewer's undo window; None when it is to be sent now (undo off, a quorum,
    a deadline inside the window): the caller then calls `transitions.respond`."""
    seconds = undo_seconds(user)
    if seconds <= 0:
        return None
    return transitions.hold_answer(found.pk, user=user, action=action, content=content, seconds=seconds)


def answer_summary(found: ElicitationRequest, action: str, content: dict[str, Any] | None) -> str:
    """The held answer as the reviewer gave it: Approved / Rejected for an approval, else the action and values."""
    if action != Action.ACCEPT:
        return presenters.ACTION_LABEL.get(action, action)
    content = content or {}
    approval = presenters.approval_question(found.questions) if found.mode == Mode.FORM else None
    if approval is not None and isinstance(content.get(approval.id), bool):
        return "Approved" if content[approval.id] else "Rejected"
    parts = []
    for item in found.questions or []:
        question = schemas.Question.from_dict(dict(item))
        if question.id in content:
            parts.append(
                f"{question.title or question.id}: {presenters.answer_text(question, content[question.id])}"
            )
    text = "Accepted" + (f" ({'; '.join(parts)})" if parts else "")
    return text if len(text) <= BANNER_ANSWER_CHARS else text[: BANNER_ANSWER_CHARS - 1] + "…"


@dataclass(frozen=True)
class HeldBanner:
    request_id: UUID
    message: str
    answer: str
    send_at: datetime


def banners(user: Any) -> list[HeldBanner]:
    """The reviewer's answers still in their undo window (a read: GET never writes)."""
    if not getattr(user, "is_authenticated", False):
        return []
    held = HeldAnswer.objects.filter(user=user).select_related("request").order_by("send_at")[:5]
    result = []
    for row in held:
        message = row.request.message
        if len(message) > BANNER_MESSAGE_CHARS:
            message = message[: BANNER_MESSAGE_CHARS - 1] + "…"
        result.append(
            HeldBanner(row.pk, message, answer_summary(row.request, row.action, row.content), row.send_at)
        )
    return result


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_POST
def undo_answer(request: HttpRequest, request_id: UUID) -> HttpResponse:
    """Take a held answer back: the agent was told nothing, the claim is still the reviewer's, and the request's
    page opens on the form as it was sent (its values are back in the shared drafts)."""
    found = access.reviewable_request(request.user, request_id)
    try:
        transitions.take_back(found.pk, user=request.user)
    except InvalidTransition as exc:
        messages.warning(request, exc.detail)
        return redirect("request", request_id=found.pk)
    messages.info(request, "Undone: the agent was told nothing. Your answer is back in the form.")
    return redirect("request", request_id=found.pk)
