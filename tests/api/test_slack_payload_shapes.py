"""Signed Slack payloads in shapes Slack never sends: each is a 400 in the API's error vocabulary naming the field
and the reason, never a 500, and nothing is recorded (no answer, no claim, no audit row, no message to Slack).

The base payloads below are real answers from a linked reviewer (the explicit test at the top shows each answers
its request), so a malformed field is the only thing between the payload and an answer."""

import copy
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from elicitation.delivery import slack
from elicitation.models import Approval, ElicitationRequest, RequestEvent, ReviewerReach, Status
from tests.conftest import Clock
from tests.delivery.reach.conftest import FakeSlack, interaction_body, signed_headers, slack_api  # noqa: F401

URL = "/api/v1/slack/interactions"
YES_NO = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}
# One question per kind of modal input, so every field slack.py reads back from `view.state.values` is present.
FORM = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Contact"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 5},
        "day": {"type": "string", "format": "date"},
        "when": {"type": "string", "format": "date-time"},
        "colour": {"type": "string", "enum": ["red", "green"]},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": ["email"],
}
PROPERTY_SETTINGS = settings(
    max_examples=60,
    deadline=None,
    database=None,  # no .hypothesis/ directory written into the checkout
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def linked(reviewer: User) -> User:
    ReviewerReach.objects.create(user=reviewer, slack_user_id="U_ALICE")
    return reviewer


def button(request: ElicitationRequest) -> dict[str, Any]:
    """A Yes press as Slack sends it, with the fields ReviewHub does not read."""
    return {
        "type": "block_actions",
        "api_app_id": "A1",
        "token": "legacy",
        "user": {"id": "U_ALICE", "username": "alice", "team_id": "T1"},
        "team": {"id": "T1", "domain": "example"},
        "channel": {"id": "C1", "name": "reviews"},
        "container": {"type": "message", "channel_id": "C1", "message_ts": "1700000000.000001"},
        "trigger_id": "trigger-1",
        "response_url": "https://hooks.slack.com/actions/T1/1/x",
        "actions": [
            {
                "type": "button",
                "action_id": slack.YES,
                "block_id": "b1",
                "value": str(request.pk),
                "text": {"type": "plain_text", "text": "Yes"},
                "action_ts": "1700000001.000001",
            }
        ],
    }


def submission(request: ElicitationRequest) -> dict[str, Any]:
    """A valid modal answer to FORM, one input of each kind."""

    def state(entry: dict[str, Any]) -> dict[str, Any]:
        return {"answer": entry}

    return {
        "type": "view_submission",
        "team": None,
        "user": {"id": "U_ALICE"},
        "view": {
            "callback_id": slack.MODAL_CALLBACK,
            "private_metadata": str(request.pk),
            "blocks": [{"type": "section", "block_id": "intro"}, {"type": "input", "block_id": "q:email"}],
            "state": {
                "values": {
                    "q:email": state({"type": "email_text_input", "value": "ops@example.com"}),
                    "q:seats": state({"type": "number_input", "value": "4"}),
                    "q:day": state({"type": "datepicker", "selected_date": "2026-03-01"}),
                    "q:when": state({"type": "datetimepicker", "selected_date_time": 1772323200}),
                    "q:colour": state(
                        {
                            "type": "radio_buttons",
                            "selected_option": {"value": "1", "text": {"text": "green"}},
                        }
                    ),
                    "q:tags": state({"type": "checkboxes", "selected_options": [{"value": "0"}]}),
                }
            },
        },
    }


class Poster:
    """Signs each body with its own timestamp (the domain clock moves a second per post), so a body hypothesis
    draws twice is not refused as a replay."""

    def __init__(self, clock: Clock, slack_web_api: FakeSlack) -> None:
        self.clock = clock
        self.slack = slack_web_api  # what reached Slack's Web API: nothing, when a payload is refused

    def body(self, body: bytes) -> Any:
        self.clock.advance(seconds=1)
        headers = signed_headers(body, int(self.clock.now().timestamp()))
        return Client().post(URL, body, content_type="application/x-www-form-urlencoded", headers=headers)

    def payload(self, payload: Any) -> Any:
        return self.body(interaction_body(payload))


@pytest.fixture
def post(clock: Clock, slack_api: FakeSlack) -> Poster:  # noqa: F811
    return Poster(clock, slack_api)


@pytest.fixture
def yes_no_request(linked: User, make_request: Callable[..., ElicitationRequest]) -> ElicitationRequest:
    return make_request(requested_schema=YES_NO)


@pytest.fixture
def form_request(linked: User, make_request: Callable[..., ElicitationRequest]) -> ElicitationRequest:
    return make_request(requested_schema=FORM)


def recorded(request: ElicitationRequest) -> tuple[dict[str, Any], list[str], int]:
    """Everything an interaction could have changed: the row, its audit trail, its approvals."""
    row = ElicitationRequest.objects.filter(pk=request.pk).values().get()
    trail = list(RequestEvent.objects.filter(request=request).order_by("id").values_list("kind", flat=True))
    return row, trail, Approval.objects.filter(request=request).count()


def assert_refused(response: Any, fields: dict[str, str]) -> None:
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert body["detail"]
    assert body["fields"] == fields


# --- the base payloads are answers ------------------------------------------------------------------------------


def test_the_base_payloads_answer_their_requests(
    post: Poster, yes_no_request: ElicitationRequest, form_request: ElicitationRequest
) -> None:
    assert post.payload(button(yes_no_request)).status_code == 200
    assert post.payload(submission(form_request)).status_code == 200
    yes = ElicitationRequest.objects.get(pk=yes_no_request.pk)
    form = ElicitationRequest.objects.get(pk=form_request.pk)
    assert (yes.status, yes.content) == (Status.COMPLETED, {"ok": True})
    assert form.status == Status.COMPLETED
    assert form.content == {
        "email": "ops@example.com",
        "seats": 4,
        "day": "2026-03-01",
        "when": "2026-03-01T00:00:00+00:00",
        "colour": "green",
        "tags": ["a"],
    }


# --- explicit shapes ----------------------------------------------------------------------------------------------


def test_a_user_that_is_a_string_is_a_400_naming_it_and_changes_nothing(
    post: Poster,
    yes_no_request: ElicitationRequest,
) -> None:
    before = recorded(yes_no_request)
    payload = button(yes_no_request)
    payload["user"] = "U_ALICE"

    assert_refused(post.payload(payload), {"payload.user": "must be an object"})

    assert recorded(yes_no_request) == before
    assert post.slack.calls == []


def test_actions_that_are_a_string_are_a_400_naming_them_and_change_nothing(
    post: Poster,
    yes_no_request: ElicitationRequest,
) -> None:
    before = recorded(yes_no_request)
    payload = button(yes_no_request)
    payload["actions"] = json.dumps(payload["actions"])

    assert_refused(post.payload(payload), {"payload.actions": "must be an array"})

    assert recorded(yes_no_request) == before
    assert post.slack.calls == []


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        (lambda p: p.update(actions=["reach_yes"]), {"payload.actions[0]": "must be an object"}),
        (lambda p: p["actions"][0].update(value=7), {"payload.actions[0].value": "must be a string"}),
        (lambda p: p["actions"][0].update(value=None), {"payload.actions[0].value": "must be a string"}),
        (lambda p: p["actions"][0].pop("action_id"), {"payload.actions[0].action_id": "is required"}),
        (lambda p: p["user"].pop("id"), {"payload.user.id": "is required"}),
        (lambda p: p["user"].update(id=["U_ALICE"]), {"payload.user.id": "must be a string"}),
        (lambda p: p.pop("user"), {"payload.user": "is required"}),
        (lambda p: p.update(team="T1"), {"payload.team": "must be null or an object"}),
        (lambda p: p.update(channel="C1"), {"payload.channel": "must be null or an object"}),
        (lambda p: p["container"].update(channel_id=1), {"payload.container.channel_id": "must be a string"}),
        (lambda p: p.pop("trigger_id"), {"payload.trigger_id": "is required"}),
        (lambda p: p.update(type=["block_actions"]), {"payload.type": "must be a string"}),
        (lambda p: p.pop("type"), {"payload.type": "is required"}),
    ],
)
def test_a_button_press_in_the_wrong_shape_is_a_400_naming_the_field(
    post: Poster,
    yes_no_request: ElicitationRequest,
    change: Callable[[dict[str, Any]], Any],
    fields: dict[str, str],
) -> None:
    before = recorded(yes_no_request)
    payload = button(yes_no_request)
    change(payload)

    assert_refused(post.payload(payload), fields)

    assert recorded(yes_no_request) == before
    assert post.slack.calls == []


