"""Behaviour of elicitation.queue.schemas: which MCP requestedSchemas are accepted and how answers are checked."""

from __future__ import annotations

import json
import math
import string
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from elicitation.queue.schemas import (
    MCP_REVISIONS,
    QUESTION_KINDS,
    TEXT_FORMATS,
    AnswerInvalid,
    Option,
    Question,
    SchemaInvalid,
    SchemaLimits,
    mcp_spec_accepts,
    parse_requested_schema,
    questions_from_json,
    questions_to_json,
    validate_answer,
    validate_content,
)
from elicitation.queue.schemas.mcp_definitions import SPEC_FILE

# The example the MCP SDK docs use for elicitation.
SDK_DOCS_EXAMPLE = {
    "type": "object",
    "properties": {
        "rating": {"type": "number", "title": "Rating (1-5)", "minimum": 1, "maximum": 5},
        "comment": {"type": "string", "title": "Comment"},
    },
    "required": ["rating"],
}


def schema_with(properties: dict[str, Any], **root: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **root}


def parse_one(definition: dict[str, Any], **options: Any) -> Question:
    [question] = parse_requested_schema(schema_with({"field": definition}), **options)
    return question


def schema_errors(schema: Any, **options: Any) -> list[dict[str, str]]:
    with pytest.raises(SchemaInvalid) as caught:
        parse_requested_schema(schema, **options)
    return caught.value.errors


def reasons_at(errors: list[dict[str, str]], path: str) -> list[str]:
    return [error["reason"] for error in errors if error["path"] == path]


def assert_rejected(schema: Any, path: str, reason: str, **options: Any) -> None:
    errors = schema_errors(schema, **options)
    assert any(reason in found for found in reasons_at(errors, path)), errors


def assert_property_rejected(definition: Any, subpath: str, reason: str, **options: Any) -> None:
    assert_rejected(schema_with({"field": definition}), f"$.properties.field{subpath}", reason, **options)


def answer_errors(questions: list[Question], content: Any) -> dict[str, str]:
    with pytest.raises(AnswerInvalid) as caught:
        validate_content(questions, content)
    return caught.value.errors


def single_answer_error(definition: dict[str, Any], value: Any) -> str:
    question = parse_one(definition)
    with pytest.raises(AnswerInvalid) as caught:
        validate_answer(question, value)
    assert list(caught.value.errors) == ["field"]
    return caught.value.errors["field"]


# ---------------------------------------------------------------------------------------------------
# Accepted schemas
# ---------------------------------------------------------------------------------------------------


def test_it_accepts_the_mcp_sdk_docs_example() -> None:
    rating, comment = parse_requested_schema(SDK_DOCS_EXAMPLE)

    assert rating == Question(
        id="rating",
        kind="number",
        title="Rating (1-5)",
        description="",
        required=True,
        format=None,
        min=1,
        max=5,
        default=None,
        options=(),
    )
    assert (comment.id, comment.kind, comment.title, comment.required) == (
        "comment",
        "text",
        "Comment",
        False,
    )


def test_it_accepts_an_empty_form_with_root_metadata() -> None:
    schema = schema_with(
        {},
        required=[],
        title="Nothing",
        description="No fields",
        **{"$schema": "http://json-schema.org/draft-07"},
    )

    assert parse_requested_schema(schema) == []


def test_it_keeps_property_order_and_falls_back_to_the_id_as_title() -> None:
    questions = parse_requested_schema(
        schema_with(
            {
                "zeta": {"type": "boolean"},
                "alpha": {"type": "string", "title": ""},
                "mid": {"type": "integer"},
            }
        )
    )

    assert [question.id for question in questions] == ["zeta", "alpha", "mid"]
    assert [question.title for question in questions] == ["zeta", "alpha", "mid"]
    assert all(question.description == "" for question in questions)


def test_it_accepts_a_text_question_with_every_keyword() -> None:
    question = parse_one(
        {
            "type": "string",
            "title": "Work email",
            "description": "We reply here",
            "minLength": 5,
            "maxLength": 80,
            "format": "email",
            "default": "team@example.com",
        }
    )

    assert question.kind == "text"
    assert (question.title, question.description) == ("Work email", "We reply here")
    assert (question.min, question.max, question.format) == (5, 80, "email")
    assert question.default == "team@example.com"
    assert question.options == ()


@pytest.mark.parametrize("text_format", TEXT_FORMATS)
def test_it_accepts_every_mcp_text_format(text_format: str) -> None:
    assert parse_one({"type": "string", "format": text_format}).format == text_format


def test_it_accepts_a_number_question_with_float_bounds_and_default() -> None:
    question = parse_one({"type": "number", "minimum": -0.5, "maximum": 2.5, "default": 1.25})

    assert (question.kind, question.min, question.max, question.default) == ("number", -0.5, 2.5, 1.25)


def test_it_accepts_an_integer_question_and_stores_integral_floats_as_ints() -> None:
    question = parse_one({"type": "integer", "minimum": 1.0, "maximum": 10, "default": 3.0})

    assert question.kind == "integer"
    assert (question.min, question.max, question.default) == (1, 10, 3)
    assert all(type(value) is int for value in (question.min, question.max, question.default))


def test_it_accepts_a_boolean_question_with_default() -> None:
    question = parse_one({"type": "boolean", "title": "Subscribe?", "default": False})

    assert (question.kind, question.title, question.default) == ("boolean", "Subscribe?", False)


def test_it_accepts_an_untitled_single_select_using_values_as_labels() -> None:
    question = parse_one({"type": "string", "enum": ["red", "green"], "default": "green"})

    assert question.kind == "single-select"
    assert question.options == (Option("red", "red"), Option("green", "green"))
    assert question.default == "green"


def test_it_accepts_a_titled_single_select() -> None:
    question = parse_one(
        {
            "type": "string",
            "title": "Colour",
            "oneOf": [{"const": "#f00", "title": "Red"}, {"const": "#0f0", "title": "Green"}],
            "default": "#0f0",
        }
    )

    assert question.kind == "single-select"
    assert question.options == (Option("#f00", "Red"), Option("#0f0", "Green"))
    assert question.default == "#0f0"


def test_it_accepts_a_legacy_titled_enum_taking_labels_from_enum_names() -> None:
    question = parse_one(
        {"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"], "default": "m"}
    )

    assert question.kind == "single-select"
    assert question.options == (Option("s", "Small"), Option("m", "Medium"))


def test_it_accepts_an_untitled_multi_select() -> None:
    question = parse_one(
        {
            "type": "array",
            "title": "Toppings",
            "items": {"type": "string", "enum": ["cheese", "ham", "olives"]},
            "minItems": 1,
            "maxItems": 2,
            "default": ["cheese"],
        }
    )

    assert question.kind == "multi-select"
    assert [option.value for option in question.options] == ["cheese", "ham", "olives"]
    assert (question.min, question.max, question.default) == (1, 2, ("cheese",))


@pytest.mark.parametrize("items_type", [{}, {"type": "string"}])
def test_it_accepts_a_titled_multi_select(items_type: dict[str, str]) -> None:
    question = parse_one(
        {
            "type": "array",
            "items": {
                "anyOf": [{"const": "a", "title": "Apple"}, {"const": "b", "title": "Banana"}],
                **items_type,
            },
        }
    )

    assert question.kind == "multi-select"
    assert question.options == (Option("a", "Apple"), Option("b", "Banana"))


def test_it_marks_required_properties() -> None:
    questions = parse_requested_schema(
        schema_with({"a": {"type": "boolean"}, "b": {"type": "boolean"}}, required=["b"])
    )

    assert [question.required for question in questions] == [False, True]


