"""A reviewer's answer to a claimed request: accept (its content validated, or the submitted drafts), decline or
cancel; and the close of a URL-mode request that a hosted flow answered. A request that needs a quorum is
answered through `quorum.respond_in_quorum` instead."""

from collections.abc import Mapping
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Q

from elicitation.models import Action, ElicitationRequest, FlowStatus, Mode, Status
from elicitation.queue import answer_defaults, clock, quorum, schemas, step_up
from elicitation.queue.errors import InvalidInput, InvalidTransition
from elicitation.queue.transitions.completion import completion_changes, content_error_fields
from elicitation.queue.transitions.deadlines import expire_if_overdue
from elicitation.queue.transitions.drafts import content_from_drafts
from elicitation.queue.transitions.path import apply_transition, reload_request
from elicitation.queue.transitions.quorum import respond_in_quorum


def forwards_open_hosted_flow(request: ElicitationRequest) -> bool:
    """A URL-mode request whose URL is the page of an open hosted flow of the same agent (its own, or one an MCP
    client forwarded)."""
    return (
        request.mode == Mode.URL
        and ElicitationRequest.objects.filter(
            agent_id=request.agent_id, url=request.url, hosted_flow__status=FlowStatus.OPEN
        ).exists()
    )


def respond(
    request_id: UUID,
    *,
    user: User,
    action: str,
    content: dict[str, Any] | None = None,
    loaded: ElicitationRequest | None = None,
    assertion: Mapping[str, Any] | None = None,
) -> ElicitationRequest:
    """Complete a claimed request. Accept validates the content (or the submitted drafts); decline/cancel carry none.

    `loaded` is the request as the caller just read it, for the checks made before the row is locked (the
    guarded UPDATE re-checks them). `assertion` is the passkey's WebAuthn assertion, which an accept of a request
    whose rule says `step_up: passkey` must carry (queue/step_up.py): the one check, whatever the door."""
    # Past its deadline the request has expired, whether or not the sweep has run: the agent gets one outcome.
    request = expire_if_overdue(loaded if loaded is not None else reload_request(request_id))
    if quorum.requirement(request) is not None:
        return respond_in_quorum(request, user=user, action=action, content=content, assertion=assertion)
    clean = checked_answer(request, user=user, action=action, content=content)
    signed = step_up.verified_approval(request, user, action, assertion)
    now = clock.now()
    return apply_transition(
        request_id,
        allowed=Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now),
        changes=completion_changes(
            user, action, clean, now, request=request, step_up=[signed] if signed is not None else None
        ),
        what="answer",
        kind="completed",
        actor_user=user,
        detail={"action": action},
        tell_agent="completed",
    )


def checked_answer(
    request: ElicitationRequest, *, user: User, action: str, content: dict[str, Any] | None
) -> dict[str, Any] | None:
    """What `respond` would send, or why not: the holder's claim, the action, and accept's content validated
    (or the submitted drafts). Held answers (held_answers.py) are checked here before their undo window."""
    if request.status != Status.CLAIMED or request.claimed_by_id != user.pk:
        raise InvalidTransition(
            "Only the reviewer holding the claim can answer it.", current_status=request.status
        )
    if action not in Action.values:
        raise InvalidInput("Unknown action.", {"action": "must be accept, decline or cancel"})
    if action == Action.ACCEPT and forwards_open_hosted_flow(request):
        # `accept` without the secret would tell the MCP client a flow finished that never did.
        raise InvalidInput(
            "A hosted flow is accepted by submitting it on its own page.",
            {"action": "open the flow page to submit it, or decline"},
        )
    clean: dict[str, Any] | None = None
    if action == Action.ACCEPT and request.mode == Mode.FORM:
        if hasattr(request, "hosted_flow"):
            raise InvalidInput(
                "A hosted flow is answered on its own page.", {"action": "use the hosted flow page"}
            )
        submitted = content if content is not None else content_from_drafts(request)
        questions = schemas.questions_from_json(request.questions)
        submitted = answer_defaults.fill_defaults(questions, submitted, answer_defaults.skipped_ids(request))
        try:
            clean = schemas.validate_content(questions, submitted)
        except schemas.AnswerInvalid as exc:
            raise InvalidInput("The answers are not valid.", content_error_fields(exc.errors)) from None
    elif content:
        raise InvalidInput(
            "Content is only sent with accept.", {"content": "only allowed with action accept on a form"}
        )
    return clean


def complete_url_request(
    request_id: UUID, *, user: User, action: str, allowed: Q, detail: dict[str, Any]
) -> ElicitationRequest:
    """Close a URL-mode request that a hosted flow answered (accept carries no content: the secret stays in
    the flow). The caller holds the transaction in which the flow itself changes."""
    now = clock.now()
    return apply_transition(
        request_id,
        allowed=allowed,
        changes={
            **completion_changes(user, action, None, now, request=reload_request(request_id)),
            "url_flow_completed_at": now,
        },
        what="complete the flow",
        kind="completed",
        actor_user=user,
        detail={"action": action, **detail},
        tell_agent="completed",
    )