ANSWER = ("payload", "view", "state", "values")


@pytest.mark.parametrize(
    ("change", "fields"),
    [
        (
            lambda v: v["q:when"]["answer"].update(selected_date_time=10**20),
            {"payload.view.state.values.q:when.answer.selected_date_time": "must be at most 253402300799"},
        ),
        (
            lambda v: v["q:when"]["answer"].update(selected_date_time="tomorrow"),
            {"payload.view.state.values.q:when.answer.selected_date_time": "must be null or an integer"},
        ),
        (
            lambda v: v["q:colour"]["answer"].update(selected_option="1"),
            {"payload.view.state.values.q:colour.answer.selected_option": "must be null or an object"},
        ),
        (
            lambda v: v["q:colour"]["answer"].update(selected_option={"value": 1}),
            {"payload.view.state.values.q:colour.answer.selected_option.value": "must be a string"},
        ),
        (
            lambda v: v["q:tags"]["answer"].update(selected_options=["0"]),
            {"payload.view.state.values.q:tags.answer.selected_options[0]": "must be an object"},
        ),
        (
            lambda v: v["q:email"].update(answer="ops@example.com"),
            {"payload.view.state.values.q:email.answer": "must be an object"},
        ),
        (
            lambda v: v.update({"q:seats": 4}),
            {"payload.view.state.values.q:seats": "must be an object"},
        ),
    ],
)
def test_a_modal_answer_in_the_wrong_shape_is_a_400_naming_the_input(
    post: Poster,
    form_request: ElicitationRequest,
    change: Callable[[dict[str, Any]], Any],
    fields: dict[str, str],
) -> None:
    before = recorded(form_request)
    payload = submission(form_request)
    change(payload["view"]["state"]["values"])

    assert_refused(post.payload(payload), fields)

    assert recorded(form_request) == before
    assert post.slack.calls == []


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        (urlencode({"payload": "{not json"}).encode(), {"payload": "is not valid JSON (JSONDecodeError)."}),
        (urlencode({"payload": ""}).encode(), {"payload": "is not valid JSON (JSONDecodeError)."}),
        (urlencode({"payload": "[1, 2]"}).encode(), {"payload": "must be an object"}),
        (urlencode({"payload": '"block_actions"'}).encode(), {"payload": "must be an object"}),
        (urlencode({"other": "{}"}).encode(), {"payload": "is required"}),
        (b"not a form", {"$": "is not a form"}),
        (
            urlencode({"payload": '{"type": "block_actions", "user": {"id": "\\ud800"}}'}).encode(),
            {"payload.user.id": "contains a lone UTF-16 surrogate (invalid Unicode)."},
        ),
        (
            urlencode({"payload": '{"type": "x", "deep": ' + "[" * 40 + "]" * 40 + "}"}).encode(),
            {"payload.deep" + "[0]" * 31: "nested deeper than 32 levels."},
        ),
    ],
)
def test_a_body_whose_payload_is_not_a_json_object_is_a_400_naming_it(
    post: Poster,
    yes_no_request: ElicitationRequest,
    body: bytes,
    fields: dict[str, str],
) -> None:
    before = recorded(yes_no_request)

    assert_refused(post.body(body), fields)

    assert recorded(yes_no_request) == before
    assert post.slack.calls == []


