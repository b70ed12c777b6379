"""The reusable form renderer: questions in, Django form out, MCP content back; rules stay in schemas.py."""

import html
import re
from typing import Any

import pytest
from django import forms as django_forms
from django.http import QueryDict

from elicitation.queue import schemas
from elicitation.reviewer.forms import (
    REQUIRED_MESSAGE,
    apply_answer_errors,
    build_answer_form,
    date_time_to_content,
    date_time_to_widget,
    form_content,
    question_dom_ids,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {
            "type": "string",
            "title": "Name",
            "description": "Your <b>full</b> name",
            "minLength": 2,
            "maxLength": 40,
        },
        "bio": {"type": "string", "title": "Bio"},
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "day": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time", "default": "2025-06-18T14:00:00+02:00"},
        "ratio": {"type": "number", "minimum": 0.5, "maximum": 2.5},
        "count": {"type": "integer", "minimum": 1, "maximum": 9, "default": 3},
        "ok": {"type": "boolean", "title": "OK?", "default": True},
        "plan": {
            "type": "string",
            "oneOf": [{"const": "a", "title": "Plan A"}, {"const": "b", "title": "Plan B"}],
        },
        "size": {"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"]},
        "many": {"type": "string", "enum": [f"o{i}" for i in range(8)]},
        "tags": {
            "type": "array",
            "items": {"anyOf": [{"const": "x", "title": "Ex"}, {"const": "y", "title": "Why"}]},
            "minItems": 1,
            "maxItems": 2,
            "default": ["y"],
        },
    },
    "required": ["name", "ok", "tags"],
}
QUESTIONS = schemas.parse_requested_schema(SCHEMA)


def post(**values: Any) -> QueryDict:
    data = QueryDict(mutable=True)
    for key, value in values.items():
        if isinstance(value, list):
            data.setlist(key, value)
        else:
            data[key] = value
    return data


def valid_data(**overrides: Any) -> QueryDict:
    values: dict[str, Any] = {"name": "Ada", "tags": ["x"], "ok": "on"}
    values.update(overrides)
    return post(**{key: value for key, value in values.items() if value is not None})


def test_each_kind_gets_the_right_widget_and_html_limits() -> None:
    form = build_answer_form(QUESTIONS)
    html = {name: str(form[name]) for name in form.fields}
    assert (
        'type="text"' in html["name"] and 'minlength="2"' in html["name"] and 'maxlength="40"' in html["name"]
    )
    assert "<textarea" in html["bio"]  # no maxLength: room for a longer answer
    assert 'type="email"' in html["email"]
    assert 'type="url"' in html["site"]
    assert 'type="date"' in html["day"]
    assert 'type="datetime-local"' in html["at"]
    assert 'type="number"' in html["ratio"] and 'step="any"' in html["ratio"]
    assert 'min="0.5"' in html["ratio"] and 'max="2.5"' in html["ratio"]
    assert 'step="1"' in html["count"] and 'min="1"' in html["count"] and 'max="9"' in html["count"]
    assert 'type="checkbox"' in html["ok"]
    assert html["plan"].count('type="radio"') == 2 and "Plan A" in html["plan"]
    assert "Medium" in html["size"] and 'value="m"' in html["size"]
    assert "<select" in html["many"] and html["many"].count("<option") == 9  # 8 options and "Choose…"
    assert html["tags"].count('type="checkbox"') == 2 and "Why" in html["tags"]


def test_required_is_marked_and_defaults_are_prefilled() -> None:
    form = build_answer_form(QUESTIONS)
    assert form.fields["name"].required and "required" in str(form["name"])
    assert not form.fields["bio"].required
    assert not form.fields["ok"].required  # an unchecked box is the answer "false", not a missing one
    assert form.initial == {"at": "2025-06-18T12:00:00", "count": 3, "ok": True, "tags": ["y"]}
    assert 'value="3"' in str(form["count"])
    assert 'value="2025-06-18T12:00:00"' in str(form["at"])
    assert "checked" in str(form["ok"])


def test_initial_answers_win_over_defaults_and_keep_their_shape() -> None:
    form = build_answer_form(
        QUESTIONS, initial={"count": 7, "tags": ["x", "y"], "at": "2025-01-01T00:00:00Z"}
    )
    assert form.initial["count"] == 7
    assert form.initial["tags"] == ["x", "y"]
    assert form.initial["at"] == "2025-01-01T00:00:00"


def test_descriptions_are_escaped_once_and_shown_with_limits() -> None:
    form = build_answer_form(QUESTIONS)
    assert str(form.fields["name"].help_text) == "Your &lt;b&gt;full&lt;/b&gt; name 2 to 40 characters."
    assert "Between 1 and 9." in str(form.fields["count"].help_text)
    assert "Choose 1 to 2 choices." in str(form.fields["tags"].help_text)
    assert "Time in UTC." in str(form.fields["at"].help_text)


