"""The shape of a rule file, as a JSON Schema (Draft 2020-12), checked by `jsonschema` in `validation.py`.

Each subschema that a person can get wrong carries `errorMessage` (the ajv-errors convention; validators ignore
unknown keywords): the reason a refusal gives for that field, either one sentence or one per failing keyword. A
refusal is reported at the nearest enclosing subschema that has one, so a bad group count is named at
`quorum.groups`, not at the count. What a schema cannot say stays in code: a route's target (an existing queue the
writer supervises), RE2-compilable regexes, finite numbers, time zones, a quorum's group counts against its total,
and that `set` changes something.
"""

from typing import Any

from elicitation.models import QueueMode, RuleAction

OPERATORS = ("eq", "in", "lt", "lte", "gt", "gte", "regex")
MATCH_FIELDS = ("agent", "server", "tool", "message", "schema_fingerprint", "arguments")
QUORUM_KEYS = ("approvals", "groups", "exclude_owner", "veto")
POLICY_KEYS = ("mode", "unmatched", "round_cap", "quorum", "rules")
ADJUSTING_ACTIONS = (RuleAction.SET.value, RuleAction.ROUTE.value, RuleAction.REQUIRE_QUORUM.value)
STEP_UP_METHODS = ("passkey",)
MAX_RULES = 5000
MAX_REGEX_LENGTH = 500
MAX_DEADLINE = 30 * 24 * 3600

SCALAR_TYPES = ["string", "number", "boolean", "null"]
NOTHING: dict[str, Any] = {"not": {}}  # with an errorMessage: this key may not be here


def refused(reason: str) -> dict[str, Any]:
    return {**NOTHING, "errorMessage": reason}


def absent_unless(reason: str) -> dict[str, Any]:
    """Absent or null (which reads as absent), else refused with `reason`."""
    return {"type": "null", "errorMessage": reason}


def when_action(actions: tuple[str, ...], then: dict[str, Any], otherwise: dict[str, Any]) -> dict[str, Any]:
    return {
        "if": {"required": ["action"], "properties": {"action": {"enum": list(actions)}}},
        "then": then,
        "else": otherwise,
    }


QUORUM: dict[str, Any] = {
    "type": "object",
    "errorMessage": "must be a mapping with " + ", ".join(QUORUM_KEYS),
    "properties": {
        "approvals": {
            "type": "integer",
            "minimum": 1,
            "maximum": 20,
            "errorMessage": "must be a whole number from 1 to 20",
        },
        "groups": {
            "type": "object",
            "propertyNames": {"type": "string", "minLength": 1},
            "additionalProperties": {"type": "integer", "minimum": 1},
            "errorMessage": "must map group names to whole numbers of at least 1",
        },
        "exclude_owner": {"type": "boolean", "errorMessage": "must be true or false"},
        "veto": {
            "enum": ["any", "none"],
            "errorMessage": "must be any (a decline or cancel ends the decision) or none",
        },
    },
    "additionalProperties": refused("unknown field"),
}

OPERATOR_CONDITION: dict[str, Any] = {
    "type": "object",
    "minProperties": 1,
    "errorMessage": "must be a value, a list of values or a mapping of operators",
    "properties": {
        "eq": {"type": SCALAR_TYPES, "errorMessage": "must be a string, number, boolean or null"},
        "in": {
            "type": "array",
            "items": {"type": SCALAR_TYPES},
            "errorMessage": "must be a list of strings, numbers or booleans",
        },
        **{op: {"type": "number", "errorMessage": "must be a number"} for op in ("lt", "lte", "gt", "gte")},
        "regex": {
            "type": "string",
            "maxLength": MAX_REGEX_LENGTH,
            "errorMessage": f"must be a regular expression of at most {MAX_REGEX_LENGTH} characters",
        },
    },
    "additionalProperties": refused("unknown operator; use one of " + ", ".join(OPERATORS)),
}

# A value, a list of values, or a mapping of operators.
CONDITION: dict[str, Any] = {
    "if": {"type": "object"},
    "then": OPERATOR_CONDITION,
    "else": {
        "type": [*SCALAR_TYPES, "array"],
        "items": {"type": SCALAR_TYPES},
        "errorMessage": {
            "type": "must be a value, a list of values or a mapping of operators",
            "items": "a list condition holds only scalars",
        },
    },
}