def test_it_accepts_sensitive_text_only_when_the_caller_allows_it() -> None:
    definition = {"type": "string", "sensitive": True}

    assert parse_one(definition, allow_sensitive=True).sensitive is True
    assert parse_one({"type": "string"}, allow_sensitive=True).sensitive is False
    assert_property_rejected(definition, ".sensitive", "is not allowed on a text question")


def test_it_accepts_strings_up_to_the_length_limit() -> None:
    limits = SchemaLimits(max_string_length=5)

    assert parse_one({"type": "string", "title": "12345"}, limits=limits).title == "12345"


# ---------------------------------------------------------------------------------------------------
# Rejected schemas: the root
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("schema", [None, [], "object", 1, True])
def test_it_rejects_a_non_object_root(schema: Any) -> None:
    assert schema_errors(schema) == [{"path": "$", "reason": "must be an object"}]


def test_it_rejects_a_root_without_type_or_properties() -> None:
    errors = schema_errors({})

    assert errors == [
        {"path": "$.properties", "reason": "is required"},
        {"path": "$.type", "reason": "is required"},
    ]


@pytest.mark.parametrize("root_type", ["array", "string", None, ["object"]])
def test_it_rejects_a_root_type_other_than_object(root_type: Any) -> None:
    assert_rejected({"type": root_type, "properties": {}}, "$.type", 'must be "object"')


@pytest.mark.parametrize("properties", [[], "x", None, 3])
def test_it_rejects_properties_that_are_not_an_object(properties: Any) -> None:
    assert_rejected({"type": "object", "properties": properties}, "$.properties", "must be an object")


@pytest.mark.parametrize(
    ("key", "reason"),
    [
        ("patternProperties", "is not allowed on requestedSchema"),
        ("$ref", "references are not supported"),
        ("$defs", "definitions are not supported"),
        ("definitions", "definitions are not supported"),
    ],
)
def test_it_rejects_unknown_root_keys_with_path(key: str, reason: str) -> None:
    assert_rejected(schema_with({}, **{key: {}}), f"$.{key}", reason)


@pytest.mark.parametrize("key", ["$schema", "title", "description"])
def test_it_rejects_non_string_root_metadata(key: str) -> None:
    assert_rejected(schema_with({}, **{key: 1}), f"$.{key}", "must be a string")


def test_it_rejects_required_that_is_not_an_array() -> None:
    assert_rejected(schema_with({}, required="a"), "$.required", "must be an array of property names")


def test_it_rejects_required_naming_a_missing_property() -> None:
    schema = schema_with({"a": {"type": "boolean"}}, required=["a", "ghost"])

    assert schema_errors(schema) == [{"path": "$.required[1]", "reason": "is not a property of this schema"}]


def test_it_rejects_required_entries_that_are_not_unique_strings() -> None:
    errors = schema_errors(schema_with({"a": {"type": "boolean"}}, required=["a", "a", 7]))

    assert errors == [
        {"path": "$.required[1]", "reason": "is listed more than once"},
        {"path": "$.required[2]", "reason": "must be a string"},
    ]


def test_it_rejects_too_many_properties() -> None:
    properties = {f"p{index}": {"type": "boolean"} for index in range(4)}

    errors = schema_errors(schema_with(properties), limits=SchemaLimits(max_properties=3))

    assert errors == [{"path": "$.properties", "reason": "must have at most 3 properties"}]


@pytest.mark.parametrize(
    ("name", "path"),
    [
        ("", '$.properties[""]'),
        ("x" * 65, "$.properties." + "x" * 65),
        ("a\n", '$.properties["a\\n"]'),
        ("a\r", '$.properties["a\\r"]'),
        ("nul\x00", '$.properties["nul\\u0000"]'),
        ("del\x7f", '$.properties["del\\u007f"]'),
        ("c1\x85", '$.properties["c1\\u0085"]'),
        ("half\ud800", '$.properties["half\\ud800"]'),
    ],
)
def test_it_rejects_empty_over_long_and_control_character_property_names(name: str, path: str) -> None:
    assert_rejected(
        schema_with({name: {"type": "boolean"}}),
        path,
        "must be 1-64 characters, none of them a control character",
    )


@pytest.mark.parametrize(
    "name",
    [
        "citt\u00e0",
        "a b",
        " leading and trailing ",
        "a/b",
        "<script>alert(1)</script>",
        'quote " and \\ backslash',
        "\u65e5\u672c\u8a9e",
        "emoji \U0001f600",
        "dots.and-dashes_",
        "$",
        "\u202eoverride",
        "x" * 64,
    ],
)
def test_it_accepts_every_non_empty_property_name_the_spec_allows(name: str) -> None:
    schema = schema_with({name: {"type": "string"}}, required=[name])

    [question] = parse_requested_schema(schema)

    assert mcp_spec_accepts(schema)
    assert (question.id, question.title, question.required) == (name, name, True)
    assert validate_content([question], {name: "x"}) == {name: "x"}


def test_errors_under_non_ascii_names_keep_the_name_readable_in_the_path() -> None:
    errors = schema_errors(schema_with({"citt\u00e0": {"type": "integer", "minimum": "low"}}))

    assert errors == [{"path": '$.properties["citt\u00e0"].minimum', "reason": "must be a number"}]


def test_it_accepts_property_names_at_the_64_character_limit() -> None:
    name = "A-z_0.9" + "x" * 57

    assert parse_requested_schema(schema_with({name: {"type": "boolean"}}))[0].id == name


# ---------------------------------------------------------------------------------------------------
# Rejected schemas: properties
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("definition", [None, "string", ["string"], True])
def test_it_rejects_a_property_that_is_not_an_object(definition: Any) -> None:
    assert_property_rejected(definition, "", "must be an object")


def test_it_rejects_a_property_without_type() -> None:
    assert_property_rejected({"title": "No type"}, ".type", "is required")


@pytest.mark.parametrize("property_type", ["null", "date", ["string", "null"], 3, None])
def test_it_rejects_unknown_property_types(property_type: Any) -> None:
    assert_property_rejected(
        {"type": property_type}, ".type", "must be one of: string, number, integer, boolean, array"
    )


def test_it_rejects_nested_objects_with_path() -> None:
    definition = {"type": "object", "properties": {"street": {"type": "string"}}}

    assert schema_errors(schema_with({"address": definition})) == [
        {"path": "$.properties.address.type", "reason": "nested objects are not supported"}
    ]


def test_it_rejects_arrays_of_objects_with_path() -> None:
    definition = {"type": "array", "items": {"type": "object", "properties": {}}}

    assert_property_rejected(definition, ".items.type", "nested objects are not supported")


@pytest.mark.parametrize("items", [{"type": "string"}, {"type": "number"}, {}])
def test_it_rejects_arrays_of_non_enums(items: dict[str, Any]) -> None:
    assert_property_rejected({"type": "array", "items": items}, ".items", "only supported as multi-selects")


def test_it_rejects_an_array_without_items() -> None:
    assert_property_rejected({"type": "array"}, ".items", "is required")


def test_it_rejects_tuple_style_items() -> None:
    assert_property_rejected(
        {"type": "array", "items": [{"type": "string", "enum": ["a"]}]}, ".items", "must be an object"
    )


def test_it_rejects_multi_select_enum_items_that_are_not_strings() -> None:
    definition = {"type": "array", "items": {"type": "integer", "enum": ["1"]}}

    assert_property_rejected(definition, ".items.type", 'must be "string"')


@pytest.mark.parametrize(
    ("definition", "subpath"),
    [
        ({"$ref": "#/$defs/Colour"}, ".$ref"),
        ({"type": "string", "$ref": "#/$defs/Colour"}, ".$ref"),
        ({"type": "array", "items": {"$ref": "#/$defs/Colour"}}, ".items.$ref"),
        ({"type": "string", "oneOf": [{"$ref": "#/$defs/Colour"}]}, ".oneOf[0].$ref"),
        ({"type": "array", "items": {"anyOf": [{"$ref": "#/$defs/C"}]}}, ".items.anyOf[0].$ref"),
    ],
)
def test_it_rejects_ref_anywhere_with_path(definition: dict[str, Any], subpath: str) -> None:
    assert_property_rejected(definition, subpath, "references are not supported")