def test_form_content_returns_mcp_values_for_every_kind() -> None:
    form = build_answer_form(
        QUESTIONS,
        data=valid_data(
            name="  Ada ",
            bio="line one\nline two",
            email="ada@example.com",
            site="https://example.com/x",
            day="2025-06-18",
            at="2025-06-18T12:30",
            ratio="1.25",
            count="4",
            plan="b",
            size="m",
            many="o7",
            tags=["x", "y"],
        ),
    )
    assert form.is_valid(), form.errors
    assert form_content(form) == {
        "name": "  Ada ",  # exactly as typed
        "bio": "line one\nline two",
        "email": "ada@example.com",
        "site": "https://example.com/x",
        "day": "2025-06-18",
        "at": "2025-06-18T12:30:00Z",
        "ratio": 1.25,
        "count": 4,
        "ok": True,
        "plan": "b",
        "size": "m",
        "many": "o7",
        "tags": ["x", "y"],
    }


def test_unanswered_optional_questions_are_left_out_and_unchecked_boxes_are_false() -> None:
    form = build_answer_form(QUESTIONS, data=valid_data(ok=None))
    assert form.is_valid(), form.errors
    assert form_content(form) == {"name": "Ada", "tags": ["x"], "ok": False}


def test_a_whole_number_typed_into_a_number_question_stays_an_integer() -> None:
    form = build_answer_form(QUESTIONS, data=valid_data(ratio="2"))
    assert form.is_valid(), form.errors
    assert form_content(form)["ratio"] == 2
    assert isinstance(form_content(form)["ratio"], int)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("name", "A", "Must be at least 2 characters."),
        ("email", "not-an-email", "Must be a valid email address."),
        ("site", "example.com", "Must be a valid absolute URI, such as https://example.com."),
        ("day", "2025-02-30", "Must be a valid date (YYYY-MM-DD)."),
        ("ratio", "3", "Must be at most 2.5."),
        ("ratio", "abc", "Enter a number."),
        ("count", "0", "Must be at least 1."),
        ("count", "1.5", "Enter a whole number."),
        ("plan", "c", "Select a valid choice. c is not one of the available choices."),
        ("tags", ["x", "y", "x"], "Must not contain the same choice twice."),
    ],
)
def test_bad_answers_get_an_error_on_their_own_field(field: str, value: Any, message: str) -> None:
    form = build_answer_form(QUESTIONS, data=valid_data(**{field: value}))
    assert not form.is_valid()
    assert form.errors[field] == [message]
    assert set(form.errors) == {field}


def test_missing_required_answers_are_reported_per_question() -> None:
    form = build_answer_form(QUESTIONS, data=post())
    assert not form.is_valid()
    assert form.errors == {"name": [REQUIRED_MESSAGE], "tags": [REQUIRED_MESSAGE]}


def test_multi_select_item_limits_come_from_the_schema() -> None:
    questions = schemas.parse_requested_schema(
        {
            "type": "object",
            "properties": {
                "t": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "minItems": 2}
            },
        }
    )
    form = build_answer_form(questions, data=post(t=["a"]))
    assert not form.is_valid()
    assert form.errors["t"] == ["Must have at least 2 choices."]


def test_a_bound_form_with_errors_renders_what_was_typed() -> None:
    form = build_answer_form(QUESTIONS, data=valid_data(name="A", count="12"))
    assert not form.is_valid()
    assert 'value="A"' in str(form["name"]) and 'aria-invalid="true"' in str(form["name"])
    assert 'value="12"' in str(form["count"])


def test_api_field_errors_map_back_onto_form_fields() -> None:
    form = build_answer_form(QUESTIONS, data=valid_data())
    assert form.is_valid()
    apply_answer_errors(
        form, {"content.name": "is required", "content": "must be an object", "$.bogus": "nope"}
    )
    assert form.errors["name"] == [REQUIRED_MESSAGE]
    assert form.non_field_errors() == ["Must be an object.", "bogus: Nope."]


def test_it_accepts_question_dicts_and_a_prefix_and_can_be_read_only() -> None:
    form = build_answer_form(schemas.questions_to_json(QUESTIONS), prefix="answer", disabled=True)
    assert 'name="answer-name"' in str(form["name"])
    assert all(field.disabled for field in form.fields.values())
    assert isinstance(form, django_forms.Form)


