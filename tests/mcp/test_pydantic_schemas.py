"""MCP SDKs build `requestedSchema` from pydantic models; field names in any script come through unchanged."""

from typing import Literal

import pytest
from pydantic import BaseModel, Field

from elicitation.queue.schemas import mcp_spec_accepts, parse_requested_schema, validate_content

pytestmark = pytest.mark.mcp


class Prenotazione(BaseModel):
    città: str = Field(description="Dove?")
    numero_di_ospiti: int = Field(ge=1, le=8, default=2)
    tipo: Literal["singola", "doppia"]
    colazione: bool = False


def test_a_pydantic_model_with_a_non_ascii_field_is_accepted_and_answered_under_that_name() -> None:
    schema = Prenotazione.model_json_schema()

    questions = parse_requested_schema(schema)

    assert mcp_spec_accepts(schema)
    assert [(question.id, question.kind, question.title) for question in questions] == [
        ("città", "text", "Città"),
        ("numero_di_ospiti", "integer", "Numero Di Ospiti"),
        ("tipo", "single-select", "Tipo"),
        ("colazione", "boolean", "Colazione"),
    ]
    content = {"città": "Roma", "tipo": "doppia"}
    assert validate_content(questions, content) == content
    assert Prenotazione.model_validate(content).città == "Roma"
