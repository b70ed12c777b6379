"""Block Kit built from a request's questions: every question kind as the web form shows it, same labels, and
the same validation when a modal comes back. A request whose accept needs a passkey gets no accepting button."""

import json
from collections.abc import Callable
from typing import Any

import pytest

from elicitation.delivery import slack
from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import rules, step_up
from tests.security.test_step_up import PAY, STEP_UP_RULE

OPTIONS_12 = [f"opt-{n}" for n in range(12)]

ALL_KINDS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "full_name": {
            "type": "string",
            "title": "Full name",
            "description": "As on the contract.",
            "maxLength": 80,
        },
        "notes": {"type": "string", "title": "Notes"},
        "email": {"type": "string", "format": "email", "title": "Contact email"},
        "website": {"type": "string", "format": "uri", "title": "Website"},
        "start": {"type": "string", "format": "date", "title": "Start date"},
        "meeting": {"type": "string", "format": "date-time", "title": "Kick-off"},
        "budget": {"type": "number", "title": "Budget", "minimum": 0, "maximum": 5000},
        "seats": {"type": "integer", "title": "Seats", "minimum": 1, "maximum": 10, "default": 2},
        "approve": {"type": "boolean", "title": "Approve"},
        "plan": {
            "type": "string",
            "title": "Plan",
            "oneOf": [{"const": "b", "title": "Basic"}, {"const": "p", "title": "Pro"}],
        },
        "region": {"type": "string", "title": "Region", "enum": OPTIONS_12},
        "channels": {
            "type": "array",
            "title": "Notify via",
            "items": {"type": "string", "enum": ["mail", "sms"]},
        },
        "tags": {
            "type": "array",
            "title": "Tags",
            "maxItems": 3,
            "items": {"type": "string", "enum": OPTIONS_12},
        },
    },
    "required": ["full_name", "approve", "channels"],
}


@pytest.fixture
def form(make_request: Callable[..., ElicitationRequest]) -> ElicitationRequest:
    return make_request(requested_schema=ALL_KINDS, message="Sign the contract?")


def elements(request: ElicitationRequest) -> dict[str, dict[str, Any]]:
    view = slack.modal_view(request).to_dict()
    return {b["block_id"].removeprefix("q:"): b for b in view["blocks"] if b["type"] == "input"}


def test_every_question_kind_has_its_block_kit_input(form: ElicitationRequest) -> None:
    blocks = elements(form)
    kinds = {name: block["element"]["type"] for name, block in blocks.items()}
    assert kinds == {
        "full_name": "plain_text_input",
        "notes": "plain_text_input",
        "email": "email_text_input",
        "website": "url_text_input",
        "start": "datepicker",
        "meeting": "datetimepicker",
        "budget": "number_input",
        "seats": "number_input",
        "approve": "radio_buttons",
        "plan": "radio_buttons",
        "region": "static_select",  # more than ten options
        "channels": "checkboxes",
        "tags": "multi_static_select",
    }


def test_labels_hints_bounds_and_required_follow_the_schema(form: ElicitationRequest) -> None:
    blocks = elements(form)
    assert blocks["full_name"]["label"]["text"] == "Full name"
    assert blocks["full_name"]["hint"]["text"] == "As on the contract."
    assert blocks["full_name"]["element"]["max_length"] == 80
    assert blocks["full_name"]["element"]["multiline"] is False
    assert blocks["notes"]["element"]["multiline"] is True
    assert "optional" not in blocks["full_name"] or blocks["full_name"]["optional"] is False
    assert blocks["notes"]["optional"] is True
    budget, seats = blocks["budget"]["element"], blocks["seats"]["element"]
    assert (budget["is_decimal_allowed"], budget["min_value"], budget["max_value"]) == (True, "0", "5000")
    assert (seats["is_decimal_allowed"], seats["initial_value"], seats["max_value"]) == (False, "2", "10")
    assert [o["text"]["text"] for o in blocks["plan"]["element"]["options"]] == ["Basic", "Pro"]
    assert blocks["tags"]["element"]["max_selected_items"] == 3


def test_a_yes_no_form_gets_buttons(make_request: Callable[..., ElicitationRequest]) -> None:
    request = make_request(requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}})
    actions = next(b for b in slack.as_dicts(slack.message_blocks(request)) if b["type"] == "actions")
    assert [e.get("action_id") for e in actions["elements"]] == [
        slack.YES,
        slack.NO,
        slack.DECLINE,
        slack.LINK,
    ]


