"""A rule file's data checked and turned into specs: every offending field path with its reason, or a RuleSpec per rule
and a PolicySpec for the whole file. The shape is a JSON Schema (`rule_file_schema.py`) checked by `jsonschema`;
what it cannot say (route targets, RE2, finite numbers, time zones, group counts) is checked here.

Who saves a rule is part of what is checked: a `route` may only target a queue the writer supervises
(`access.can_supervise`; staff: any). `user=None` is the operator (`manage.py import_rules` without `--as`,
fixtures, the code's own calls): any existing queue."""

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import re2
from django.contrib.auth.models import User
from django.utils.dateparse import parse_datetime
from jsonschema import Draft202012Validator, ValidationError, validators

from elicitation.models import Queue, QueueMode, RuleAction
from elicitation.queue import access
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.rule_file_schema import (
    MATCH_FIELDS,
    MAX_DEADLINE,
    MAX_REGEX_LENGTH,
    MAX_RULES,
    OPERATORS,
    POLICY,
    POLICY_KEYS,
    QUORUM_KEYS,
    RULE,
)

__all__ = [
    "MATCH_FIELDS",
    "MAX_DEADLINE",
    "MAX_REGEX_LENGTH",
    "MAX_RULES",
    "OPERATORS",
    "POLICY_KEYS",
    "QUORUM_KEYS",
]

# One message for a queue that does not exist and one the writer may not route to: queue names are not enumerable.
ROUTE_TARGET = "is required with route: the slug of an existing queue you supervise"
FINITE = "must be a finite number (not NaN or infinite)"

# Rule regexes run on RE2: time linear in the text, never catastrophic backtracking (`^(a+)+$` against 27 characters
# held Python's `re`, and the GIL with it, for every request of the process). Its errors go to the field's reason,
# not to stderr. A rule asks only whether a pattern is found, so no groups are captured: against 4,001 characters
# `^(a+)+$` took 454 µs with its group captured, 52 µs without.
RE2_OPTIONS = re2.Options()
RE2_OPTIONS.log_errors = False
RE2_OPTIONS.never_capture = True


def compile_pattern(pattern: str) -> Any:
    """A rule's regex compiled as the engine runs it; raises re2.error for what RE2 cannot take."""
    return re2.compile(pattern, RE2_OPTIONS)


def regex_problem(pattern: str) -> str | None:
    """Why a rule's regex cannot be saved, or None."""
    try:
        compile_pattern(pattern)
    except re2.error as exc:
        message = exc.args[0] if exc.args else ""
        reason = message.decode(errors="replace") if isinstance(message, bytes) else str(message)
    else:
        return None
    try:
        re.compile(pattern)  # compiled only to tell a typo from a construct RE2 leaves out; never run
    except re.error as exc:
        return f"is not a valid regular expression: {exc}"
    return (
        f"uses what rule regexes do not run ({reason}): they run on RE2, in time linear in the text, so "
        "lookarounds ((?=…), (?!…), (?<=…)), backreferences (\\1) and \\Z (write \\z) are not available"
    )


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """NaN and the infinities are floats too, but no database stores them in JSON (a 500 on SQLite and PostgreSQL)
    and no comparison with them means anything a person meant."""
    return is_number(value) and (isinstance(value, int) or math.isfinite(value))


def is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def non_finite_paths(value: Any, path: str) -> dict[str, str]:
    """Every NaN or infinite number in a JSON value (content, a condition), by path. Iterative: depth is the
    door's to limit, not this walk's."""
    errors: dict[str, str] = {}
    stack = [(value, path)]
    while stack:
        node, where = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            errors[where] = FINITE
        elif isinstance(node, dict):
            stack.extend((item, f"{where}.{key}") for key, item in node.items())
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{index}]") for index, item in enumerate(node))
    return errors


# --- the shape: the JSON Schema (rule_file_schema.py), checked by jsonschema ------------------------------------

# A whole number is an int here, as it is in the database's JSON: Draft 2020-12 would also take 5.0.
RuleFileValidator = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
    ),
)
POLICY_VALIDATOR = RuleFileValidator(POLICY)
RULE_VALIDATOR = RuleFileValidator(RULE)

Path = tuple[str | int, ...]
# Keywords whose subschema applies to a member of the instance, not to the instance itself.
TO_A_NAMED_MEMBER = ("properties", "patternProperties")
TO_A_MEMBER = ("additionalProperties", "items")
TO_ONE_OF_SEVERAL = ("allOf", "anyOf", "oneOf")


