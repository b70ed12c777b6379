"""A rule file's data checked and turned into specs: every offending field path with its reason, or a RuleSpec per rule
and a PolicySpec for the whole file.

Who saves a rule is part of what is checked: a `route` may only target a queue the writer supervises
(`access.can_supervise`; staff: any). `user=None` is the operator (`manage.py import_rules` without `--as`,
fixtures, the code's own calls): any existing queue."""

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import re2
from django.utils.dateparse import parse_datetime

from elicitation.models import Queue, QueueMode, RuleAction
from elicitation.queue import access
from elicitation.queue.errors import InvalidInput

OPERATORS = ("eq", "in", "lt", "lte", "gt", "gte", "regex")
MATCH_FIELDS = ("agent", "server", "tool", "message", "schema_fingerprint", "arguments")
RULE_KEYS = (
    "name",
    "enabled",
    "match",
    "action",
    "content",
    "queue",
    "priority",
    "deadline",
    "quorum",
    "expires_at",
)
POLICY_KEYS = ("mode", "unmatched", "round_cap", "quorum", "rules")
QUORUM_KEYS = ("approvals", "groups", "exclude_owner", "veto")
MAX_RULES = 5000
MAX_REGEX_LENGTH = 500
MAX_DEADLINE = 30 * 24 * 3600
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


def _condition_errors(spec: Any, path: str) -> dict[str, str]:
    if is_scalar(spec):
        return non_finite_paths(spec, path)
    if isinstance(spec, list):
        if not all(is_scalar(item) for item in spec):
            return {path: "a list condition holds only scalars"}
        return non_finite_paths(spec, path)
    if not isinstance(spec, dict) or not spec:
        return {path: "must be a value, a list of values or a mapping of operators"}
    errors: dict[str, str] = {}
    for op, operand in spec.items():
        where = f"{path}.{op}"
        if op not in OPERATORS:
            errors[where] = f"unknown operator; use one of {', '.join(OPERATORS)}"
        elif op == "eq" and not is_scalar(operand):
            errors[where] = "must be a string, number, boolean or null"
        elif op == "in" and not (isinstance(operand, list) and all(is_scalar(i) for i in operand)):
            errors[where] = "must be a list of strings, numbers or booleans"
        elif op in ("lt", "lte", "gt", "gte") and not is_number(operand):
            errors[where] = "must be a number"
        elif op in ("lt", "lte", "gt", "gte") and not is_finite_number(operand):
            errors[where] = FINITE
        elif op in ("eq", "in"):
            errors.update(non_finite_paths(operand, where))
        elif op == "regex":
            if not isinstance(operand, str) or len(operand) > MAX_REGEX_LENGTH:
                errors[where] = f"must be a regular expression of at most {MAX_REGEX_LENGTH} characters"
            elif (problem := regex_problem(operand)) is not None:
                errors[where] = problem
    return errors


def _match_errors(match: Any, path: str) -> dict[str, str]:
    if match is None:
        return {}
    if not isinstance(match, dict):
        return {path: "must be a mapping of " + ", ".join(MATCH_FIELDS)}
    errors: dict[str, str] = {}
    for key, spec in match.items():
        where = f"{path}.{key}"
        if key not in MATCH_FIELDS:
            errors[where] = "unknown field; match on " + ", ".join(MATCH_FIELDS)
        elif key == "arguments":
            if not isinstance(spec, dict):
                errors[where] = "must be a mapping of argument name to condition"
                continue
            for name, condition in spec.items():
                if not isinstance(name, str) or not name:
                    errors[where] = "argument names must be non-empty strings"
                errors.update(_condition_errors(condition, f"{where}.{name}"))
        else:
            errors.update(_condition_errors(spec, where))
    return errors


def quorum_errors(spec: Any, path: str) -> dict[str, str]:
    if not isinstance(spec, dict):
        return {path: "must be a mapping with approvals, groups, exclude_owner, veto"}
    errors = {f"{path}.{key}": "unknown field" for key in spec if key not in QUORUM_KEYS}
    approvals = spec.get("approvals", 1)
    if not isinstance(approvals, int) or isinstance(approvals, bool) or not 1 <= approvals <= 20:
        errors[f"{path}.approvals"] = "must be a whole number from 1 to 20"
        approvals = None
    groups = spec.get("groups", {})
    if not isinstance(groups, dict) or not all(
        isinstance(name, str) and name and isinstance(n, int) and not isinstance(n, bool) and n >= 1
        for name, n in groups.items()
    ):
        errors[f"{path}.groups"] = "must map group names to whole numbers of at least 1"
    elif approvals is not None and sum(groups.values()) > approvals:
        errors[f"{path}.approvals"] = f"must be at least the sum of the group counts ({sum(groups.values())})"
    if "exclude_owner" in spec and not isinstance(spec["exclude_owner"], bool):
        errors[f"{path}.exclude_owner"] = "must be true or false"
    if spec.get("veto", "any") not in ("any", "none"):
        errors[f"{path}.veto"] = "must be any (a decline or cancel ends the decision) or none"
    return errors


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


def route_target(slug: Any, user: Any) -> Queue | None:
    """The queue a route by `user` may target: an existing one they supervise (the operator, `user=None`: any)."""
    target = Queue.objects.filter(slug=slug).first() if isinstance(slug, str) else None
    if target is None or (user is not None and not access.can_supervise(user, target)):
        return None
    return target