def test_a_larger_form_gets_a_modal_button_and_the_message_as_plain_text(form: ElicitationRequest) -> None:
    form.message = "<!channel> *urgent* <https://evil.example|click>"
    blocks = slack.as_dicts(slack.message_blocks(form))
    actions = next(b for b in blocks if b["type"] == "actions")
    assert [e.get("action_id") for e in actions["elements"]] == [slack.OPEN_FORM, slack.DECLINE, slack.LINK]
    texts = [b["text"] for b in blocks if b["type"] == "section"]
    assert all(text["type"] == "plain_text" for text in texts)  # agent text never becomes mrkdwn


@pytest.mark.parametrize(
    "schema",
    [{"type": "object", "properties": {"ok": {"type": "boolean"}}}, ALL_KINDS],
    ids=["yes-no", "larger-form"],
)
def test_a_request_that_needs_a_passkey_offers_decline_and_a_link_to_approve_on_its_page(
    queue: Queue, make_request: Callable[..., ElicitationRequest], schema: dict[str, Any]
) -> None:
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    request = make_request(requested_schema=schema, context=PAY)
    assert step_up.required(request)
    blocks = slack.as_dicts(slack.message_blocks(request))
    actions = next(b for b in blocks if b["type"] == "actions")
    # No Yes, No or Answer…: each is an accept, which only the page can sign.
    assert [(e["type"], e.get("action_id")) for e in actions["elements"]] == [
        ("button", slack.LINK),
        ("button", slack.DECLINE),
    ]
    link, decline = actions["elements"]
    assert (link["text"]["text"], link["url"]) == ("Approve with passkey", slack.request_link(request))
    assert "value" not in link  # a link: Slack opens the page, nothing comes back to answer
    assert (decline["text"]["text"], decline["value"]) == ("Decline", str(request.pk))
    [context] = [b for b in blocks if b["type"] == "context"]
    assert "passkey" in context["elements"][0]["text"]


def test_the_context_of_a_request_without_step_up_says_nothing_of_passkeys(
    make_request: Callable[..., ElicitationRequest],
) -> None:
    blocks = slack.as_dicts(slack.message_blocks(make_request()))
    assert "passkey" not in json.dumps(blocks)


def state(**values: dict[str, Any]) -> dict[str, Any]:
    return {f"q:{name}": {"answer": entry} for name, entry in values.items()}


VALID = state(
    full_name={"type": "plain_text_input", "value": "Ada Lovelace"},
    email={"type": "email_text_input", "value": "ada@example.com"},
    start={"type": "datepicker", "selected_date": "2026-12-01"},
    meeting={"type": "datetimepicker", "selected_date_time": 1796083200},
    budget={"type": "number_input", "value": "1200.5"},
    seats={"type": "number_input", "value": "3"},
    approve={"type": "radio_buttons", "selected_option": {"value": "true"}},
    plan={"type": "radio_buttons", "selected_option": {"value": "1"}},
    region={"type": "static_select", "selected_option": {"value": "11"}},
    channels={"type": "checkboxes", "selected_options": [{"value": "0"}, {"value": "1"}]},
    tags={"type": "multi_static_select", "selected_options": [{"value": "2"}]},
    notes={"type": "plain_text_input", "value": None},
)


def test_a_valid_submission_becomes_mcp_content(form: ElicitationRequest) -> None:
    content, errors = slack.validate_submission(form, VALID)
    assert errors == {}
    assert content == {
        "full_name": "Ada Lovelace",
        "email": "ada@example.com",
        "start": "2026-12-01",
        "meeting": "2026-12-01T00:00:00+00:00",
        "budget": 1200.5,
        "seats": 3,
        "approve": True,
        "plan": "p",
        "region": "opt-11",
        "channels": ["mail", "sms"],
        "tags": ["opt-2"],
    }


@pytest.mark.parametrize(
    ("field", "entry", "reason"),
    [
        ("email", {"type": "email_text_input", "value": "not-an-address"}, "email"),
        ("budget", {"type": "number_input", "value": "9000"}, "5000"),
        ("seats", {"type": "number_input", "value": "2.5"}, "integer"),
        ("full_name", {"type": "plain_text_input", "value": None}, "required"),
        ("channels", {"type": "checkboxes", "selected_options": []}, "required"),
        ("region", {"type": "static_select", "selected_option": {"value": "99"}}, ""),
    ],
)
def test_an_invalid_answer_is_reported_under_its_input_with_the_web_forms_reason(
    form: ElicitationRequest, field: str, entry: dict[str, Any], reason: str
) -> None:
    values = {**VALID, f"q:{field}": {"answer": entry}}
    content, errors = slack.validate_submission(form, values)
    assert content is None
    assert list(errors) == [f"q:{field}"]
    assert reason.lower() in errors[f"q:{field}"].lower()
