"""What tests/test_schemas.py's properties leave out: our validator agrees with JSON Schema itself. Every answer it
accepts for a schema generated from the MCP definitions is also valid under that requestedSchema read as JSON
Schema 2020-12 (formats checked), so nothing slips past ReviewHub that the agent's own validation would refuse."""

from typing import Any

import jsonschema
from hypothesis import given
from hypothesis import strategies as st

from elicitation.queue.schemas import parse_requested_schema, validate_content
from tests.test_schemas import PROPERTY_TEST_SETTINGS, answers_for, mcp_schemas


@st.composite
def schemas_with_accepted_content(draw: st.DrawFn) -> tuple[dict[str, Any], dict[str, Any]]:
    schema, _ = draw(mcp_schemas())
    questions = parse_requested_schema(schema)
    content = {
        question.id: draw(answers_for(question))
        for question in questions
        if question.required or draw(st.booleans())
    }
    return schema, validate_content(questions, content)


@PROPERTY_TEST_SETTINGS
@given(schemas_with_accepted_content())
def test_every_accepted_answer_is_valid_json_schema_content(
    generated: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    schema, content = generated
    validator = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )

    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(content)
    ]

    assert errors == []


@PROPERTY_TEST_SETTINGS
@given(mcp_schemas())
def test_every_generated_schema_is_itself_a_valid_json_schema(
    generated: tuple[dict[str, Any], dict[str, str]],
) -> None:
    jsonschema.Draft202012Validator.check_schema(generated[0])
