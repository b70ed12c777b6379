"""Limits read as sentences, with the unit in the right number: "Choose at least 1 choice", not "1 choices"."""

from typing import Any

import pytest

from elicitation.queue.schemas.parsing import parse_requested_schema
from elicitation.reviewer import forms


def help_text(**limits: Any) -> str:
    schema = {
        "type": "object",
        "properties": {
            "colours": {
                "type": "array",
                "title": "Colours",
                "items": {"type": "string", "enum": ["red", "green", "blue"]},
                **limits,
            },
            "code": {"type": "string", "title": "Code"},
        },
    }
    form = forms.build_answer_form(parse_requested_schema(schema), prefix="answer")
    return str(form["colours"].help_text)


@pytest.mark.parametrize(
    ("limits", "text"),
    [
        ({"minItems": 1}, "Choose at least 1 choice."),
        ({"minItems": 2}, "Choose at least 2 choices."),
        ({"maxItems": 1}, "Choose at most 1 choice."),
        ({"minItems": 1, "maxItems": 3}, "Choose 1 to 3 choices."),
        ({"minItems": 1, "maxItems": 1}, "Choose 1 choice."),
    ],
)
def test_multi_select_limits_are_grammatical(limits: dict[str, Any], text: str) -> None:
    assert help_text(**limits) == text
