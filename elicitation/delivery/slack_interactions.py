"""Answers given in Slack: who the Slack user is in ReviewHub, and the same transitions as the web page.

Every payload reaching here was verified by the edge view (api/slack_views.py) against the signing secret and
the replay window. A Slack user is a reviewer through an explicit link (`ReviewerReach.slack_user_id`, made in
ReviewHub) or, failing that, a Slack account whose e-mail Slack reports as confirmed and which matches exactly one
active reviewer. Anyone else, and a reviewer not on the request's queue, is told so in an ephemeral message and
nothing changes. Yes / No / Decline claim the request and answer it in one transaction (`claim_request` then
`respond`, as the page's buttons do), so the claim, quorum and audit rules are the web page's own. A request whose
accept needs a passkey (`step_up.required`) is posted with Decline and a link to its page only (slack.py); an accept
arriving anyway (a button of a message an older ReviewHub posted) is refused by `respond`, and nothing is claimed.

A signed payload is still checked against PAYLOAD_SCHEMA before anything reads it (`check_payload`): every field
this module and slack.py read, in the shape Slack sends it. A `user` that is a string, `actions` that are not
objects or a date-time past year 9999 is a 400 naming the field, never an AttributeError deep in a handler.
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

import jsonschema_rs
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import transaction
from slack_sdk.errors import SlackApiError

from elicitation.delivery import slack
from elicitation.models import Action, ElicitationRequest, ReviewerReach
from elicitation.queue import access, step_up, transitions, untrusted_json
from elicitation.queue.errors import DomainError, InvalidInput

logger = logging.getLogger(__name__)

NOT_A_REVIEWER = (
    "You are not a ReviewHub reviewer of this queue, or your Slack account is not linked to one. "
    "Nothing was changed."
)


# --- the payload's shape, checked once at the door ----------------------------------------------------------------

STRING = {"type": "string"}
# An option Slack echoes back from a select, radio buttons or checkboxes: its value is our index (slack.py).
SELECTED_OPTION = {"type": "object", "required": ["value"], "properties": {"value": STRING}}
NO_OPTION_OR_ONE = {**SELECTED_OPTION, "type": ["object", "null"]}  # `required` binds objects only
# One input's state in `view.state.values[block_id][action_id]`, as slack.py's `_answer` reads it. Date-times are
# epoch seconds; bounded so that `datetime.fromtimestamp` can take them.
INPUT_STATE = {
    "type": "object",
    "properties": {
        "type": STRING,
        "value": {"type": ["string", "null"]},
        "selected_date": {"type": ["string", "null"]},
        "selected_date_time": {"type": ["integer", "null"], "minimum": 0, "maximum": 253402300799},
        "selected_option": NO_OPTION_OR_ONE,
        "selected_options": {"type": "array", "items": SELECTED_OPTION},
    },
}
# What this module and slack.py read of an interaction payload; Slack's other fields pass unread. `team` and
# `channel` are null in some of Slack's own payloads (org-wide apps, modals).
PAYLOAD_SCHEMA = {
    "type": "object",
    "required": ["type"],
    "properties": {
        "type": STRING,
        "trigger_id": STRING,
        "user": {"type": "object", "required": ["id"], "properties": {"id": STRING}},
        "team": {"type": ["object", "null"]},
        "channel": {"type": ["object", "null"], "properties": {"id": STRING}},
        "container": {"type": "object", "properties": {"channel_id": STRING}},
        "actions": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["action_id"],
                "properties": {"action_id": STRING, "value": STRING},
            },
        },
        "view": {
            "type": "object",
            "properties": {
                "callback_id": STRING,
                "private_metadata": STRING,
                "blocks": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"type": STRING, "block_id": STRING}},
                },
                "state": {
                    "type": "object",
                    "properties": {
                        "values": {
                            "type": "object",
                            "additionalProperties": {"type": "object", "additionalProperties": INPUT_STATE},
                        }
                    },
                },
            },
        },
    },
    "allOf": [
        {
            "if": {"required": ["type"], "properties": {"type": {"const": "block_actions"}}},
            "then": {"required": ["user", "actions", "trigger_id"]},
        },
        {
            "if": {"required": ["type"], "properties": {"type": {"const": "view_submission"}}},
            "then": {"required": ["user", "view"]},
        },
    ],
}
_payload_validator = jsonschema_rs.validator_for(PAYLOAD_SCHEMA)
TYPE_WORDS = {
    "object": "an object",
    "array": "an array",
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "null": "null",
}


def _reason(error: jsonschema_rs.ValidationError) -> str:
    kind = error.kind
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Type):
        return "must be " + " or ".join(TYPE_WORDS.get(str(name), str(name)) for name in kind.types)
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Minimum):
        return f"must be at least {kind.limit}"
    if isinstance(kind, jsonschema_rs.ValidationErrorKind.Maximum):
        return f"must be at most {kind.limit}"
    return str(error.message)  # no other keyword of PAYLOAD_SCHEMA reaches here


def check_payload(payload: Any) -> dict[str, Any]:
    """The payload, if it has the shape `handle` reads; otherwise InvalidInput naming each offending field
    (`payload.user`, `payload.actions[0].value`) with the reason."""
    problems: dict[str, str] = {}
    for error in _payload_validator.iter_errors(payload):
        path = "payload"
        for key in error.instance_path:
            path = untrusted_json.join(path, key)
        if isinstance(error.kind, jsonschema_rs.ValidationErrorKind.Required):
            problems.setdefault(untrusted_json.join(path, str(error.kind.property)), "is required")
        else:
            problems.setdefault(path, _reason(error))
    if problems:
        raise InvalidInput(
            "The Slack payload is not in the shape Slack sends.", dict(sorted(problems.items()))
        )
    return cast("dict[str, Any]", payload)  # an object: PAYLOAD_SCHEMA says so first


# --- answering ----------------------------------------------------------------------------------------------------


# Charges the acting reviewer's rate budget: None within it, else the refusal's words. The edge view supplies it
# (api/slack_views.py): the budget is the reviewer API's, and delivery sits below the API.
RateCheck = Callable[[Any], str | None]


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
    """The request a button's value or a modal's private_metadata names, or None when it names none."""
    try:
        pk = UUID(request_id)
    except ValueError:
        return None
    return ElicitationRequest.objects.select_related("queue", "agent").filter(pk=pk).first()


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


def answer(request: ElicitationRequest, user: User, action: str, content: dict[str, Any] | None) -> None:
    """Claim and answer in one transaction: if the answer is refused, the claim is not left behind."""
    with transaction.atomic():
        transitions.claim_request(request.pk, user=user)
        transitions.respond(request.pk, user=user, action=action, content=content)


def handle(payload: dict[str, Any], over_rate: RateCheck) -> Reply:
    """Act on a payload `check_payload` accepted. A reviewer's button or form is one call of their rate budget,
    charged by `over_rate` once they are known to review the request's queue."""
    kind = payload.get("type")
    if kind == "block_actions":
        return _block_action(payload, over_rate)
    if kind == "view_submission" and (payload.get("view") or {}).get("callback_id") == slack.MODAL_CALLBACK:
        return _view_submission(payload, over_rate)
    return Reply()