def test_agent_labels_are_escaped_in_the_rendered_html() -> None:
    questions = schemas.parse_requested_schema(
        {
            "type": "object",
            "properties": {
                "p": {
                    "type": "string",
                    "title": "<script>t()</script>",
                    "oneOf": [{"const": "v", "title": "<img src=x>"}],
                }
            },
        }
    )
    form = build_answer_form(questions)
    rendered = form.as_div()
    assert "<script>" not in rendered and "<img" not in rendered
    assert "&lt;script&gt;t()&lt;/script&gt;" in rendered and "&lt;img src=x&gt;" in rendered


@pytest.mark.parametrize(
    ("typed", "content"),
    [
        ("2025-06-18T12:00", "2025-06-18T12:00:00Z"),
        ("2025-06-18T12:00:30", "2025-06-18T12:00:30Z"),
        ("2025-06-18T12:00:00+02:00", "2025-06-18T12:00:00+02:00"),
        ("nonsense", "nonsense"),
    ],
)
def test_date_time_inputs_are_read_as_utc(typed: str, content: str) -> None:
    assert date_time_to_content(typed) == content


def test_date_time_values_are_shown_in_utc() -> None:
    assert date_time_to_widget("2025-06-18T14:00:00+02:00") == "2025-06-18T12:00:00"
    assert date_time_to_widget("2025-06-18T12:00:00Z") == "2025-06-18T12:00:00"
    assert date_time_to_widget("garbage") == "garbage"


# --- property names in any script: names kept exactly, HTML ids derived -----------------------------------------

ODD_NAMES_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "città": {"type": "string"},
        "a b": {"type": "integer"},
        "a-b": {"type": "boolean"},
        '"><img src=x onerror=alert(1)>': {"type": "string", "enum": ["x", "y"]},
        " padded ": {"type": "array", "items": {"type": "string", "enum": ["p", "q"]}},
        "日本語": {"type": "string"},
    },
    "required": ["città"],
}
ODD_QUESTIONS = schemas.parse_requested_schema(ODD_NAMES_SCHEMA)
SAFE_HTML_ID = re.compile(r"[A-Za-z0-9_-]+")


def test_question_dom_ids_keep_plain_ids_and_derive_unique_safe_ones_for_the_rest() -> None:
    dom_ids = question_dom_ids(["città", "a b", "a-b", "日本語", "question", "a.b", "full_name"])

    assert dom_ids == {
        "città": "citta",
        "a b": "a-b-2",  # "a-b" is a plain id of its own and keeps it
        "a-b": "a-b",
        "日本語": "question-2",
        "question": "question",
        "a.b": "a-b-3",
        "full_name": "full_name",
    }
    assert all(SAFE_HTML_ID.fullmatch(dom_id) for dom_id in dom_ids.values())


def test_odd_property_names_render_with_safe_ids_escaped_labels_and_exact_names() -> None:
    form = build_answer_form(ODD_QUESTIONS, prefix="answer")
    rendered = form.as_div()

    ids = re.findall(r'\sid="([^"]*)"', rendered)
    fors = re.findall(r'\sfor="([^"]*)"', rendered)
    assert ids and all(SAFE_HTML_ID.fullmatch(html_id) for html_id in ids), ids
    assert set(fors) <= set(ids)
    assert len(ids) == len(set(ids))
    assert "<img" not in rendered and "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in rendered
    for question in ODD_QUESTIONS:
        assert f'name="answer-{html.escape(question.id)}"' in rendered
    assert form["città"].auto_id == "id_answer-citta"
    assert form["città"].dom_id == "citta"


def test_answers_to_odd_property_names_come_back_under_the_exact_keys() -> None:
    data = post(
        **{
            "answer-città": "Roma",
            "answer-a b": "7",
            "answer-a-b": "on",
            'answer-"><img src=x onerror=alert(1)>': "y",
            "answer- padded ": ["q"],
            "answer-日本語": "はい",
        }
    )
    form = build_answer_form(ODD_QUESTIONS, data=data, prefix="answer")

    assert form.is_valid(), form.errors
    assert form_content(form) == {
        "città": "Roma",
        "a b": 7,
        "a-b": True,
        '"><img src=x onerror=alert(1)>': "y",
        " padded ": ["q"],
        "日本語": "はい",
    }


@pytest.mark.parametrize("name", ["contentType", "$price", "content", "$"])
def test_an_error_for_a_question_named_like_an_error_prefix_lands_on_that_question(name: str) -> None:
    schema = {"type": "object", "properties": {name: {"type": "integer", "minimum": 5}}}
    form = build_answer_form(schemas.parse_requested_schema(schema), data=post(**{name: "3"}))

    assert not form.is_valid()
    assert form.errors == {name: ["Must be at least 5."]}