def reasons_and_places(error: ValidationError, root: Mapping[str, Any]) -> list[tuple[Path, str]]:
    """Where a refusal is reported and why: at the nearest subschema along the error's schema path that carries an
    `errorMessage`, with that message (or the one for the keyword that failed under it). A member that is required
    and missing is named itself, in the words its own subschema gives."""
    node: Any = root
    depth = 0
    found: tuple[int, Any, str | int | None] | None = None
    steps = list(error.absolute_schema_path)
    index = 0
    while isinstance(node, Mapping):
        if "errorMessage" in node:
            found = (depth, node["errorMessage"], steps[index] if index < len(steps) else None)
        if index >= len(steps) - 1:
            break  # the last step is the keyword that failed
        keyword = steps[index]
        if keyword in TO_A_NAMED_MEMBER or keyword in TO_ONE_OF_SEVERAL:
            node, index = node[keyword][steps[index + 1]], index + 2
            depth += keyword in TO_A_NAMED_MEMBER
        elif keyword in TO_A_MEMBER:
            node, index, depth = node[keyword], index + 1, depth + 1
        elif keyword in ("if", "then", "else", "not", "propertyNames", "contains"):
            node, index = node[keyword], index + 1
        else:
            break
    path: Path = tuple(error.absolute_path)
    if error.validator == "required":
        members = error.schema.get("properties", {})
        missing = [name for name in error.validator_value if name not in error.instance]
        return [
            ((*path, name), str(members.get(name, {}).get("errorMessage", error.message))) for name in missing
        ]
    if found is None:
        return [(path, error.message)]
    at, message, keyword = found
    if isinstance(message, Mapping):
        message = message.get(keyword, error.message)
    return [(path[:at], str(message))]


def shape_errors(validator: Any, data: Any) -> dict[Path, str]:
    """Every refusal of `data` by the schema, by path; the first one at a path is kept."""
    errors: dict[Path, str] = {}
    for error in validator.iter_errors(data):
        for path, reason in reasons_and_places(error, validator.schema):
            errors.setdefault(path, reason)
    return errors


def field_path(prefix: str, path: Iterable[str | int], data: Any) -> str:
    """`rules[2].match.tool.regex` (an item of a list in brackets, a key of a mapping after a dot, even a number
    YAML read as one); "$" for the whole document."""
    text = prefix
    for part in path:
        if isinstance(data, list) and isinstance(part, int):
            text, data = f"{text}[{part}]", data[part]
        else:
            text += f".{part}" if text else str(part)
            data = data.get(part) if isinstance(data, dict) else None
    return text or "$"


# --- what the schema cannot say ---------------------------------------------------------------------------------


def conditions(match: Mapping[str, Any], path: str) -> Iterable[tuple[str, Any]]:
    """Each condition of a well-shaped `match`, with its path."""
    for key, spec in match.items():
        if key == "arguments" and isinstance(spec, Mapping):
            yield from ((f"{path}.arguments.{name}", condition) for name, condition in spec.items())
        elif key != "arguments":
            yield f"{path}.{key}", spec


def match_problems(match: Any, path: str, errors: dict[str, str]) -> None:
    """Regexes RE2 cannot run and numbers that are not finite, in the conditions and operands the schema let
    through (the schema's own refusal of one stands alone)."""
    if not isinstance(match, Mapping):
        return
    for where, spec in conditions(match, path):
        if where in errors:
            continue
        if not isinstance(spec, Mapping):
            errors.update(non_finite_paths(spec, where))
            continue
        for op, operand in spec.items():
            at = f"{where}.{op}"
            if op not in OPERATORS or at in errors:
                continue
            if op == "regex":
                problem = regex_problem(operand)
                if problem is not None:
                    errors[at] = problem
            else:
                errors.update(non_finite_paths(operand, at))


def quorum_problems(spec: Any, path: str, errors: dict[str, str]) -> None:
    """The group counts a quorum names must fit in its approvals."""
    where = (path, f"{path}.approvals", f"{path}.groups")
    if not isinstance(spec, Mapping) or any(at in errors for at in where):
        return
    counted = sum(spec.get("groups", {}).values())
    if counted > spec.get("approvals", 1):
        errors[f"{path}.approvals"] = f"must be at least the sum of the group counts ({counted})"


def normalise_quorum(spec: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "approvals": spec.get("approvals", 1),
        "groups": dict(spec.get("groups", {})),
        "exclude_owner": bool(spec.get("exclude_owner", False)),
        "veto": spec.get("veto", "any"),
    }


@dataclass
class RuleSpec:
    """One rule as validated data, before it is a row."""

    name: str
    action: str
    match: dict[str, Any]
    enabled: bool = True
    content: dict[str, Any] | None = None
    route_to: Queue | None = None
    priority: int | None = None
    deadline_seconds: int | None = None
    quorum: dict[str, Any] | None = None
    expires_at: datetime | None = None
    step_up: str = ""  # "passkey": each approver signs the request's digest with a passkey