def parse_rule(
    data: Any, path: str, *, queue: Queue, user: Any = None
) -> tuple[RuleSpec | None, dict[str, str]]:
    """A rule's data (YAML/JSON shape) as a RuleSpec, or the errors keyed by field path. `user` writes it (None:
    the operator), which decides where it may route."""
    if not isinstance(data, dict):
        return None, {path: "must be a mapping"}
    errors = {f"{path}.{key}": "unknown field" for key in data if key not in RULE_KEYS}
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        errors[f"{path}.name"] = "is required: a name of at most 200 characters"
    action = data.get("action")
    if action not in RuleAction.values:
        errors[f"{path}.action"] = "must be one of " + ", ".join(RuleAction.values)
    if not isinstance(data.get("enabled", True), bool):
        errors[f"{path}.enabled"] = "must be true or false"
    errors.update(_match_errors(data.get("match"), f"{path}.match"))
    content = data.get("content")
    if action == RuleAction.ACCEPT:
        if not isinstance(content, dict):
            errors[f"{path}.content"] = "is required with accept: the answer, as an object"
        else:
            errors.update(non_finite_paths(content, f"{path}.content"))
    elif "content" in data:
        errors[f"{path}.content"] = "only allowed with action accept"
    route_to = None
    if action == RuleAction.ROUTE:
        route_to = route_target(data.get("queue"), user)
        if route_to is None:
            errors[f"{path}.queue"] = ROUTE_TARGET
        elif route_to.pk == queue.pk:
            errors[f"{path}.queue"] = "must be another queue than this one"
    elif "queue" in data:
        errors[f"{path}.queue"] = "only allowed with action route"
    adjusts = (RuleAction.SET, RuleAction.ROUTE, RuleAction.REQUIRE_QUORUM)
    priority = data.get("priority")
    if priority is not None:
        if action not in adjusts:
            errors[f"{path}.priority"] = "only allowed with set, route or require_quorum"
        elif not isinstance(priority, int) or isinstance(priority, bool) or not -1000 <= priority <= 1000:
            errors[f"{path}.priority"] = "must be a whole number from -1000 to 1000"
    deadline = data.get("deadline")
    if deadline is not None:
        if action not in adjusts:
            errors[f"{path}.deadline"] = "only allowed with set, route or require_quorum"
        elif not isinstance(deadline, int) or isinstance(deadline, bool) or not 1 <= deadline <= MAX_DEADLINE:
            errors[f"{path}.deadline"] = f"must be a number of seconds from 1 to {MAX_DEADLINE}"
    if action == RuleAction.SET and priority is None and deadline is None:
        errors[f"{path}.action"] = "set needs a priority, a deadline or both"
    quorum = data.get("quorum")
    if action == RuleAction.REQUIRE_QUORUM:
        if quorum is None:
            errors[f"{path}.quorum"] = "is required with require_quorum"
        else:
            errors.update(quorum_errors(quorum, f"{path}.quorum"))
    elif quorum is not None:
        errors[f"{path}.quorum"] = "only allowed with action require_quorum"
    expires_at = data.get("expires_at")
    if expires_at is not None:
        parsed = parse_datetime(expires_at) if isinstance(expires_at, str) else expires_at
        if not isinstance(parsed, datetime) or parsed.tzinfo is None:
            errors[f"{path}.expires_at"] = "must be an ISO 8601 date-time with a time zone"
        expires_at = parsed
    if errors:
        return None, errors
    return RuleSpec(
        name=name.strip(),  # type: ignore[union-attr]
        action=str(action),
        match=dict(data.get("match") or {}),
        enabled=data.get("enabled", True),
        content=content if action == RuleAction.ACCEPT else None,
        route_to=route_to,
        priority=priority,
        deadline_seconds=deadline,
        quorum=normalise_quorum(quorum) if quorum is not None else None,
        expires_at=expires_at,
    ), {}


@dataclass
class PolicySpec:
    mode: str
    unmatched: str
    round_cap: int
    quorum: dict[str, Any] | None
    rules: list[RuleSpec]


def parse_policy(data: Any, *, queue: Queue, user: Any = None) -> PolicySpec:
    """A whole rule file, written by `user` (None: the operator); InvalidInput names every offending field path
    (`rules[2].match.tool.regex`)."""
    if not isinstance(data, dict):
        raise InvalidInput(
            "The rule file is not valid.", {"$": "must be a mapping with " + ", ".join(POLICY_KEYS)}
        )
    errors = {key: "unknown field" for key in data if key not in POLICY_KEYS}
    mode = data.get("mode", QueueMode.HUMAN)
    if mode not in QueueMode.values:
        errors["mode"] = "must be human or scripted"
    unmatched = data.get("unmatched", "decline")
    if unmatched not in ("decline", "pending"):
        errors["unmatched"] = "must be decline or pending"
    round_cap = data.get("round_cap", 5)
    if not isinstance(round_cap, int) or isinstance(round_cap, bool) or not 1 <= round_cap <= 100:
        errors["round_cap"] = "must be a whole number from 1 to 100"
    quorum = data.get("quorum")
    if quorum is not None:
        errors.update(quorum_errors(quorum, "quorum"))
    raw_rules = data.get("rules", [])
    specs: list[RuleSpec] = []
    if not isinstance(raw_rules, list):
        errors["rules"] = "must be a list"
    elif len(raw_rules) > MAX_RULES:
        errors["rules"] = f"at most {MAX_RULES} rules per queue"
    else:
        for index, raw in enumerate(raw_rules):
            spec, rule_errors = parse_rule(raw, f"rules[{index}]", queue=queue, user=user)
            errors.update(rule_errors)
            if spec is not None:
                specs.append(spec)
    if errors:
        raise InvalidInput("The rule file is not valid.", errors)
    return PolicySpec(
        mode=mode,
        unmatched=unmatched,
        round_cap=round_cap,
        quorum=normalise_quorum(quorum) if quorum is not None else None,
        rules=specs,
    )