@pytest.mark.parametrize(
    ("definition", "keyword", "where"),
    [
        ({"type": "string", "pattern": "^a"}, "pattern", "a text question"),
        ({"type": "string", "enum": ["a"], "format": "email"}, "format", "a single-select question"),
        (
            {"type": "string", "oneOf": [{"const": "a", "title": "A"}], "enumNames": ["A"]},
            "enumNames",
            "a single-select question",
        ),
        ({"type": "number", "exclusiveMinimum": 0}, "exclusiveMinimum", "a number question"),
        ({"type": "number", "exclusiveMaximum": 9}, "exclusiveMaximum", "a number question"),
        ({"type": "integer", "multipleOf": 2}, "multipleOf", "an integer question"),
        ({"type": "boolean", "minLength": 1}, "minLength", "a boolean question"),
        ({"type": "boolean", "const": True}, "const", "a boolean question"),
        ({"type": "string", "nullable": True}, "nullable", "a text question"),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}, "uniqueItems": True},
            "uniqueItems",
            "a multi-select question",
        ),
        ({"type": "string", "examples": ["a"]}, "examples", "a text question"),
    ],
)
def test_it_rejects_keywords_outside_the_mcp_subset(
    definition: dict[str, Any], keyword: str, where: str
) -> None:
    assert_property_rejected(definition, f".{keyword}", f"is not allowed on {where}")


def test_it_rejects_unknown_keys_inside_items_and_options() -> None:
    errors = schema_errors(
        schema_with(
            {
                "tags": {"type": "array", "items": {"type": "string", "enum": ["a"], "enumNames": ["A"]}},
                "pick": {"type": "string", "oneOf": [{"const": "a", "title": "A", "description": "x"}]},
            }
        )
    )

    assert errors == [
        {"path": "$.properties.pick.oneOf[0].description", "reason": "is not allowed on an option"},
        {"path": "$.properties.tags.items.enumNames", "reason": "is not allowed on multi-select items"},
    ]


def test_it_rejects_sensitive_on_non_text_questions_even_when_allowed() -> None:
    definition = {"type": "number", "sensitive": True}

    assert_property_rejected(
        definition, ".sensitive", "is only allowed on text questions", allow_sensitive=True
    )


def test_it_rejects_a_non_boolean_sensitive_flag() -> None:
    definition = {"type": "string", "sensitive": "yes"}

    assert_property_rejected(definition, ".sensitive", "must be true or false", allow_sensitive=True)


@pytest.mark.parametrize(
    ("definition", "subpath", "reason"),
    [
        ({"type": "string", "title": 3}, ".title", "must be a string"),
        ({"type": "string", "description": ["x"]}, ".description", "must be a string"),
        ({"type": "boolean", "title": None}, ".title", "must be a string"),
        ({"type": "string", "minLength": "3"}, ".minLength", "must be a non-negative integer"),
        ({"type": "string", "minLength": -1}, ".minLength", "must be a non-negative integer"),
        ({"type": "string", "maxLength": 2.5}, ".maxLength", "must be a non-negative integer"),
        ({"type": "string", "maxLength": True}, ".maxLength", "must be a non-negative integer"),
        # The list is the MCP definition's own, in its order.
        ({"type": "string", "format": "ipv4"}, ".format", "must be one of: date, date-time, email, uri"),
        ({"type": "string", "format": 1}, ".format", "must be one of: date, date-time, email, uri"),
        ({"type": "number", "minimum": "1"}, ".minimum", "must be a number"),
        ({"type": "number", "minimum": True}, ".minimum", "must be a number"),
        ({"type": "number", "maximum": math.nan}, ".maximum", "must be a number"),
        ({"type": "number", "maximum": math.inf}, ".maximum", "must be a number"),
        ({"type": "integer", "minimum": 1.5}, ".minimum", "must be an integer"),
        ({"type": "integer", "maximum": False}, ".maximum", "must be a number"),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}, "minItems": -1},
            ".minItems",
            "non-negative",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}, "maxItems": "2"},
            ".maxItems",
            "non-negative",
        ),
    ],
)
def test_it_rejects_wrongly_typed_keywords_with_path(
    definition: dict[str, Any], subpath: str, reason: str
) -> None:
    assert_property_rejected(definition, subpath, reason)


@pytest.mark.parametrize(
    ("definition", "subpath", "reason"),
    [
        (
            {"type": "string", "minLength": 5, "maxLength": 4},
            ".minLength",
            "must not be greater than maxLength",
        ),
        ({"type": "number", "minimum": 5, "maximum": 4.5}, ".minimum", "must not be greater than maximum"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, ".minimum", "must not be greater than maximum"),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 2, "maxItems": 1},
            ".minItems",
            "must not be greater than maxItems",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 3},
            ".minItems",
            "must not be greater than the number of options (2)",
        ),
    ],
)
def test_it_rejects_bounds_that_cannot_be_met(definition: dict[str, Any], subpath: str, reason: str) -> None:
    assert_property_rejected(definition, subpath, reason)


def test_it_rejects_max_length_beyond_the_answer_limit() -> None:
    limits = SchemaLimits(max_text_answer_length=100)

    assert_property_rejected(
        {"type": "string", "maxLength": 101}, ".maxLength", "must be at most 100", limits=limits
    )
    assert_property_rejected(
        {"type": "string", "minLength": 101}, ".minLength", "must be at most 100", limits=limits
    )


@pytest.mark.parametrize(
    ("definition", "subpath"),
    [
        ({"type": "string", "enum": []}, ".enum"),
        ({"type": "string", "enum": "red"}, ".enum"),
        ({"type": "string", "oneOf": []}, ".oneOf"),
        ({"type": "array", "items": {"type": "string", "enum": []}}, ".items.enum"),
        ({"type": "array", "items": {"anyOf": []}}, ".items.anyOf"),
    ],
)
def test_it_rejects_empty_option_lists(definition: dict[str, Any], subpath: str) -> None:
    assert_property_rejected(definition, subpath, "must be a non-empty array")


@pytest.mark.parametrize(
    ("definition", "subpath"),
    [
        ({"type": "string", "enum": ["red", "green", "red"]}, ".enum[2]"),
        (
            {"type": "string", "oneOf": [{"const": "a", "title": "A"}, {"const": "a", "title": "B"}]},
            ".oneOf[1].const",
        ),
        ({"type": "array", "items": {"type": "string", "enum": ["x", "x"]}}, ".items.enum[1]"),
        (
            {
                "type": "array",
                "items": {"anyOf": [{"const": "a", "title": "A"}, {"const": "a", "title": "A"}]},
            },
            ".items.anyOf[1].const",
        ),
    ],
)
def test_it_rejects_duplicate_options_with_path(definition: dict[str, Any], subpath: str) -> None:
    assert_property_rejected(definition, subpath, "duplicates an earlier option")


def test_it_rejects_option_lists_over_the_limit() -> None:
    definition = {"type": "string", "enum": ["a", "b", "c"]}

    assert_property_rejected(
        definition, ".enum", "must have at most 2 options", limits=SchemaLimits(max_options=2)
    )


def test_it_rejects_non_string_enum_values() -> None:
    assert_property_rejected({"type": "string", "enum": ["a", 2]}, ".enum[1]", "must be a string")


