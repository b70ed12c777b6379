"""Slack: a request as Block Kit, built from its questions, and answers read back from Slack's payloads.

Built with slack_sdk's Block Kit classes (their `to_dict` checks Slack's own limits) and sent with its `WebClient`,
whose base URL is `SLACK_API_URL` so tests point the real client at a server on loopback. One client per workspace
token in a process, reused by every call (see `client`).

- A form with one yes/no question gets Yes / No buttons; any other form gets an "Answer…" button that opens a
  modal with one input per question, of the same kind as the web form's: text, e-mail and URL inputs, date and
  date-time pickers, number inputs (decimals or whole numbers, with the schema's bounds), radio buttons or a
  static select for single choices, checkboxes or a multi-select for several. Same labels, same validation
  (`schemas.validate_content`), errors shown under the offending input.
- A request whose accept must be signed with a passkey (`step_up.required`, a rule's `step_up: passkey`) gets no
  Yes / No or Answer… (each is an accept, which only the request page can sign): Decline, and an "Approve with
  passkey" link to its page.
- URL-mode requests (external flows and hosted secret flows) show nothing of their content: only the queue and a
  link to ReviewHub, where the reviewer signs in.
- Agent text is untrusted: it is sent as plain text (never mrkdwn), so it cannot mention @channel or fake links.
"""

import functools
import ssl
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from slack_sdk import WebClient
from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    CheckboxesElement,
    ContextBlock,
    DatePickerElement,
    DateTimePickerElement,
    EmailInputElement,
    InputBlock,
    InputInteractiveElement,
    LinkButtonElement,
    NumberInputElement,
    Option,
    PlainTextInputElement,
    PlainTextObject,
    RadioButtonsElement,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
    UrlInputElement,
)
from slack_sdk.models.views import View

from elicitation.models import ElicitationRequest, Mode, Status
from elicitation.queue import schemas, step_up

YES, NO, DECLINE, OPEN_FORM, LINK = "reach_yes", "reach_no", "reach_decline", "reach_open_form", "reach_link"
MODAL_CALLBACK = "reach_answer"
ANSWER_ACTION = "answer"
BLOCK_PREFIX = "q:"
# Slack's limits: radio buttons and checkboxes show at most 10 options; static selects at most 100; option text
# 75 characters; a message's text 3,000; an input label 2,000; a hint 2,000.
INLINE_OPTIONS = 10
SELECT_OPTIONS = 100
OPTION_TEXT = 75
SECTION_TEXT = 3000
LABEL_TEXT = 2000


def client() -> WebClient:
    """The process's Slack client for the configured bot token, made once and shared by every thread."""
    return _client_for(settings.SLACK_BOT_TOKEN, settings.SLACK_API_URL, settings.SLACK_TIMEOUT_SECONDS)


@functools.cache
def _client_for(token: str, base_url: str, timeout: int) -> WebClient:
    # slack_sdk's sync client opens a connection per call (urllib). Given no TLS context, Python 3.11 builds a
    # default one for each HTTPS connection, loading the system's CA certificates again: 27 ms of CPU a post on
    # the bench machine (65-110 ms of wall time there under load). One context per client loads them once.
    # WebClient keeps no per-call state, so threads share it.
    return WebClient(token=token, base_url=base_url, timeout=timeout, ssl=ssl.create_default_context())


def request_link(request: ElicitationRequest) -> str:
    """The deep link: no credential in it; the page asks the reviewer to sign in."""
    return f"{settings.PUBLIC_URL}/requests/{request.pk}/"


def _plain(text: str, limit: int) -> PlainTextObject:
    text = text.strip() or " "
    return PlainTextObject(text=text if len(text) <= limit else text[: limit - 1] + "…", emoji=False)


def _short(text: str, limit: int = OPTION_TEXT) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def link_only(request: ElicitationRequest) -> bool:
    """URL-mode requests (hosted secret flows included) are never shown beyond a link."""
    return request.mode == Mode.URL


def yes_no_question(request: ElicitationRequest) -> schemas.Question | None:
    """The one question of a form that Yes / No buttons answer completely, if the form is that simple."""
    questions = schemas.questions_from_json(request.questions)
    return questions[0] if len(questions) == 1 and questions[0].kind == "boolean" else None


def fits_in_slack(request: ElicitationRequest) -> bool:
    """A select with more options than Slack can list is answered in ReviewHub instead."""
    return all(len(q.options) <= SELECT_OPTIONS for q in schemas.questions_from_json(request.questions))


def _heading(request: ElicitationRequest) -> str:
    return f"{request.queue.name}: a request from {request.agent.name} needs a reviewer"