def test_a_payload_of_a_kind_not_handled_is_accepted_and_ignored(
    post: Poster,
    yes_no_request: ElicitationRequest,
) -> None:
    before = recorded(yes_no_request)
    response = post.payload({"type": "view_closed", "user": {"id": "U_ALICE"}, "view": {"id": "V1"}})
    assert response.status_code == 200
    assert recorded(yes_no_request) == before


def test_an_expired_trigger_is_told_to_the_reviewer_not_a_500(
    post: Poster,
    form_request: ElicitationRequest,
) -> None:
    before = recorded(form_request)
    payload = button(form_request)
    payload["actions"][0]["action_id"] = slack.OPEN_FORM
    post.slack.fail_next = 1  # views.open answers {"ok": false}

    response = post.payload(payload)

    assert response.status_code == 200
    assert [call.method for call in post.slack.calls] == ["views.open", "chat.postEphemeral"]
    assert "could not be opened" in post.slack.calls[1].body["text"]
    assert recorded(form_request) == before


# --- properties ---------------------------------------------------------------------------------------------------

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def json_type(value: Any) -> str:
    """The JSON Schema type of a value (a float with no fraction is an integer there)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def wrong_for(*allowed: str) -> st.SearchStrategy[Any]:
    return JSON_VALUES.filter(lambda value: json_type(value) not in allowed)


# Every field the endpoint reads: where it is in the base payload, the JSON types Slack sends there, and whether
# Slack always sends it (then leaving it out is malformed too).
BUTTON_FIELDS: list[tuple[tuple[str | int, ...], tuple[str, ...], bool]] = [
    (("type",), ("string",), True),
    (("user",), ("object",), True),
    (("user", "id"), ("string",), True),
    (("team",), ("object", "null"), False),
    (("channel",), ("object", "null"), False),
    (("channel", "id"), ("string",), False),
    (("container",), ("object",), False),
    (("container", "channel_id"), ("string",), False),
    (("trigger_id",), ("string",), True),
    (("actions",), ("array",), True),
    (("actions", 0), ("object",), False),
    (("actions", 0, "action_id"), ("string",), True),
    (("actions", 0, "value"), ("string",), False),
]
VALUES = ("view", "state", "values")
SUBMISSION_FIELDS: list[tuple[tuple[str | int, ...], tuple[str, ...], bool]] = [
    (("user",), ("object",), True),
    (("user", "id"), ("string",), True),
    (("team",), ("object", "null"), False),
    (("view",), ("object",), True),
    (("view", "callback_id"), ("string",), False),
    (("view", "private_metadata"), ("string",), False),
    (("view", "blocks"), ("array",), False),
    (("view", "blocks", 1), ("object",), False),
    (("view", "blocks", 1, "block_id"), ("string",), False),
    (("view", "state"), ("object",), False),
    ((*VALUES,), ("object",), False),
    ((*VALUES, "q:email"), ("object",), False),
    ((*VALUES, "q:email", "answer"), ("object",), False),
    ((*VALUES, "q:email", "answer", "type"), ("string",), False),
    ((*VALUES, "q:email", "answer", "value"), ("string", "null"), False),
    ((*VALUES, "q:day", "answer", "selected_date"), ("string", "null"), False),
    ((*VALUES, "q:when", "answer", "selected_date_time"), ("integer", "null"), False),
    ((*VALUES, "q:colour", "answer", "selected_option"), ("object", "null"), False),
    ((*VALUES, "q:colour", "answer", "selected_option", "value"), ("string",), True),
    ((*VALUES, "q:tags", "answer", "selected_options"), ("array",), False),
    ((*VALUES, "q:tags", "answer", "selected_options", 0), ("object",), False),
    ((*VALUES, "q:tags", "answer", "selected_options", 0, "value"), ("string",), True),
]


def field_name(path: tuple[str | int, ...]) -> str:
    return "payload" + "".join(f"[{key}]" if isinstance(key, int) else f".{key}" for key in path)


@st.composite
def malformed(
    draw: st.DrawFn, fields: list[tuple[tuple[str | int, ...], tuple[str, ...], bool]]
) -> tuple[tuple[str | int, ...], Any]:
    """One field of a base payload and what takes its place: a value of a JSON type Slack never sends there, or
    (for a field Slack always sends) nothing."""
    path, allowed, required = draw(st.sampled_from(fields))
    if required and draw(st.booleans()):
        return path, None
    return path, (draw(wrong_for(*allowed)),)


def with_malformed(base: dict[str, Any], path: tuple[str | int, ...], replacement: tuple[Any] | None) -> Any:
    payload = copy.deepcopy(base)
    parent: Any = payload
    for key in path[:-1]:
        parent = parent[key]
    if replacement is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = replacement[0]
    return payload


@PROPERTY_SETTINGS
@given(change=malformed(BUTTON_FIELDS))
def test_a_button_press_with_any_field_in_the_wrong_shape_is_a_400_and_changes_nothing(
    post: Poster,
    yes_no_request: ElicitationRequest,
    change: tuple[tuple[str | int, ...], tuple[Any] | None],
) -> None:
    before = recorded(yes_no_request)
    calls = len(post.slack.calls)
    path, replacement = change

    response = post.payload(with_malformed(button(yes_no_request), path, replacement))

    assert response.status_code == 400, response.content
    assert field_name(path) in response.json()["fields"]
    assert recorded(yes_no_request) == before
    assert len(post.slack.calls) == calls


@PROPERTY_SETTINGS
@given(change=malformed(SUBMISSION_FIELDS))
def test_a_modal_answer_with_any_field_in_the_wrong_shape_is_a_400_and_changes_nothing(
    post: Poster,
    form_request: ElicitationRequest,
    change: tuple[tuple[str | int, ...], tuple[Any] | None],
) -> None:
    before = recorded(form_request)
    calls = len(post.slack.calls)
    path, replacement = change

    response = post.payload(with_malformed(submission(form_request), path, replacement))

    assert response.status_code == 400, response.content
    assert field_name(path) in response.json()["fields"]
    assert recorded(form_request) == before
    assert len(post.slack.calls) == calls


@st.composite
def json_ish_payloads(draw: st.DrawFn, request_id: str) -> Any:
    """Any JSON value; mostly an object with Slack's keys, each holding real-looking values or anything at all."""
    real = {
        "type": st.sampled_from(["block_actions", "view_submission", "view_closed"]),
        "user": st.just({"id": "U_STRANGER"}),
        "trigger_id": st.just("trigger-1"),
        "actions": st.lists(
            st.fixed_dictionaries(
                {
                    "action_id": st.sampled_from([slack.YES, slack.NO, slack.OPEN_FORM]),
                    "value": st.just(request_id),
                }
            ),
            max_size=2,
        ),
        "view": st.fixed_dictionaries(
            {"callback_id": st.just(slack.MODAL_CALLBACK), "private_metadata": st.just(request_id)},
            optional={"state": st.just({"values": {}}), "blocks": st.just([])},
        ),
    }
    keys = [*real, "team", "channel", "container"]
    if draw(st.integers(0, 9)) == 0:
        return draw(JSON_VALUES)
    return {
        key: draw(real[key] | JSON_VALUES if key in real else JSON_VALUES)
        for key in keys
        if draw(st.integers(0, 3)) > 0
    }


@PROPERTY_SETTINGS
@given(data=st.data())
def test_no_signed_payload_is_a_5xx_and_a_refused_one_changes_nothing(
    post: Poster, yes_no_request: ElicitationRequest, data: st.DataObject
) -> None:
    before = recorded(yes_no_request)
    payload = data.draw(json_ish_payloads(str(yes_no_request.pk)))

    response = post.payload(payload)

    assert response.status_code in (200, 400), response.content
    # The acting Slack user is no reviewer (users.info does not know them): even a well-formed press answers nothing.
    assert recorded(yes_no_request) == before
    if response.status_code == 400:
        assert response.json()["fields"]


@PROPERTY_SETTINGS
@given(text=st.text(max_size=40))
def test_no_signed_payload_text_is_a_5xx(post: Poster, yes_no_request: ElicitationRequest, text: str) -> None:
    before = recorded(yes_no_request)
    response = post.body(urlencode({"payload": text}).encode())
    assert response.status_code in (200, 400), response.content
    assert recorded(yes_no_request) == before