@pytest.mark.parametrize(
    ("option", "subpath", "reason"),
    [
        ({"const": "a"}, ".oneOf[0].title", "is required"),
        ({"title": "A"}, ".oneOf[0].const", "is required"),
        ({"const": 1, "title": "One"}, ".oneOf[0].const", "must be a string"),
        ({"const": "a", "title": None}, ".oneOf[0].title", "must be a string"),
        ("a", ".oneOf[0]", "must be an object with const and title"),
    ],
)
def test_it_rejects_malformed_titled_options(option: Any, subpath: str, reason: str) -> None:
    assert_property_rejected({"type": "string", "oneOf": [option]}, subpath, reason)


def test_it_rejects_enum_names_that_do_not_match_the_enum() -> None:
    definition = {"type": "string", "enum": ["a", "b"], "enumNames": ["A"]}

    assert_property_rejected(definition, ".enumNames", "must have one name per enum value (2)")
    assert_property_rejected(
        {"type": "string", "enum": ["a"], "enumNames": [1]}, ".enumNames[0]", "must be a string"
    )
    assert_property_rejected(
        {"type": "string", "enum": ["a"], "enumNames": "A"}, ".enumNames", "must be an array"
    )


def test_it_rejects_enum_and_one_of_together() -> None:
    definition = {"type": "string", "enum": ["a"], "oneOf": [{"const": "a", "title": "A"}]}

    assert_property_rejected(definition, "", "either enum or oneOf, not both")


@pytest.mark.parametrize(
    ("definition", "reason"),
    [
        ({"type": "string", "default": 5}, "must be a string"),
        ({"type": "string", "minLength": 3, "default": "ab"}, "must be at least 3 characters"),
        ({"type": "string", "maxLength": 1, "default": "ab"}, "must be at most 1 character"),
        ({"type": "string", "format": "email", "default": "nobody"}, "must be a valid email address"),
        ({"type": "string", "format": "date", "default": "2023-02-29"}, "must be a valid date"),
        ({"type": "number", "maximum": 5, "default": 6}, "must be at most 5"),
        ({"type": "number", "minimum": 0.5, "default": 0}, "must be at least 0.5"),
        ({"type": "number", "default": True}, "must be a number"),
        ({"type": "number", "default": "1"}, "must be a number"),
        ({"type": "integer", "default": 2.5}, "must be an integer"),
        ({"type": "boolean", "default": "true"}, "must be true or false"),
        ({"type": "string", "enum": ["red", "green"], "default": "blue"}, "must be one of: red, green"),
        ({"type": "string", "oneOf": [{"const": "a", "title": "A"}], "default": "A"}, "must be one of: a"),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": "a"},
            "must be a list of choices",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": ["b"]},
            "must only contain",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": ["a", "a"]},
            "same choice twice",
        ),
        (
            {
                "type": "array",
                "items": {"type": "string", "enum": ["a", "b"]},
                "minItems": 2,
                "default": ["a"],
            },
            "must have at least 2 choices",
        ),
    ],
)
def test_it_rejects_defaults_the_question_would_not_accept(definition: dict[str, Any], reason: str) -> None:
    assert_property_rejected(definition, ".default", reason)


@pytest.mark.parametrize(
    ("definition", "subpath"),
    [
        ({"type": "string", "title": "x" * 11}, ".title"),
        ({"type": "string", "description": "x" * 11}, ".description"),
        ({"type": "string", "default": "x" * 11}, ".default"),
        ({"type": "string", "enum": ["x" * 11]}, ".enum[0]"),
        ({"type": "string", "enum": ["a"], "enumNames": ["x" * 11]}, ".enumNames[0]"),
        ({"type": "string", "oneOf": [{"const": "a", "title": "x" * 11}]}, ".oneOf[0].title"),
        ({"type": "string", "oneOf": [{"const": "x" * 11, "title": "A"}]}, ".oneOf[0].const"),
    ],
)
def test_it_rejects_over_long_strings(definition: dict[str, Any], subpath: str) -> None:
    limits = SchemaLimits(max_string_length=10)

    assert_property_rejected(definition, subpath, "must be at most 10 characters", limits=limits)


def test_it_rejects_an_over_long_root_title() -> None:
    assert_rejected(
        schema_with({}, title="x" * 11),
        "$.title",
        "must be at most 10",
        limits=SchemaLimits(max_string_length=10),
    )


def test_it_collects_every_error_sorted_by_path() -> None:
    schema = {
        "type": "object",
        "additionalProperties": True,
        "properties": {
            "b": {"type": "integer", "minimum": "low"},
            "a": {"type": "object"},
            "c": {"type": "string", "enum": ["x", "x"]},
        },
        "required": ["nope"],
    }

    errors = schema_errors(schema)

    assert errors == [
        {"path": "$.additionalProperties", "reason": "may only be false"},
        {"path": "$.properties.a.type", "reason": "nested objects are not supported"},
        {"path": "$.properties.b.minimum", "reason": "must be a number"},
        {"path": "$.properties.c.enum[1]", "reason": "duplicates an earlier option"},
        {"path": "$.required[0]", "reason": "is not a property of this schema"},
    ]
    assert [error["path"] for error in errors] == sorted(error["path"] for error in errors)


def test_schema_invalid_summarises_its_errors_in_the_message() -> None:
    errors = schema_errors(schema_with({"a": {"type": "object"}}))

    assert (
        str(SchemaInvalid(errors))
        == "invalid requestedSchema: $.properties.a.type: nested objects are not supported"
    )


# ---------------------------------------------------------------------------------------------------
# Answers
# ---------------------------------------------------------------------------------------------------


def test_it_accepts_answers_to_the_sdk_docs_example() -> None:
    questions = parse_requested_schema(SDK_DOCS_EXAMPLE)

    assert validate_content(questions, {"rating": 4, "comment": "Great"}) == {"rating": 4, "comment": "Great"}
    assert validate_content(questions, {"rating": 4.5}) == {"rating": 4.5}


def test_it_reports_every_answer_problem_at_once() -> None:
    questions = parse_requested_schema(SDK_DOCS_EXAMPLE)

    errors = answer_errors(questions, {"comment": 5, "mood": "happy"})

    assert errors == {
        "$.mood": "is not a question in this form",
        "rating": "is required",
        "comment": "must be a string",
    }


@pytest.mark.parametrize("content", [None, [], "rating=3", 3])
def test_it_rejects_content_that_is_not_an_object(content: Any) -> None:
    assert answer_errors(parse_requested_schema(SDK_DOCS_EXAMPLE), content) == {"$": "must be an object"}


def test_it_leaves_unanswered_optional_questions_out_without_inventing_defaults() -> None:
    questions = parse_requested_schema(schema_with({"subscribe": {"type": "boolean", "default": True}}))

    assert validate_content(questions, {}) == {}


def test_it_returns_only_known_keys_with_values_untouched() -> None:
    questions = parse_requested_schema(
        schema_with({"tags": {"type": "array", "items": {"type": "string", "enum": ["a"]}}})
    )
    tags = ["a"]

    cleaned = validate_content(questions, {"tags": tags})

    assert cleaned == {"tags": ["a"]}
    assert cleaned["tags"] is tags


def test_it_treats_null_as_a_wrong_value_not_as_missing() -> None:
    questions = parse_requested_schema(schema_with({"note": {"type": "string"}}))

    assert answer_errors(questions, {"note": None}) == {"note": "must be a string"}


def test_validate_answer_returns_the_value_or_names_the_question() -> None:
    question = parse_one({"type": "integer", "minimum": 1})

    assert validate_answer(question, 7) == 7
    with pytest.raises(AnswerInvalid) as caught:
        validate_answer(question, 0)
    assert caught.value.errors == {"field": "must be at least 1"}


