"""Answers given in Slack: who the Slack user is in ReviewHub, and the same transitions as the web page.

Every payload reaching here was verified by the edge view (api/slack_views.py) against the signing secret and
the replay window. A Slack user is a reviewer through an explicit link (`ReviewerReach.slack_user_id`, made in
ReviewHub) or, failing that, a Slack account whose e-mail Slack reports as confirmed and which matches exactly one
active reviewer. Anyone else, and a reviewer not on the request's queue, is told so in an ephemeral message and
nothing changes. Yes / No / Decline claim the request and answer it in one transaction (`claim_request` then
`respond`, as the page's buttons do), so the claim, quorum and audit rules are the web page's own.
"""

import logging
from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from slack_sdk.errors import SlackApiError

from elicitation.delivery import slack
from elicitation.models import Action, ElicitationRequest, ReviewerReach
from elicitation.queue import access, transitions
from elicitation.queue.errors import DomainError

logger = logging.getLogger(__name__)

NOT_A_REVIEWER = (
    "You are not a ReviewHub reviewer of this queue, or your Slack account is not linked to one. "
    "Nothing was changed."
)


@dataclass(frozen=True)
class Reply:
    """What the interaction endpoint answers Slack: a JSON body (modal errors), or nothing (200)."""

    body: dict[str, Any] | None = None


def reviewer_for(slack_user_id: str) -> Any:
    """The active reviewer this Slack user is, or None."""
    if not slack_user_id:
        return None
    linked = ReviewerReach.objects.filter(slack_user_id=slack_user_id, user__is_active=True).select_related(
        "user"
    )
    found = linked.first()
    if found is not None:
        return found.user
    try:
        info = slack.client().users_info(user=slack_user_id)
    except SlackApiError as exc:
        logger.info("Slack users.info for %s failed: %s", slack_user_id, exc.response.get("error"))
        return None
    user = info.get("user") or {}
    address = (user.get("profile") or {}).get("email") or ""
    if not user.get("is_email_confirmed") or not address or user.get("deleted") or user.get("is_bot"):
        return None
    matches = list(get_user_model().objects.filter(email__iexact=address, is_active=True)[:2])
    return matches[0] if len(matches) == 1 else None


def _request(request_id: str) -> ElicitationRequest | None:
    try:
        return ElicitationRequest.objects.select_related("queue", "agent").filter(pk=request_id).first()
    except (ValueError, TypeError, Exception):
        return None


def _tell(payload: dict[str, Any], text: str) -> None:
    """An ephemeral message only the acting Slack user sees, in the conversation they acted in."""
    channel = (payload.get("channel") or {}).get("id") or (payload.get("container") or {}).get("channel_id")
    user = (payload.get("user") or {}).get("id")
    if not channel or not user:
        return
    try:
        slack.client().chat_postEphemeral(channel=channel, user=user, text=text)
    except SlackApiError as exc:
        logger.info("Slack ephemeral message failed: %s", exc.response.get("error"))


def _authorised(payload: dict[str, Any], request: ElicitationRequest | None) -> Any:
    user = reviewer_for((payload.get("user") or {}).get("id", ""))
    if user is None or request is None or not access.can_review(user, request.queue):
        return None
    return user


def answer(request: ElicitationRequest, user: Any, action: str, content: dict[str, Any] | None) -> None:
    """Claim and answer in one transaction: if the answer is refused, the claim is not left behind."""
    with transaction.atomic():
        transitions.claim_request(request.pk, user=user)
        transitions.respond(request.pk, user=user, action=action, content=content)


def handle(payload: dict[str, Any]) -> Reply:
    kind = payload.get("type")
    if kind == "block_actions":
        return _block_action(payload)
    if kind == "view_submission" and (payload.get("view") or {}).get("callback_id") == slack.MODAL_CALLBACK:
        return _view_submission(payload)
    return Reply()


def _block_action(payload: dict[str, Any]) -> Reply:
    actions = payload.get("actions") or []
    if not actions:
        return Reply()
    action = actions[0]
    action_id = action.get("action_id")
    if action_id not in (slack.YES, slack.NO, slack.DECLINE, slack.OPEN_FORM):
        return Reply()  # the link button: Slack opens it, nothing for us to do
    request = _request(action.get("value") or "")
    user = _authorised(payload, request)
    if user is None or request is None:
        _tell(payload, NOT_A_REVIEWER)
        return Reply()
    if action_id == slack.OPEN_FORM:
        if request.is_open and not slack.link_only(request):
            slack.client().views_open(trigger_id=payload.get("trigger_id"), view=slack.modal_view(request))
        else:
            _tell(payload, f"This request is {request.status}; nothing to answer.")
        return Reply()
    content = None
    verdict = Action.DECLINE
    if action_id in (slack.YES, slack.NO):
        question = slack.yes_no_question(request)
        if question is None or slack.link_only(request):
            _tell(payload, "This request is answered in ReviewHub.")
            return Reply()
        verdict = Action.ACCEPT
        content = {question.id: action_id == slack.YES}
    try:
        answer(request, user, verdict, content)
    except DomainError as exc:
        _tell(payload, f"Not answered: {exc}")
    return Reply()


def _view_submission(payload: dict[str, Any]) -> Reply:
    view = payload.get("view") or {}
    request = _request(view.get("private_metadata") or "")
    first_block = next(
        (b.get("block_id") for b in view.get("blocks") or [] if b.get("type") == "input"), slack.BLOCK_PREFIX
    )
    user = _authorised(payload, request)
    if user is None or request is None or slack.link_only(request):
        return Reply({"response_action": "errors", "errors": {first_block: NOT_A_REVIEWER[:150]}})
    values = (view.get("state") or {}).get("values") or {}
    content, errors = slack.validate_submission(request, values)
    if errors:
        return Reply({"response_action": "errors", "errors": errors})
    try:
        answer(request, user, Action.ACCEPT, content)
    except DomainError as exc:
        fields = getattr(exc, "fields", None) or {}
        reason = next(iter(fields.values()), str(exc)) if fields else str(exc)
        return Reply({"response_action": "errors", "errors": {first_block: str(reason)[:150]}})
    return Reply()
