"""The official MCP elicitation definitions (revisions 2025-06-18, 2025-11-25 and 2026-07-28), loaded once
from `elicitation/queue/mcp_elicitation_schema.json`: validators for each definition a property can be read as,
and the keywords each definition declares."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs

# The official MCP definitions, shipped with the package beside this one, in elicitation/queue/ (see the file's
# description for source and revisions).
SPEC_FILE = Path(__file__).parents[1] / "mcp_elicitation_schema.json"
_SPEC: dict[str, Any] = json.loads(SPEC_FILE.read_text(encoding="utf-8"))
_REGISTRY = jsonschema_rs.Registry([(_SPEC["$id"], _SPEC)])
MCP_REVISIONS = ("2025-06-18", "2025-11-25", "2026-07-28")
# Problems are explained against the newest revision's definition of the variant a property is read as.
_NEWEST = f"mcp-{MCP_REVISIONS[-1]}"


def _spec_node(pointer: str) -> dict[str, Any]:
    node: Any = _SPEC
    for part in pointer.split("/"):
        node = node[part]
    assert isinstance(node, dict)
    return node


def _spec_validator(uri: str) -> jsonschema_rs.Validator:
    # jsonschema_rs, not jsonschema: 50 properties of 200 options cost 260 ms in pure Python (README, dependencies).
    return jsonschema_rs.validator_for({"$ref": uri}, registry=_REGISTRY)


def _newest_definition(name: str) -> jsonschema_rs.Validator:
    return _spec_validator(f"urn:mcp:schema:{MCP_REVISIONS[-1]}#/$defs/{name}")


UNION_REQUESTED_SCHEMA = _spec_validator(f"{_SPEC['$id']}#/$defs/requestedSchema")
NEWEST_REQUESTED_SCHEMA = _newest_definition("ElicitRequestFormParams/properties/requestedSchema")

# How ReviewHub reads a property, and the MCP definition each reading is checked against.
_VARIANT_DEFINITIONS = {
    "text": "StringSchema",
    "number": "NumberSchema",
    "integer": "NumberSchema",
    "boolean": "BooleanSchema",
    "enum-select": "UntitledSingleSelectEnumSchema",
    "legacy-select": "LegacyTitledEnumSchema",
    "titled-select": "TitledSingleSelectEnumSchema",
    "multi-select": "UntitledMultiSelectEnumSchema",
    "titled-multi-select": "TitledMultiSelectEnumSchema",
}
VARIANT_VALIDATORS = {variant: _newest_definition(name) for variant, name in _VARIANT_DEFINITIONS.items()}


def _declared_keys(name: str) -> frozenset[str]:
    return frozenset(_spec_node(f"$defs/{_NEWEST}/$defs/{name}")["properties"])


# A keyword the definition does not declare is refused: ReviewHub could not enforce it (the MCP definitions
# leave undeclared keywords open, so this is one of ReviewHub's stricter rules).
VARIANT_KEYS = {variant: _declared_keys(name) for variant, name in _VARIANT_DEFINITIONS.items()}
MULTI_SELECT_ITEM_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/UntitledMultiSelectEnumSchema/properties/items")["properties"]
)
# A redundant "type": "string" beside anyOf is what generators emit; it is checked, not refused.
TITLED_ITEM_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/TitledMultiSelectEnumSchema/properties/items")["properties"]
) | {"type"}
OPTION_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/TitledSingleSelectEnumSchema/properties/oneOf/items")["properties"]
)
# `title`, `description` and `additionalProperties: false` are what zod and pydantic emit for a model; the
# last changes nothing here, since unknown answer keys are refused anyway. Any other value is refused.
ROOT_KEYS = frozenset(
    _spec_node(f"$defs/{_NEWEST}/$defs/ElicitRequestFormParams/properties/requestedSchema")["properties"]
) | {"title", "description", "additionalProperties"}


def mcp_spec_accepts(schema: Any) -> bool:
    """Whether any MCP revision ReviewHub speaks accepts this `requestedSchema`, ReviewHub's own rules aside."""
    try:
        return bool(UNION_REQUESTED_SCHEMA.is_valid(schema))
    except (ValueError, OverflowError):  # not JSON at all (a non-string key)
        return False