@pytest.mark.parametrize(
    ("definition", "value"),
    [
        ({"type": "string"}, ""),
        ({"type": "string", "minLength": 2, "maxLength": 3}, "abc"),
        ({"type": "string", "maxLength": 3}, "\U0001f600\U0001f600\U0001f600"),
        ({"type": "number"}, 0),
        ({"type": "number", "minimum": 1, "maximum": 5}, 5.0),
        ({"type": "number"}, -1e300),
        ({"type": "integer", "minimum": -3, "maximum": 3}, -3),
        ({"type": "integer"}, 10**30),
        ({"type": "boolean"}, False),
        ({"type": "string", "enum": ["red", "green"]}, "green"),
        ({"type": "string", "oneOf": [{"const": "a", "title": "A"}]}, "a"),
        ({"type": "string", "enum": ["s"], "enumNames": ["Small"]}, "s"),
        ({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}, []),
        (
            {
                "type": "array",
                "items": {"anyOf": [{"const": "a", "title": "A"}, {"const": "b", "title": "B"}]},
            },
            ["b", "a"],
        ),
    ],
)
def test_it_accepts_valid_answers_for_every_kind(definition: dict[str, Any], value: Any) -> None:
    assert validate_answer(parse_one(definition), value) == value


@pytest.mark.parametrize(
    ("definition", "value", "reason"),
    [
        ({"type": "string"}, 5, "must be a string"),
        ({"type": "string"}, ["a"], "must be a string"),
        ({"type": "string", "minLength": 3}, "ab", "must be at least 3 characters"),
        ({"type": "string", "minLength": 1}, "", "must be at least 1 character"),
        ({"type": "string", "maxLength": 2}, "abc", "must be at most 2 characters"),
        ({"type": "number"}, "4", "must be a number"),
        ({"type": "number"}, True, "must be a number"),
        ({"type": "number"}, None, "must be a number"),
        ({"type": "number"}, math.nan, "must be a finite number"),
        ({"type": "number"}, -math.inf, "must be a finite number"),
        ({"type": "number", "minimum": 1}, 0.99, "must be at least 1"),
        ({"type": "number", "maximum": 5}, 5.01, "must be at most 5"),
        ({"type": "integer"}, 3.0, "must be an integer"),
        ({"type": "integer"}, 2.5, "must be an integer"),
        ({"type": "integer"}, False, "must be an integer"),
        ({"type": "integer"}, "3", "must be an integer"),
        ({"type": "integer", "minimum": 1}, 0, "must be at least 1"),
        ({"type": "integer", "maximum": 5}, 6, "must be at most 5"),
        ({"type": "boolean"}, "true", "must be true or false"),
        ({"type": "boolean"}, 1, "must be true or false"),
        ({"type": "string", "enum": ["red", "green"]}, "blue", "must be one of: red, green"),
        ({"type": "string", "enum": ["red", "green"]}, ["red"], "must be one of: red, green"),
        ({"type": "string", "oneOf": [{"const": "a", "title": "Apple"}]}, "Apple", "must be one of: a"),
        ({"type": "array", "items": {"type": "string", "enum": ["a"]}}, "a", "must be a list of choices"),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}},
            ["z"],
            "must only contain choices that are one of: a",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}},
            [1],
            "must only contain choices that are one of: a",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a"]}},
            ["a", "a"],
            "must not contain the same choice twice",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1},
            [],
            "must have at least 1 choice",
        ),
        (
            {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "maxItems": 1},
            ["a", "b"],
            "must have at most 1 choice",
        ),
    ],
)
def test_it_rejects_invalid_answers_for_every_kind(
    definition: dict[str, Any], value: Any, reason: str
) -> None:
    assert single_answer_error(definition, value) == reason


def test_it_caps_text_answers_at_the_configured_limit_even_without_max_length() -> None:
    question = parse_one({"type": "string"})

    with pytest.raises(AnswerInvalid) as caught:
        validate_answer(question, "x" * 11, limits=SchemaLimits(max_text_answer_length=10))
    assert caught.value.errors == {"field": "must be at most 10 characters"}


def test_it_shortens_long_option_lists_in_reasons() -> None:
    values = [f"option-{index}" for index in range(12)]

    reason = single_answer_error({"type": "string", "enum": values}, "nope")

    assert reason == "must be one of the 12 listed options"


@pytest.mark.parametrize(
    ("text_format", "value"),
    [
        ("email", "reviewer@example.com"),
        ("email", "first.last+tag@mail.example.co.uk"),
        ("uri", "https://example.com/path?q=1#frag"),
        ("uri", "mailto:someone@example.com"),
        ("uri", "urn:isbn:0451450523"),
        ("date", "2024-02-29"),
        ("date-time", "2025-06-18T12:00:00Z"),
        ("date-time", "2025-06-18T12:00:00.250+05:30"),
    ],
)
def test_it_accepts_well_formed_text_formats(text_format: str, value: str) -> None:
    assert validate_answer(parse_one({"type": "string", "format": text_format}), value) == value


@pytest.mark.parametrize(
    ("text_format", "value", "reason"),
    [
        ("email", "plainaddress", "must be a valid email address"),
        ("email", "@example.com", "must be a valid email address"),
        ("email", "someone@", "must be a valid email address"),
        ("email", "someone@localhost", "must be a valid email address"),
        ("email", "a@b@example.com", "must be a valid email address"),
        ("email", "some one@example.com", "must be a valid email address"),
        ("email", "someone@example..com", "must be a valid email address"),
        ("email", "someone@example.com\n", "must be a valid email address"),
        ("uri", "example.com/path", "must be a valid absolute URI"),
        ("uri", "/relative/path", "must be a valid absolute URI"),
        ("uri", "https://exa mple.com", "must be a valid absolute URI"),
        ("uri", "https://example.com\n", "must be a valid absolute URI"),
        ("date", "2023-02-29", "must be a valid date (YYYY-MM-DD)"),
        ("date", "2024-2-1", "must be a valid date (YYYY-MM-DD)"),
        ("date", "2024-02-29T00:00:00Z", "must be a valid date (YYYY-MM-DD)"),
        ("date", "20240229", "must be a valid date (YYYY-MM-DD)"),
        ("date-time", "2025-06-18T12:00:00", "must be a valid date-time"),
        ("date-time", "2025-06-18 12:00:00Z", "must be a valid date-time"),
        ("date-time", "2025-02-30T12:00:00Z", "must be a valid date-time"),
        ("date-time", "2025-06-18T12:00:00Z\n", "must be a valid date-time"),
        ("date-time", "2025-06-18", "must be a valid date-time"),
    ],
)
def test_it_rejects_malformed_text_formats(text_format: str, value: str, reason: str) -> None:
    assert single_answer_error({"type": "string", "format": text_format}, value).startswith(reason)


# ---------------------------------------------------------------------------------------------------
# Serialising questions
# ---------------------------------------------------------------------------------------------------


def test_question_round_trips_through_json() -> None:
    question = parse_one(
        {
            "type": "array",
            "title": "Tags",
            "description": "Pick some",
            "items": {"anyOf": [{"const": "a", "title": "Apple"}, {"const": "b", "title": "Banana"}]},
            "minItems": 1,
            "maxItems": 2,
            "default": ["a"],
        }
    )

    data = json.loads(json.dumps(question.to_dict()))

    assert data == {
        "id": "field",
        "kind": "multi-select",
        "title": "Tags",
        "description": "Pick some",
        "required": False,
        "format": None,
        "min": 1,
        "max": 2,
        "default": ["a"],
        "options": [{"value": "a", "label": "Apple"}, {"value": "b", "label": "Banana"}],
        "sensitive": False,
    }
    assert Question.from_dict(data) == question


def test_questions_round_trip_as_a_list() -> None:
    questions = parse_requested_schema(SDK_DOCS_EXAMPLE)

    assert questions_from_json(json.loads(json.dumps(questions_to_json(questions)))) == questions