def route_target(slug: Any, user: User | None) -> Queue | None:
    """The queue a route by `user` may target: an existing one they supervise (the operator, `user=None`: any)."""
    target = Queue.objects.filter(slug=slug).first() if isinstance(slug, str) else None
    if target is None or (user is not None and not access.can_supervise(user, target)):
        return None
    return target


def parse_rule(
    data: Any, path: str, *, queue: Queue, user: User | None = None
) -> tuple[RuleSpec | None, dict[str, str]]:
    """A rule's data (YAML/JSON shape) as a RuleSpec, or the errors keyed by field path. `user` writes it (None:
    the operator), which decides where it may route."""
    shape = shape_errors(RULE_VALIDATOR, data)
    errors = {field_path(path, at, data): reason for at, reason in shape.items()}
    return checked_rule(data, path, errors, queue, user)


def checked_rule(
    data: Any, path: str, errors: dict[str, str], queue: Queue, user: User | None
) -> tuple[RuleSpec | None, dict[str, str]]:
    """The checks a schema cannot make, on a rule the schema refused with `errors` (by field path), then its spec."""
    if not isinstance(data, dict):
        return None, errors
    action = data.get("action")
    match_problems(data.get("match"), f"{path}.match", errors)
    content = data.get("content")
    if action == RuleAction.ACCEPT and isinstance(content, dict):
        errors.update(non_finite_paths(content, f"{path}.content"))
    route_to = None
    if action == RuleAction.ROUTE:
        route_to = route_target(data.get("queue"), user)
        if route_to is None:
            errors[f"{path}.queue"] = ROUTE_TARGET
        elif route_to.pk == queue.pk:
            errors[f"{path}.queue"] = "must be another queue than this one"
    priority, deadline = data.get("priority"), data.get("deadline")
    step_up = data.get("step_up")
    if action == RuleAction.SET and priority is None and deadline is None and step_up is None:
        errors[f"{path}.action"] = "set needs a priority, a deadline or a step_up"
    quorum = data.get("quorum")
    if action == RuleAction.REQUIRE_QUORUM:
        quorum_problems(quorum, f"{path}.quorum", errors)
    expires_at = data.get("expires_at")
    if expires_at is not None:
        parsed = parse_datetime(expires_at) if isinstance(expires_at, str) else expires_at
        if not isinstance(parsed, datetime) or parsed.tzinfo is None:
            errors[f"{path}.expires_at"] = "must be an ISO 8601 date-time with a time zone"
        expires_at = parsed
    if errors:
        return None, errors
    return RuleSpec(
        name=data["name"].strip(),
        action=str(action),
        match=dict(data.get("match") or {}),
        enabled=data.get("enabled", True),
        content=content if action == RuleAction.ACCEPT else None,
        route_to=route_to,
        priority=priority,
        deadline_seconds=deadline,
        quorum=normalise_quorum(quorum) if quorum is not None else None,
        expires_at=expires_at,
        step_up=step_up or "",
    ), {}


@dataclass
class PolicySpec:
    mode: str
    unmatched: str
    round_cap: int
    quorum: dict[str, Any] | None
    rules: list[RuleSpec]


def parse_policy(data: Any, *, queue: Queue, user: User | None = None) -> PolicySpec:
    """A whole rule file, written by `user` (None: the operator); InvalidInput names every offending field path
    (`rules[2].match.tool.regex`)."""
    shape = shape_errors(POLICY_VALIDATOR, data)
    if not isinstance(data, dict):
        raise InvalidInput("The rule file is not valid.", {"$": shape[()]})
    by_rule: dict[int, dict[str, str]] = {}
    errors: dict[str, str] = {}
    for at, reason in shape.items():
        if len(at) > 1 and at[0] == "rules" and isinstance(at[1], int):
            by_rule.setdefault(at[1], {})[field_path("", at, data)] = reason
        else:
            errors[field_path("", at, data)] = reason
    quorum = data.get("quorum")
    quorum_problems(quorum, "quorum", errors)
    specs: list[RuleSpec] = []
    if "rules" not in errors:  # a list of at most MAX_RULES: each rule is checked on its own
        for index, raw in enumerate(data.get("rules", [])):
            spec, rule_errors = checked_rule(raw, f"rules[{index}]", by_rule.get(index, {}), queue, user)
            errors.update(rule_errors)
            if spec is not None:
                specs.append(spec)
    if errors:
        raise InvalidInput("The rule file is not valid.", errors)
    mode, unmatched, round_cap = (
        data.get("mode", QueueMode.HUMAN),
        data.get("unmatched", "decline"),
        data.get("round_cap", 5),
    )
    return PolicySpec(
        mode=mode,
        unmatched=unmatched,
        round_cap=round_cap,
        quorum=normalise_quorum(quorum) if quorum is not None else None,
        rules=specs,
    )