MATCH: dict[str, Any] = {
    "type": ["object", "null"],
    "errorMessage": "must be a mapping of " + ", ".join(MATCH_FIELDS),
    "properties": {
        **{field: CONDITION for field in MATCH_FIELDS if field != "arguments"},
        "arguments": {
            "type": "object",
            "errorMessage": "must be a mapping of argument name to condition",
            "propertyNames": {
                "type": "string",
                "minLength": 1,
                "errorMessage": "argument names must be non-empty strings",
            },
            "additionalProperties": CONDITION,
        },
    },
    "additionalProperties": refused("unknown field; match on " + ", ".join(MATCH_FIELDS)),
}

RULE: dict[str, Any] = {
    "type": "object",
    "errorMessage": "must be a mapping",
    "required": ["name", "action"],
    "properties": {
        "name": {
            "type": "string",
            "pattern": r"\S",
            "maxLength": 200,
            "errorMessage": "is required: a name of at most 200 characters",
        },
        "enabled": {"type": "boolean", "errorMessage": "must be true or false"},
        "match": MATCH,
        "action": {
            "enum": list(RuleAction.values),
            "errorMessage": "must be one of " + ", ".join(RuleAction.values),
        },
        "content": {},
        "queue": {},  # a route's target is checked against the database (validation.route_target)
        "priority": {},
        "deadline": {},
        "quorum": {},
        "step_up": {},
        "expires_at": {},  # a string, or the datetime a YAML timestamp loads as: checked in code
    },
    "additionalProperties": refused("unknown field"),
    "allOf": [
        when_action(
            (RuleAction.ACCEPT.value,),
            {
                "required": ["content"],
                "properties": {
                    "content": {
                        "type": "object",
                        "errorMessage": "is required with accept: the answer, as an object",
                    }
                },
            },
            {"properties": {"content": refused("only allowed with action accept")}},
        ),
        when_action(
            (RuleAction.ROUTE.value,),
            {},
            {"properties": {"queue": refused("only allowed with action route")}},
        ),
        when_action(
            ADJUSTING_ACTIONS,
            {
                "properties": {
                    "priority": {
                        "type": ["integer", "null"],
                        "minimum": -1000,
                        "maximum": 1000,
                        "errorMessage": "must be a whole number from -1000 to 1000",
                    },
                    "deadline": {
                        "type": ["integer", "null"],
                        "minimum": 1,
                        "maximum": MAX_DEADLINE,
                        "errorMessage": f"must be a number of seconds from 1 to {MAX_DEADLINE}",
                    },
                    # Each approver of a matched request signs its digest with a passkey (queue/step_up.py).
                    "step_up": {
                        "enum": [*STEP_UP_METHODS, None],
                        "errorMessage": "must be passkey (each approver signs with a passkey) or absent",
                    },
                }
            },
            {
                "properties": {
                    "priority": absent_unless("only allowed with set, route or require_quorum"),
                    "deadline": absent_unless("only allowed with set, route or require_quorum"),
                    "step_up": absent_unless("only allowed with set, route or require_quorum"),
                }
            },
        ),
        when_action(
            (RuleAction.REQUIRE_QUORUM.value,),
            {
                "required": ["quorum"],
                "properties": {
                    "quorum": {
                        "if": {"type": "null"},
                        "then": refused("is required with require_quorum"),
                        "else": QUORUM,
                        "errorMessage": "is required with require_quorum",
                    }
                },
            },
            {"properties": {"quorum": absent_unless("only allowed with action require_quorum")}},
        ),
    ],
}

POLICY: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "errorMessage": "must be a mapping with " + ", ".join(POLICY_KEYS),
    "properties": {
        "mode": {"enum": list(QueueMode.values), "errorMessage": "must be human or scripted"},
        "unmatched": {"enum": ["decline", "pending"], "errorMessage": "must be decline or pending"},
        "round_cap": {
            "type": "integer",
            "minimum": 1,
            "maximum": 100,
            "errorMessage": "must be a whole number from 1 to 100",
        },
        "quorum": {"if": {"type": "null"}, "else": QUORUM},
        "rules": {
            "type": "array",
            "maxItems": MAX_RULES,
            "items": RULE,
            "errorMessage": {"type": "must be a list", "maxItems": f"at most {MAX_RULES} rules per queue"},
        },
    },
    "additionalProperties": refused("unknown field"),
}