def message_blocks(request: ElicitationRequest) -> list[Block]:
    """The message posted when a reviewer (or a channel) is told about an open request."""
    needs_passkey = step_up.required(request)
    facts = (
        f"Queue {request.queue.slug} · priority {request.priority} · due "
        f"{request.deadline.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    )
    if needs_passkey:
        facts += " · approving needs your passkey, on the request's page"
    context = ContextBlock(elements=[_plain(facts, SECTION_TEXT)])
    link = LinkButtonElement(text="Open in ReviewHub", url=request_link(request), action_id=LINK)
    if link_only(request):
        return [
            SectionBlock(
                text=_plain(_heading(request) + ". Its details are only shown in ReviewHub.", SECTION_TEXT)
            ),
            context,
            ActionsBlock(block_id=f"reach:{request.pk}", elements=[link]),
        ]
    value = str(request.pk)
    decline = ButtonElement(text="Decline", action_id=DECLINE, value=value, style="danger")
    buttons: list[Any]
    if needs_passkey:
        # Yes, No and the modal are all accepts, which `respond` (asking the same function) refuses without a
        # passkey's signature: only the page can sign one. A decline needs none.
        approve_on_page = LinkButtonElement(
            text="Approve with passkey", url=request_link(request), action_id=LINK, style="primary"
        )
        buttons = [approve_on_page, decline]
    elif yes_no_question(request) is not None:
        buttons = [
            ButtonElement(text="Yes", action_id=YES, value=value, style="primary"),
            ButtonElement(text="No", action_id=NO, value=value),
            decline,
            link,
        ]
    elif fits_in_slack(request):
        buttons = [
            ButtonElement(text="Answer…", action_id=OPEN_FORM, value=value, style="primary"),
            decline,
            link,
        ]
    else:
        buttons = [decline, link]
    return [
        SectionBlock(text=_plain(_heading(request), SECTION_TEXT)),
        SectionBlock(text=_plain(request.message, SECTION_TEXT)),
        context,
        ActionsBlock(block_id=f"reach:{request.pk}", elements=buttons),
    ]


def closed_blocks(request: ElicitationRequest) -> list[Block]:
    """What the message becomes once the request is answered, withdrawn or expired, wherever that happened."""
    if request.status == Status.COMPLETED:
        who = request.answered_by.get_username() if request.answered_by else "a reviewer"
        outcome = f"Answered by {who}: {request.action}."
    elif request.status == Status.WITHDRAWN:
        outcome = "Withdrawn by the agent."
    elif request.status == Status.EXPIRED:
        outcome = f"Expired without an answer ({request.action})."
    else:
        outcome = f"Moved to queue {request.queue.slug}."
    return [
        SectionBlock(text=_plain(f"{request.queue.name}: request from {request.agent.name}", SECTION_TEXT)),
        ContextBlock(elements=[_plain(outcome, SECTION_TEXT)]),
    ]


def fallback_text(request: ElicitationRequest) -> str:
    """The notification text Slack shows where blocks are not rendered: never the content of a URL request."""
    return _heading(request)


# --- the modal -------------------------------------------------------------------------------------------------


def _options(question: schemas.Question) -> list[Option]:
    # Values are option indexes: Slack caps a value at 150 characters, an MCP option is not capped.
    return [
        Option(value=str(index), text=_short(option.label)) for index, option in enumerate(question.options)
    ]


def _initial_options(question: schemas.Question, options: list[Option]) -> list[Option] | None:
    default = question.default
    if default is None:
        return None
    wanted = set(default) if isinstance(default, (list, tuple)) else {default}
    chosen = [options[i] for i, option in enumerate(question.options) if option.value in wanted]
    return chosen or None


def question_element(question: schemas.Question) -> InputInteractiveElement:
    """The Block Kit input for one question, matching the web form's widget for its kind."""
    kind, default = question.kind, question.default
    if kind == "text":
        if question.format == "email":
            return EmailInputElement(action_id=ANSWER_ACTION, initial_value=default)
        if question.format == "uri":
            return UrlInputElement(action_id=ANSWER_ACTION, initial_value=default)
        if question.format == "date":
            return DatePickerElement(action_id=ANSWER_ACTION, initial_date=default)
        if question.format == "date-time":
            initial = None
            if isinstance(default, str):
                try:
                    initial = int(datetime.fromisoformat(default).timestamp())
                except ValueError:
                    initial = None
            return DateTimePickerElement(action_id=ANSWER_ACTION, initial_date_time=initial)
        long_text = question.max is None or question.max > 150
        return PlainTextInputElement(
            action_id=ANSWER_ACTION,
            initial_value=default,
            multiline=long_text,
            min_length=int(question.min) if question.min is not None else None,
            max_length=int(question.max) if question.max is not None else None,
        )
    if kind in ("number", "integer"):
        return NumberInputElement(
            action_id=ANSWER_ACTION,
            is_decimal_allowed=kind == "number",
            initial_value=default,
            min_value=question.min,
            max_value=question.max,
        )
    if kind == "boolean":
        yes_no = [Option(value="true", text="Yes"), Option(value="false", text="No")]
        answer = None if default is None else yes_no[0] if default else yes_no[1]
        return RadioButtonsElement(action_id=ANSWER_ACTION, options=yes_no, initial_option=answer)
    options = _options(question)
    initial_options = _initial_options(question, options)
    if kind == "single-select":
        chosen = initial_options[0] if initial_options else None
        if len(options) <= INLINE_OPTIONS:
            return RadioButtonsElement(action_id=ANSWER_ACTION, options=options, initial_option=chosen)
        return StaticSelectElement(action_id=ANSWER_ACTION, options=options, initial_option=chosen)
    if len(options) <= INLINE_OPTIONS:
        return CheckboxesElement(action_id=ANSWER_ACTION, options=options, initial_options=initial_options)
    return StaticMultiSelectElement(
        action_id=ANSWER_ACTION,
        options=options,
        initial_options=initial_options,
        max_selected_items=int(question.max) if question.max is not None else None,
    )


def question_block(question: schemas.Question) -> InputBlock:
    return InputBlock(
        block_id=BLOCK_PREFIX + question.id,
        label=_plain(question.title, LABEL_TEXT),
        hint=_plain(question.description, LABEL_TEXT) if question.description else None,
        element=question_element(question),
        optional=not question.required,
    )


def modal_view(request: ElicitationRequest) -> View:
    """The form as a modal; `private_metadata` carries the request id back with the submission."""
    questions = schemas.questions_from_json(request.questions)
    blocks: list[Block] = [SectionBlock(text=_plain(request.message, SECTION_TEXT))]
    blocks += [question_block(question) for question in questions]
    return View(
        type="modal",
        callback_id=MODAL_CALLBACK,
        private_metadata=str(request.pk),
        title=_plain("ReviewHub", 24),
        submit=_plain("Accept", 24),
        close=_plain("Cancel", 24),
        blocks=blocks,
    )


def as_dicts(blocks: Iterable[Block]) -> list[dict[str, Any]]:
    return [block.to_dict() for block in blocks]


# --- reading a submission back ----------------------------------------------------------------------------------


def _answer(question: schemas.Question, entry: dict[str, Any]) -> Any:
    """One input's value as the web form would submit it, before validation; None when left empty."""
    kind = entry.get("type")
    if kind in ("plain_text_input", "email_text_input", "url_text_input"):
        value = entry.get("value")
        return value if value not in (None, "") else None
    if kind == "number_input":
        raw = entry.get("value")
        if raw in (None, ""):
            return None
        try:
            number = float(raw)
        except (TypeError, ValueError):
            return raw  # validation reports it
        return int(number) if question.kind == "integer" and number.is_integer() else number
    if kind == "datepicker":
        return entry.get("selected_date")
    if kind == "datetimepicker":
        stamp = entry.get("selected_date_time")
        return None if stamp is None else datetime.fromtimestamp(int(stamp), UTC).isoformat()
    if kind in ("radio_buttons", "static_select"):
        selected = entry.get("selected_option")
        if not selected:
            return None
        if question.kind == "boolean":
            return selected.get("value") == "true"
        return _option_value(question, selected.get("value"))
    if kind in ("checkboxes", "multi_static_select"):
        chosen = [
            _option_value(question, option.get("value")) for option in entry.get("selected_options") or []
        ]
        return chosen or None  # nothing ticked is no answer: required questions say so
    return None


def _option_value(question: schemas.Question, index: Any) -> Any:
    try:
        return question.options[int(index)].value
    except (TypeError, ValueError, IndexError):
        return index  # not one of ours: validation says it is not an option


def content_from_state(questions: list[schemas.Question], values: dict[str, Any]) -> dict[str, Any]:
    """The modal's `view.state.values` as MCP content, before validation."""
    content: dict[str, Any] = {}
    for question in questions:
        entry = (values.get(BLOCK_PREFIX + question.id) or {}).get(ANSWER_ACTION)
        if not isinstance(entry, dict):
            continue
        value = _answer(question, entry)
        if value is not None:
            content[question.id] = value
    return content


def validate_submission(
    request: ElicitationRequest, values: dict[str, Any]
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(clean content, {}) or (None, {block id: reason}) with the web form's own reasons."""
    questions = schemas.questions_from_json(request.questions)
    submitted = content_from_state(questions, values)
    try:
        return schemas.validate_content(questions, submitted), {}
    except schemas.AnswerInvalid as exc:
        errors: dict[str, str] = {}
        for key, reason in exc.errors.items():
            question_id = key.removeprefix("$.")
            if key == "$" or not any(q.id == question_id for q in questions):
                question_id = questions[0].id if questions else ""
            errors[BLOCK_PREFIX + question_id] = _short(reason, 150)
        return None, errors
