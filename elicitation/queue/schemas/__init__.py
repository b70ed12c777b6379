"""MCP elicitation `requestedSchema`s: parse them into form questions and validate the answers.

Built on the official MCP definitions of revisions 2025-06-18, 2025-11-25 and 2026-07-28, shipped beside this
package in `elicitation/queue/mcp_elicitation_schema.json`: each property is checked by a JSON Schema validator
(jsonschema-rs) against the definition it is read as (`StringSchema`, `NumberSchema`, ...,
`TitledMultiSelectEnumSchema`), so what MCP accepts is accepted, with ReviewHub's size limits and a few stricter
rules on top (listed in the README); every problem keeps its JSON path. Free of Django on purpose: the API, the
reviewer UI and background jobs all share these rules.

- `questions.py`: what a schema becomes (questions, options, limits) and its stored JSON form;
- `mcp_definitions.py`: the official definitions, loaded once, as validators and declared keywords;
- `parsing.py`: a `requestedSchema` into questions, or `SchemaInvalid` listing every problem;
- `answers.py`: content checked against the questions, or `AnswerInvalid`;
- `text_formats.py`: email, uri, date and date-time, checked strictly.

Callers use the names below through the package (`schemas.parse_requested_schema`), not the modules.
"""

from elicitation.queue.schemas.answers import AnswerInvalid, validate_answer, validate_content
from elicitation.queue.schemas.mcp_definitions import MCP_REVISIONS, mcp_spec_accepts
from elicitation.queue.schemas.parsing import MAX_PROPERTY_NAME_LENGTH, SchemaInvalid, parse_requested_schema
from elicitation.queue.schemas.questions import (
    DEFAULT_LIMITS,
    QUESTION_KINDS,
    TEXT_FORMATS,
    Option,
    Question,
    SchemaLimits,
    questions_from_json,
    questions_to_json,
)

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_PROPERTY_NAME_LENGTH",
    "MCP_REVISIONS",
    "QUESTION_KINDS",
    "TEXT_FORMATS",
    "AnswerInvalid",
    "Option",
    "Question",
    "SchemaInvalid",
    "SchemaLimits",
    "mcp_spec_accepts",
    "parse_requested_schema",
    "questions_from_json",
    "questions_to_json",
    "validate_answer",
    "validate_content",
]