def _block_action(payload: dict[str, Any], over_rate: RateCheck) -> Reply:
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
    refused = over_rate(user)
    if refused is not None:
        _tell(payload, f"Not answered: {refused}")
        return Reply()
    if action_id == slack.OPEN_FORM:
        if step_up.required(request):
            # An older message's button: the modal's submit would be an accept that `respond` refuses.
            _tell(payload, f"Not answered: {step_up.page_refusal(request)}")
        elif request.is_open and not slack.link_only(request):
            try:
                slack.client().views_open(trigger_id=payload["trigger_id"], view=slack.modal_view(request))
            except SlackApiError as exc:  # a trigger lives 3 s: a slow click is Slack's "expired_trigger_id"
                logger.info("Slack views.open failed: %s", exc.response.get("error"))
                _tell(payload, "The form could not be opened; press the button again.")
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


def _view_submission(payload: dict[str, Any], over_rate: RateCheck) -> Reply:
    view = payload.get("view") or {}
    request = _request(view.get("private_metadata") or "")
    first_block = next(
        (b.get("block_id") for b in view.get("blocks") or [] if b.get("type") == "input"), slack.BLOCK_PREFIX
    )
    user = _authorised(payload, request)
    if user is None or request is None or slack.link_only(request):
        return Reply({"response_action": "errors", "errors": {first_block: NOT_A_REVIEWER[:150]}})
    refused = over_rate(user)
    if refused is not None:
        return Reply({"response_action": "errors", "errors": {first_block: f"Not answered: {refused}"[:150]}})
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