def test_sensitive_flag_survives_the_round_trip() -> None:
    question = parse_one({"type": "string", "sensitive": True}, allow_sensitive=True)

    assert Question.from_dict(question.to_dict()).sensitive is True


def test_question_refuses_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown question kind"):
        Question.from_dict({"id": "x", "kind": "file-upload"})


def test_questions_are_hashable_even_with_a_multi_select_default() -> None:
    question = parse_one({"type": "array", "items": {"type": "string", "enum": ["a"]}, "default": ["a"]})

    assert hash(question) == hash(Question.from_dict(question.to_dict()))


# ---------------------------------------------------------------------------------------------------
# Property tests: schemas generated from the MCP definitions
# ---------------------------------------------------------------------------------------------------

FORMAT_EXAMPLES = {
    "email": ["a@example.com", "reviewer.one+tag@sub.example.org", "x_y@host.io"],
    "uri": [
        "https://example.com",
        "https://example.com/p?q=1#f",
        "mailto:someone@example.com",
        "urn:isbn:0451",
    ],
    "date": ["2025-06-18", "2024-02-29", "1999-12-31"],
    "date-time": ["2025-06-18T12:00:00Z", "2024-02-29T23:59:59.123+05:30", "1999-12-31T00:00:00-08:00"],
}
# Any non-empty name MCP allows, in any script, except controls and lone surrogates (see the rejection test).
PROPERTY_NAMES = st.text(
    alphabet=st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=64
) | st.text(alphabet=string.ascii_letters + string.digits + "_.-", min_size=1, max_size=64)
SHORT_TEXT = st.text(max_size=20)
OPTION_VALUES = st.lists(st.text(max_size=12), min_size=1, max_size=8, unique=True)
FINITE_FLOATS = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)
# Bounded so the file runs in seconds; database=None keeps hypothesis from writing .hypothesis/ into the repo.
PROPERTY_TEST_SETTINGS = settings(
    max_examples=60, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)


def text_values(
    text_format: str | None, low: int | float | None, high: int | float | None
) -> st.SearchStrategy[str]:
    low_count = int(low or 0)
    if text_format is not None:
        fitting = [
            example
            for example in FORMAT_EXAMPLES[text_format]
            if low_count <= len(example) and (high is None or len(example) <= high)
        ]
        return st.sampled_from(fitting)
    return st.text(min_size=low_count, max_size=int(high) if high is not None else low_count + 30)


def number_values(kind: str, low: int | float | None, high: int | float | None) -> st.SearchStrategy[Any]:
    lowest = -1e9 if low is None else low
    highest = 1e9 if high is None else high
    integers = st.integers(min_value=math.ceil(lowest), max_value=math.floor(highest))
    if kind == "integer":
        return integers
    floats = st.floats(min_value=lowest, max_value=highest, allow_nan=False, allow_infinity=False)
    return floats | integers if math.ceil(lowest) <= math.floor(highest) else floats


@st.composite
def labelled(draw: st.DrawFn, definition: dict[str, Any]) -> dict[str, Any]:
    """Add the optional title and description every MCP property kind allows."""
    if draw(st.booleans()):
        definition["title"] = draw(SHORT_TEXT)
    if draw(st.booleans()):
        definition["description"] = draw(SHORT_TEXT)
    return definition


@st.composite
def text_properties(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    text_format = draw(st.sampled_from([None, *TEXT_FORMATS]))
    definition: dict[str, Any] = {"type": "string"}
    if text_format is not None:
        definition["format"] = text_format
        low, high = draw(st.none() | st.integers(0, 10)), draw(st.none() | st.integers(40, 200))
    else:
        low = draw(st.none() | st.integers(0, 20))
        high = draw(st.none() | st.integers(low or 0, 40))
    if low is not None:
        definition["minLength"] = low
    if high is not None:
        definition["maxLength"] = high
    if draw(st.booleans()):
        definition["default"] = draw(text_values(text_format, low, high))
    return draw(labelled(definition)), "text"


@st.composite
def number_properties(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    kind = draw(st.sampled_from(["number", "integer"]))
    bound = st.integers(-1000, 1000) if kind == "integer" else st.integers(-1000, 1000) | FINITE_FLOATS
    low, high = draw(st.none() | bound), draw(st.none() | bound)
    if low is not None and high is not None and low > high:
        low, high = high, low
    definition: dict[str, Any] = {"type": kind}
    if low is not None:
        definition["minimum"] = low
    if high is not None:
        definition["maximum"] = high
    if draw(st.booleans()) and (kind == "number" or low is None or high is None or math.ceil(low) <= high):
        definition["default"] = draw(number_values(kind, low, high))
    return draw(labelled(definition)), kind


@st.composite
def boolean_properties(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    definition: dict[str, Any] = {"type": "boolean"}
    if draw(st.booleans()):
        definition["default"] = draw(st.booleans())
    return draw(labelled(definition)), "boolean"


@st.composite
def single_select_properties(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    values = draw(OPTION_VALUES)
    style = draw(st.sampled_from(["untitled", "titled", "legacy"]))
    definition: dict[str, Any] = {"type": "string"}
    if style == "titled":
        definition["oneOf"] = [{"const": value, "title": draw(SHORT_TEXT)} for value in values]
    else:
        definition["enum"] = values
    if style == "legacy":
        definition["enumNames"] = [draw(SHORT_TEXT) for _ in values]
    if draw(st.booleans()):
        definition["default"] = draw(st.sampled_from(values))
    return draw(labelled(definition)), "single-select"


@st.composite
def multi_select_properties(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    values = draw(OPTION_VALUES)
    if draw(st.booleans()):
        items: dict[str, Any] = {"type": "string", "enum": values}
    else:
        items = {"anyOf": [{"const": value, "title": draw(SHORT_TEXT)} for value in values]}
    definition: dict[str, Any] = {"type": "array", "items": items}
    low = draw(st.none() | st.integers(0, len(values)))
    high = draw(st.none() | st.integers(low or 0, len(values) + 3))
    if low is not None:
        definition["minItems"] = low
    if high is not None:
        definition["maxItems"] = high
    if draw(st.booleans()):
        definition["default"] = draw(choice_lists(values, low, high))
    return draw(labelled(definition)), "multi-select"


def choice_lists(
    values: list[str], low: int | float | None, high: int | float | None
) -> st.SearchStrategy[list[str]]:
    most = len(values) if high is None else min(int(high), len(values))
    return st.lists(st.sampled_from(values), unique=True, min_size=int(low or 0), max_size=most)


MCP_PROPERTIES = st.one_of(
    text_properties(),
    number_properties(),
    boolean_properties(),
    single_select_properties(),
    multi_select_properties(),
)


@st.composite
def mcp_schemas(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, str]]:
    """A requestedSchema built only from MCP property definitions, and the kind each property should get."""
    generated = draw(st.dictionaries(PROPERTY_NAMES, MCP_PROPERTIES, max_size=6))
    properties = {name: definition for name, (definition, _) in generated.items()}
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    wants_required = draw(st.booleans())
    if properties and wants_required:
        schema["required"] = draw(st.lists(st.sampled_from(sorted(properties)), unique=True))
    if draw(st.booleans()):
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return schema, {name: kind for name, (_, kind) in generated.items()}


def answers_for(question: Question) -> st.SearchStrategy[Any]:
    values = [option.value for option in question.options]
    if question.kind == "text":
        return text_values(question.format, question.min, question.max)
    if question.kind in ("number", "integer"):
        return number_values(question.kind, question.min, question.max)
    if question.kind == "boolean":
        return st.booleans()
    if question.kind == "single-select":
        return st.sampled_from(values)
    return choice_lists(values, question.min, question.max)


@st.composite
def questions_with_valid_content(draw: st.DrawFn) -> tuple[list[Question], dict[str, Any]]:
    schema, _ = draw(mcp_schemas())
    questions = parse_requested_schema(schema)
    content = {
        question.id: draw(answers_for(question))
        for question in questions
        if question.required or draw(st.booleans())
    }
    return questions, content


def wrong_answers_for(question: Question) -> st.SearchStrategy[Any]:
    wrong_type = st.sampled_from([None, {"nested": 1}, [["x"]]])
    not_an_option = "".join(option.value for option in question.options) + "!"
    by_kind: dict[str, list[Any]] = {
        "text": [42, True, ["text"]],
        "number": ["1", True, math.nan],
        "integer": [1.5, 2.0, True, "1"],
        "boolean": ["true", 1, 0],
        "single-select": [not_an_option, 1, [not_an_option]],
        "multi-select": [not_an_option, [not_an_option], [1]],
    }
    candidates = list(by_kind[question.kind])
    if question.kind == "text" and question.max is not None:
        candidates.append("x" * (int(question.max) + 1))
    if question.kind == "text" and question.min:
        candidates.append("")
    if question.kind in ("number", "integer") and question.max is not None:
        candidates.append(math.floor(question.max) + 1)
    if question.kind in ("number", "integer") and question.min is not None:
        candidates.append(math.ceil(question.min) - 1)
    if question.kind == "multi-select":
        candidates.append([question.options[0].value] * 2)
    return wrong_type | st.sampled_from(candidates)


@PROPERTY_TEST_SETTINGS
@given(mcp_schemas())
def test_it_accepts_every_generated_mcp_schema(generated: tuple[dict[str, Any], dict[str, str]]) -> None:
    schema, expected_kinds = generated

    questions = parse_requested_schema(schema)

    assert {question.id: question.kind for question in questions} == expected_kinds
    assert mcp_spec_accepts(schema)
    assert {question.id for question in questions if question.required} == set(schema.get("required", []))
    assert all(question.kind in QUESTION_KINDS for question in questions)


@PROPERTY_TEST_SETTINGS
@given(mcp_schemas())
def test_generated_questions_round_trip_through_json(
    generated: tuple[dict[str, Any], dict[str, str]],
) -> None:
    questions = parse_requested_schema(generated[0])

    assert questions_from_json(json.loads(json.dumps(questions_to_json(questions)))) == questions


@PROPERTY_TEST_SETTINGS
@given(questions_with_valid_content())
def test_valid_generated_answers_come_back_unchanged(
    generated: tuple[list[Question], dict[str, Any]],
) -> None:
    questions, content = generated

    assert validate_content(questions, content) == content


@PROPERTY_TEST_SETTINGS
@given(st.data())
def test_a_mutated_answer_is_rejected_naming_that_field(data: st.DataObject) -> None:
    questions, content = data.draw(
        questions_with_valid_content().filter(lambda generated: bool(generated[0]))
    )
    target = data.draw(st.sampled_from(questions))
    wrong = data.draw(wrong_answers_for(target))

    with pytest.raises(AnswerInvalid) as caught:
        validate_content(questions, {**content, target.id: wrong})

    assert set(caught.value.errors) == {target.id}
    assert caught.value.errors[target.id]


@PROPERTY_TEST_SETTINGS
@given(questions_with_valid_content(), st.sampled_from(["$", "other key", "z" * 65]))
def test_an_extra_answer_key_is_rejected_by_name(
    generated: tuple[list[Question], dict[str, Any]], key: str
) -> None:
    questions, content = generated
    assume(key not in {question.id for question in questions})  # names are free text: "$" can be a question

    with pytest.raises(AnswerInvalid) as caught:
        validate_content(questions, {**content, key: "x"})

    assert caught.value.errors == {f"$.{key}": "is not a question in this form"}


SCHEMA_WORDS = st.sampled_from(
    [
        "type",
        "properties",
        "required",
        "items",
        "enum",
        "enumNames",
        "oneOf",
        "anyOf",
        "const",
        "title",
        "default",
        "minimum",
        "maximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "format",
        "$ref",
        "string",
        "array",
        "object",
        "number",
        "integer",
        "boolean",
    ]
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8) | SCHEMA_WORDS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(SCHEMA_WORDS | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=25,
)


@PROPERTY_TEST_SETTINGS
@given(st.one_of(JSON_VALUES, st.builds(lambda field: schema_with({"field": field}), JSON_VALUES)))
def test_arbitrary_input_either_parses_or_fails_with_paths(schema: Any) -> None:
    try:
        questions = parse_requested_schema(schema)
    except SchemaInvalid as invalid:
        paths = [error["path"] for error in invalid.errors]
        assert invalid.errors
        assert paths == sorted(paths)
        assert all(
            path.startswith("$") and error["reason"]
            for path, error in zip(paths, invalid.errors, strict=True)
        )
    else:
        assert all(question.kind in QUESTION_KINDS for question in questions)
        # ReviewHub is never looser than MCP: whatever it accepts, some MCP revision accepts.
        assert mcp_spec_accepts(schema)


def test_it_accepts_additional_properties_false_as_zod_and_pydantic_emit_it() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False}
    assert [q.id for q in parse_requested_schema(schema)] == ["a"]


def test_it_rejects_other_additional_properties_values_with_path() -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}
    with pytest.raises(SchemaInvalid) as error:
        parse_requested_schema(schema)
    assert error.value.errors == [{"path": "$.additionalProperties", "reason": "may only be false"}]


# ---------------------------------------------------------------------------------------------------
# Built on the official MCP definitions shipped with the package
# ---------------------------------------------------------------------------------------------------

# The file the validators are built from, read here with the reference implementation (jsonschema).
SHIPPED_DEFINITIONS = SPEC_FILE


def revision_validator(revision: str) -> Draft202012Validator:
    """One MCP revision's requestedSchema, straight from the shipped copy of its official definitions."""
    spec = json.loads(SHIPPED_DEFINITIONS.read_text(encoding="utf-8"))
    registry: Registry[Any] = Registry().with_resource(spec["$id"], DRAFT202012.create_resource(spec)).crawl()
    [reference] = [
        entry["$ref"]
        for entry in spec["$defs"]["requestedSchema"]["anyOf"]
        if entry["$ref"].startswith(f"urn:mcp:schema:{revision}#")
    ]
    return Draft202012Validator({"$ref": reference}, registry=registry)


def test_the_shipped_definitions_are_a_valid_json_schema_naming_their_source() -> None:
    spec = json.loads(SHIPPED_DEFINITIONS.read_text(encoding="utf-8"))

    Draft202012Validator.check_schema(spec)
    assert {f"mcp-{revision}" for revision in MCP_REVISIONS} <= set(spec["$defs"])
    assert all(revision in spec["description"] for revision in MCP_REVISIONS)
    assert "official MCP JSON schemas" in spec["description"]


# What each revision added is accepted whichever revision the agent speaks.
REVISION_EXAMPLES = [
    ({"type": "string", "enum": ["s", "m"], "enumNames": ["Small", "Medium"]}, {"2025-06-18", "2025-11-25"}),
    ({"type": "boolean", "default": True}, {"2025-06-18", "2025-11-25"}),
    ({"type": "string", "oneOf": [{"const": "a", "title": "A"}]}, {"2025-11-25"}),
    ({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "minItems": 1}, {"2025-11-25"}),
    ({"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}]}, "default": ["a"]}, {"2025-11-25"}),
]


@pytest.mark.parametrize(("definition", "revisions"), REVISION_EXAMPLES)
def test_it_accepts_what_any_mcp_revision_accepts(definition: dict[str, Any], revisions: set[str]) -> None:
    schema = schema_with({"field": definition})

    assert {
        revision for revision in MCP_REVISIONS if revision_validator(revision).is_valid(schema)
    } >= revisions
    assert mcp_spec_accepts(schema)
    assert parse_requested_schema(schema)[0].id == "field"


def test_2025_06_18_alone_had_no_multi_select_yet_the_union_accepts_it() -> None:
    schema = schema_with({"tags": {"type": "array", "items": {"type": "string", "enum": ["a"]}}})

    assert not revision_validator("2025-06-18").is_valid(schema)
    assert revision_validator("2026-07-28").is_valid(schema)
    assert [question.kind for question in parse_requested_schema(schema)] == ["multi-select"]


def test_integral_float_counts_are_integers_as_in_json_schema() -> None:
    schema = schema_with({"field": {"type": "string", "minLength": 2.0, "maxLength": 5.0}})

    assert mcp_spec_accepts(schema)
    question = parse_requested_schema(schema)[0]
    assert (question.min, question.max) == (2, 5)
    assert all(type(value) is int for value in (question.min, question.max))


# ReviewHub's rules on top of MCP: each schema here is valid MCP, and refused with this path and reason.
STRICTER_RULES = [
    ({"type": "string", "pattern": "^a"}, ".pattern", "is not allowed on a text question"),
    ({"type": "string", "enum": []}, ".enum", "must be a non-empty array"),
    ({"type": "string", "enum": ["a", "a"]}, ".enum[1]", "duplicates an earlier option"),
    ({"type": "string", "enum": ["a"], "default": "b"}, ".default", "must be one of: a"),
    ({"type": "string", "enum": ["a", "b"], "enumNames": ["A"]}, ".enumNames", "one name per enum value"),
    ({"type": "string", "enum": ["a"], "oneOf": [{"const": "a", "title": "A"}]}, "", "not both"),
    ({"type": "string", "minLength": -1}, ".minLength", "must be a non-negative integer"),
    ({"type": "string", "minLength": 5, "maxLength": 4}, ".minLength", "must not be greater than maxLength"),
    ({"type": "string", "maxLength": 10_001}, ".maxLength", "must be at most 10000"),
    ({"type": "string", "format": "email", "default": "nobody"}, ".default", "must be a valid email address"),
    ({"type": "string", "default": 5}, ".default", "must be a string"),
    ({"type": "integer", "minimum": 1.5}, ".minimum", "must be an integer"),
    ({"type": "number", "minimum": 5, "maximum": 4}, ".minimum", "must not be greater than maximum"),
    ({"type": "string", "title": "x" * 10_001}, ".title", "must be at most 10000 characters"),
    (
        {"type": "array", "items": {"type": "string", "enum": ["a"]}, "minItems": 2},
        ".minItems",
        "must not be greater than the number of options (1)",
    ),
    (
        {"type": "array", "items": {"anyOf": [{"const": "a", "title": "A"}], "type": "number"}},
        ".items.type",
        '"string"',
    ),
]


@pytest.mark.parametrize(("definition", "subpath", "reason"), STRICTER_RULES)
def test_reviewhub_rules_on_top_of_mcp_refuse_valid_mcp_with_path(
    definition: dict[str, Any], subpath: str, reason: str
) -> None:
    assert mcp_spec_accepts(schema_with({"field": definition}))
    assert_property_rejected(definition, subpath, reason)


@pytest.mark.parametrize(
    ("schema", "path", "reason"),
    [
        (schema_with({"a": {"type": "boolean"}}, required=["ghost"]), "$.required[0]", "is not a property"),
        (schema_with({}, additionalProperties=True), "$.additionalProperties", "may only be false"),
        (schema_with({}, title=1), "$.title", "must be a string"),
        (schema_with({}, **{"$defs": {}}), "$.$defs", "definitions are not supported"),
        (schema_with({"": {"type": "boolean"}}), '$.properties[""]', "must be 1-64 characters"),
        (schema_with({"a\nb": {"type": "boolean"}}), '$.properties["a\\nb"]', "control character"),
    ],
)
def test_reviewhub_root_rules_on_top_of_mcp_refuse_valid_mcp_with_path(
    schema: dict[str, Any], path: str, reason: str
) -> None:
    assert mcp_spec_accepts(schema)
    assert_rejected(schema, path, reason)


def test_size_limits_apply_to_valid_mcp() -> None:
    schema = schema_with({f"p{index}": {"type": "string", "enum": ["a", "b", "c"]} for index in range(3)})

    assert mcp_spec_accepts(schema)
    assert_rejected(
        schema, "$.properties", "must have at most 2 properties", limits=SchemaLimits(max_properties=2)
    )
    assert_rejected(
        schema, "$.properties.p0.enum", "must have at most 2 options", limits=SchemaLimits(max_options=2)
    )


@pytest.mark.parametrize(
    ("schema", "path", "reason"),
    [
        (
            {"type": "object", "properties": {}, "required": "a"},
            "$.required",
            "must be an array of property names",
        ),
        (
            schema_with({"a": {"type": "string", "minLength": "3"}}),
            "$.properties.a.minLength",
            "non-negative integer",
        ),
        (schema_with({"a": {"type": "array"}}), "$.properties.a.items", "is required"),
        (
            schema_with({"a": {"type": "array", "items": {"enum": ["x"], "type": 1}}}),
            "$.properties.a.items.type",
            'must be "string"',
        ),
    ],
)
def test_what_mcp_refuses_is_refused_with_the_path_of_the_offending_keyword(
    schema: dict[str, Any], path: str, reason: str
) -> None:
    assert not mcp_spec_accepts(schema)
    assert_rejected(schema, path, reason)


@pytest.mark.parametrize(
    ("definition", "subpath", "reason"),
    [
        ({"type": "string", "enum": ["x", 1]}, ".enum[1]", "must be a string"),
        ({"type": "string", "oneOf": [{"title": "A"}]}, ".oneOf[0].const", "is required"),
        ({"type": "string", "enum": "red"}, ".enum", "must be a non-empty array"),
    ],
)
def test_a_malformed_select_is_refused_although_mcp_would_read_it_as_plain_text(
    definition: dict[str, Any], subpath: str, reason: str
) -> None:
    # MCP's StringSchema leaves undeclared keywords open, so it accepts these as text questions; ReviewHub reads
    # enum and oneOf as the options they are meant to be, checked against the select definitions.
    assert mcp_spec_accepts(schema_with({"field": definition}))
    assert_property_rejected(definition, subpath, reason)


def union_by_python_jsonschema() -> Draft202012Validator:
    spec = json.loads(SHIPPED_DEFINITIONS.read_text(encoding="utf-8"))
    registry: Registry[Any] = Registry().with_resource(spec["$id"], DRAFT202012.create_resource(spec)).crawl()
    return Draft202012Validator({"$ref": f"{spec['$id']}#/$defs/requestedSchema"}, registry=registry)


PYTHON_UNION = union_by_python_jsonschema()
# JSON as agents send it: no NaN or infinities (which the two engines type differently, and JSON cannot carry).
STRICT_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | FINITE_FLOATS
    | st.text(max_size=8)
    | SCHEMA_WORDS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(SCHEMA_WORDS | st.text(max_size=6), children, max_size=5)
    ),
    max_leaves=25,
)


@PROPERTY_TEST_SETTINGS
@given(
    st.one_of(
        mcp_schemas().map(lambda generated: generated[0]),
        STRICT_JSON,
        st.builds(lambda f: schema_with({"f": f}), STRICT_JSON),
    )
)
def test_the_runtime_validator_and_the_reference_implementation_agree_on_what_mcp_accepts(
    schema: Any,
) -> None:
    # Runtime checks use jsonschema_rs for speed; the reference `jsonschema` package must reach the same verdict.
    assert mcp_spec_accepts(schema) == PYTHON_UNION.is_valid(schema)
