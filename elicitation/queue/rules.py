"""Answer rules: a queue's policy as data. Ordered rules match a request on its agent, MCP server, tool, argument
values, schema fingerprint and message, and act: accept with given content, decline, cancel, route to another
queue, require a quorum, set priority or deadline.

A rule file (YAML, or the same shape as JSON through the API)::

    mode: human                 # or scripted: rules answer every request at once (agent CI)
    unmatched: decline          # scripted mode: decline what no rule answers (or leave it pending)
    round_cap: 5                # scripted mode: input-required rounds answered per tool call
    quorum: {approvals: 2, groups: {sre: 1}, exclude_owner: true, veto: any}
    rules:
      - name: read-only tools need nobody
        match: {tool: {in: [list_files, read_file]}}
        action: accept
        content: {approve: true}
      - name: large payments need two
        match: {tool: pay, arguments: {amount: {gt: 1000}}}
        action: require_quorum
        quorum: {approvals: 2}

A condition is a scalar (equals), a list (in) or a mapping of operators that must all hold: `eq`, `in`, `lt`,
`lte`, `gt`, `gte` (numbers only) and `regex` (strings only, searched). Evaluation walks the rules in order: `set`
and `require_quorum` apply and go on; `route` moves the request and continues with the target queue's rules;
`accept`, `decline` and `cancel` decide. An `accept` whose content does not satisfy the request's schema never
decides: it is skipped (and audited) and the walk goes on, so the request falls through to a person.

This module validates, compiles (cached per queue and rules version), evaluates and round-trips rules; the
transitions that apply a decision live in transitions.py.
"""

import hashlib
import operator
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from heapq import merge
from typing import Any

import yaml
from django.db import transaction
from django.utils.dateparse import parse_datetime

from elicitation.models import AnswerRule, ElicitationRequest, Queue, QueueMode, QueuePolicy, RuleAction
from elicitation.queue import clock, quorum, schemas, untrusted_json
from elicitation.queue.audit import canonical_json
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
MAX_ROUTE_HOPS = 5
MAX_REGEX_LENGTH = 500
MAX_DEADLINE = 30 * 24 * 3600


# --- what a request is, to a rule -----------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestFacts:
    agent: str
    message: str
    server: Any = None
    tool: Any = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    schema_fingerprint: str | None = None
    round: int | None = None


def _first(mapping: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        if key in mapping and mapping[key] is not None:
            return mapping[key]
    return None


def context_call(context: Any) -> tuple[Any, Any, dict[str, Any], int | None]:
    """(server, tool, arguments, input-required round) from a request's context, in the shapes the bridge
    (`context.mcp.{server, tool, arguments}`), the input-required runner (`context.mcp.params`) and hand-written
    agents (`context.{server, tool, arguments}`) send."""
    if not isinstance(context, dict):
        return None, None, {}, None
    mcp: dict[str, Any] = context["mcp"] if isinstance(context.get("mcp"), dict) else {}
    params: dict[str, Any] = mcp["params"] if isinstance(mcp.get("params"), dict) else {}
    server = _first(mcp, "server") or _first(context, "server", "mcpServer", "serverName", "mcp_server")
    tool = _first(mcp, "tool") or _first(params, "name") or _first(context, "tool", "toolName", "tool_name")
    arguments = (
        _first(mcp, "arguments")
        or _first(params, "arguments")
        or _first(context, "arguments", "args", "toolArguments")
    )
    round_no = mcp.get("round")
    return (
        server,
        tool,
        arguments if isinstance(arguments, dict) else {},
        round_no if isinstance(round_no, int) and not isinstance(round_no, bool) else None,
    )


def schema_fingerprint(requested_schema: Any) -> str | None:
    """A short stable name for a requestedSchema (key order and whitespace do not matter)."""
    if requested_schema is None:
        return None
    return hashlib.sha256(canonical_json({"s": requested_schema})).hexdigest()[:16]


def request_digest(message: str, requested_schema: Any, context: Any) -> str:
    """What a decision is bound to: the message, the schema and the tool's arguments. An MCP server compares it
    with its own to know an approval is for these exact arguments."""
    _, _, arguments, _ = context_call(context)
    body = {"message": message, "requestedSchema": requested_schema, "arguments": arguments}
    return "sha256:" + hashlib.sha256(canonical_json(body)).hexdigest()


def facts_of(agent_name: str, message: str, requested_schema: Any, context: Any) -> RequestFacts:
    server, tool, arguments, round_no = context_call(context)
    return RequestFacts(
        agent=agent_name,
        message=message,
        server=server,
        tool=tool,
        arguments=arguments,
        schema_fingerprint=schema_fingerprint(requested_schema),
        round=round_no,
    )


def request_facts(request: ElicitationRequest) -> RequestFacts:
    return facts_of(request.agent.name, request.message, request.requested_schema, request.context)


# --- validation: field path and reason for everything wrong ---------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def _condition_errors(spec: Any, path: str) -> dict[str, str]:
    if _is_scalar(spec):
        return {}
    if isinstance(spec, list):
        return {} if all(_is_scalar(item) for item in spec) else {path: "a list condition holds only scalars"}
    if not isinstance(spec, dict) or not spec:
        return {path: "must be a value, a list of values or a mapping of operators"}
    errors: dict[str, str] = {}
    for op, operand in spec.items():
        where = f"{path}.{op}"
        if op not in OPERATORS:
            errors[where] = f"unknown operator; use one of {', '.join(OPERATORS)}"
        elif op == "eq" and not _is_scalar(operand):
            errors[where] = "must be a string, number, boolean or null"
        elif op == "in" and not (isinstance(operand, list) and all(_is_scalar(i) for i in operand)):
            errors[where] = "must be a list of strings, numbers or booleans"
        elif op in ("lt", "lte", "gt", "gte") and not _is_number(operand):
            errors[where] = "must be a number"
        elif op == "regex":
            if not isinstance(operand, str) or len(operand) > MAX_REGEX_LENGTH:
                errors[where] = f"must be a regular expression of at most {MAX_REGEX_LENGTH} characters"
            else:
                try:
                    re.compile(operand)
                except re.error as exc:
                    errors[where] = f"is not a valid regular expression: {exc}"
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


def parse_rule(data: Any, path: str, *, queue: Queue) -> tuple[RuleSpec | None, dict[str, str]]:
    """A rule's data (YAML/JSON shape) as a RuleSpec, or the errors keyed by field path."""
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
    elif "content" in data:
        errors[f"{path}.content"] = "only allowed with action accept"
    route_to = None
    if action == RuleAction.ROUTE:
        slug = data.get("queue")
        route_to = Queue.objects.filter(slug=slug).first() if isinstance(slug, str) else None
        if route_to is None:
            errors[f"{path}.queue"] = "is required with route: the slug of an existing queue"
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


def parse_policy(data: Any, *, queue: Queue) -> PolicySpec:
    """A whole rule file; InvalidInput names every offending field path (`rules[2].match.tool.regex`)."""
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
            spec, rule_errors = parse_rule(raw, f"rules[{index}]", queue=queue)
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


# --- writing rules (each change bumps the queue's rules version, so cached compilations go stale) -------------


def policy_of(queue: Queue) -> QueuePolicy:
    policy, _ = QueuePolicy.objects.get_or_create(queue=queue)
    return policy


def new_rules_version() -> int:
    """A fresh stamp, not a counter: a queue deleted and made again (or a test database rolled back) reuses ids,
    and an incremented version could then name another queue's compiled rules."""
    return secrets.randbelow(2**31 - 2) + 1


def _bump(queue: Queue) -> None:
    policy_of(queue)
    QueuePolicy.objects.filter(queue=queue).update(rules_version=new_rules_version())


def _row(queue: Queue, spec: RuleSpec, position: int, user: Any = None) -> AnswerRule:
    return AnswerRule(
        queue=queue,
        position=position,
        name=spec.name,
        enabled=spec.enabled,
        match=spec.match,
        action=spec.action,
        content=spec.content,
        route_to=spec.route_to,
        priority=spec.priority,
        deadline_seconds=spec.deadline_seconds,
        quorum=spec.quorum,
        expires_at=spec.expires_at,
        created_by=user if user is not None and user.is_authenticated else None,
    )


def replace_policy(queue: Queue, data: Any, *, user: Any = None) -> QueuePolicy:
    """Import a rule file: the queue's policy and rules become exactly what it says (remembered decisions stay)."""
    spec = parse_policy(data, queue=queue)
    with transaction.atomic():
        policy = policy_of(queue)
        QueuePolicy.objects.filter(pk=policy.pk).update(
            mode=spec.mode,
            unmatched=spec.unmatched,
            round_cap=spec.round_cap,
            quorum=spec.quorum,
            rules_version=new_rules_version(),
        )
        AnswerRule.objects.filter(queue=queue, remembered_from__isnull=True).delete()
        AnswerRule.objects.bulk_create(
            [_row(queue, rule, (index + 1) * 10, user) for index, rule in enumerate(spec.rules)]
        )
        policy.refresh_from_db()
    return policy


def add_rule(
    queue: Queue, data: Any, *, user: Any = None, remembered_from: ElicitationRequest | None = None
) -> AnswerRule:
    """Append one rule (after the queue's last), or raise InvalidInput with field paths under `rule`."""
    spec, errors = parse_rule(data, "rule", queue=queue)
    if spec is None:
        raise InvalidInput("The rule is not valid.", errors)
    with transaction.atomic():
        last = (
            AnswerRule.objects.filter(queue=queue)
            .order_by("-position")
            .values_list("position", flat=True)
            .first()
        )
        row = _row(queue, spec, (last or 0) + 10, user)
        row.remembered_from = remembered_from
        row.save()
        _bump(queue)
    return row


def update_rule(rule: AnswerRule, data: Any) -> AnswerRule:
    spec, errors = parse_rule(data, "rule", queue=rule.queue)
    if spec is None:
        raise InvalidInput("The rule is not valid.", errors)
    with transaction.atomic():
        fresh = _row(rule.queue, spec, rule.position)
        for name in (
            "name",
            "enabled",
            "match",
            "action",
            "content",
            "route_to",
            "priority",
            "deadline_seconds",
        ):
            setattr(rule, name, getattr(fresh, name))
        rule.quorum, rule.expires_at = fresh.quorum, fresh.expires_at
        rule.save()
        _bump(rule.queue)
    return rule


def revoke_rule(rule: AnswerRule) -> AnswerRule:
    """Stop a rule from deciding from now on (kept, so the audit rows that name it still point somewhere)."""
    with transaction.atomic():
        if rule.revoked_at is None:
            rule.revoked_at = clock.now()
            rule.save(update_fields=["revoked_at"])
        _bump(rule.queue)
    return rule


def delete_rule(rule: AnswerRule) -> None:
    with transaction.atomic():
        queue = rule.queue
        rule.delete()
        _bump(queue)


def rules_changed(queue: Queue) -> None:
    """For the admin, which saves rows itself: compiled copies of this queue's rules are stale now."""
    _bump(queue)


# --- export: the rule file, as data and as YAML ----------------------------------------------------------------


def rule_data(rule: AnswerRule) -> dict[str, Any]:
    data: dict[str, Any] = {"name": rule.name}
    if not rule.enabled:
        data["enabled"] = False
    if rule.match:
        data["match"] = rule.match
    data["action"] = rule.action
    if rule.content is not None:
        data["content"] = rule.content
    if rule.route_to is not None:
        data["queue"] = rule.route_to.slug
    if rule.priority is not None:
        data["priority"] = rule.priority
    if rule.deadline_seconds is not None:
        data["deadline"] = rule.deadline_seconds
    if rule.quorum is not None:
        data["quorum"] = rule.quorum
    if rule.expires_at is not None:
        data["expires_at"] = rule.expires_at.isoformat()
    return data


def policy_data(queue: Queue) -> dict[str, Any]:
    """The queue's rule file: policy and its own rules in order (remembered decisions are listed elsewhere)."""
    policy = QueuePolicy.objects.filter(queue=queue).first()
    data: dict[str, Any] = {
        "mode": str(policy.mode) if policy else QueueMode.HUMAN.value,
        "unmatched": policy.unmatched if policy else "decline",
        "round_cap": policy.round_cap if policy else 5,
    }
    if policy is not None and policy.quorum:
        data["quorum"] = policy.quorum
    rows = AnswerRule.objects.filter(queue=queue, remembered_from__isnull=True, revoked_at__isnull=True)
    data["rules"] = [rule_data(rule) for rule in rows.select_related("route_to").order_by("position", "id")]
    return data


def dump_yaml(data: Mapping[str, Any]) -> str:
    return str(yaml.safe_dump(dict(data), sort_keys=False, allow_unicode=True, width=100))


def load_yaml(text: str) -> Any:
    """A rule file's text as data. YAML syntax errors name the line; aliases (`*ref`, the billion-laughs door)
    are refused, and the result passes the same checks as any JSON body (depth, lone surrogates)."""
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.AliasEvent):
                raise InvalidInput(
                    "The rule file is not valid.", {"$": "YAML aliases (*name) are not accepted"}
                )
        data = yaml.safe_load(text)
        untrusted_json.check(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "the file"
        raise InvalidInput("The rule file is not valid YAML.", {"$": f"YAML error at {where}"}) from None
    except RecursionError:
        raise InvalidInput("The rule file is not valid.", {"$": "nested too deeply"}) from None
    except untrusted_json.JSONRefused as refused:
        raise InvalidInput("The rule file is not valid.", {refused.path or "$": refused.reason}) from None
    return data


# --- compiling and evaluating ----------------------------------------------------------------------------------


def _equals(spec: Any) -> Any:
    """Equality that keeps JSON's types apart: true is not 1, "5" is not 5, but 5 is 5.0."""
    if spec is None or isinstance(spec, bool):
        return lambda value: value is spec
    if isinstance(spec, str):
        return lambda value: value == spec
    return lambda value: value == spec and _is_number(value)


def _one_of(options: list[Any]) -> Any:
    strings = frozenset(o for o in options if isinstance(o, str))
    others = [_equals(o) for o in options if not isinstance(o, str)]
    if not others:
        return lambda value: isinstance(value, str) and value in strings
    return lambda value: (
        (isinstance(value, str) and value in strings) or any(check(value) for check in others)
    )


COMPARISONS = {
    "lt": operator.lt,
    "lte": operator.le,
    "gt": operator.gt,
    "gte": operator.ge,
}


def _compile_condition(spec: Any) -> Any:
    """A predicate over one value (None when the value is absent)."""
    if _is_scalar(spec):
        return _equals(spec)
    if isinstance(spec, list):
        return _one_of(spec)
    checks = []
    for op, operand in spec.items():
        if op in ("eq", "in"):
            checks.append(_compile_condition(operand))
        elif op == "regex":
            search = re.compile(operand).search
            checks.append(lambda value, search=search: isinstance(value, str) and search(value) is not None)
        else:
            compare = COMPARISONS[op]
            checks.append(lambda value, c=compare, o=operand: _is_number(value) and c(value, o))
    if len(checks) == 1:
        return checks[0]
    return lambda value: all(check(value) for check in checks)


def _argument(arguments: Mapping[str, Any], name: str) -> tuple[bool, Any]:
    value: Any = arguments
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return False, None
        value = value[part]
    return True, value


@dataclass
class CompiledRule:
    row: AnswerRule
    checks: list[tuple[str, Any]]
    arguments: list[tuple[str, Any]]

    @property
    def ref(self) -> dict[str, Any]:
        return {
            "id": self.row.pk,
            "name": self.row.name,
            "position": self.row.position,
            "action": self.row.action,
        }

    def live(self, now: datetime) -> bool:
        return self.row.expires_at is None or self.row.expires_at > now

    def matches(self, facts: RequestFacts) -> bool:
        for name, check in self.checks:
            if not check(getattr(facts, name)):
                return False
        arguments = facts.arguments
        for name, check in self.arguments:
            if name in arguments:  # the common case: a top-level argument
                if not check(arguments[name]):
                    return False
                continue
            present, value = _argument(arguments, name)
            if not present or not check(value):
                return False
        return True


@dataclass
class CompiledRules:
    rules: list[CompiledRule]
    by_tool: dict[str, list[int]]
    any_tool: list[int]

    def candidates(self, tool: Any) -> Iterable[CompiledRule]:
        """Rules that may match a call of `tool`, in order: those naming the tool and those naming none."""
        named = self.by_tool.get(tool, []) if isinstance(tool, str) else []
        for index in merge(named, self.any_tool):
            yield self.rules[index]


def compile_rules(rows: Iterable[AnswerRule]) -> CompiledRules:
    compiled: list[CompiledRule] = []
    by_tool: dict[str, list[int]] = {}
    any_tool: list[int] = []
    for index, row in enumerate(rows):
        match = row.match or {}
        checks = [(key, _compile_condition(spec)) for key, spec in match.items() if key != "arguments"]
        arguments = [
            (name, _compile_condition(spec)) for name, spec in (match.get("arguments") or {}).items()
        ]
        compiled.append(CompiledRule(row, checks, arguments))
        tool = match.get("tool")
        tools = [tool] if isinstance(tool, str) else tool if isinstance(tool, list) else None
        if isinstance(tool, dict) and set(tool) <= {"eq", "in"}:
            tools = [tool["eq"]] if "eq" in tool else list(tool["in"])
        if tools is not None and all(isinstance(t, str) for t in tools):
            for name in set(tools):
                by_tool.setdefault(name, []).append(index)
        else:
            any_tool.append(index)
    return CompiledRules(compiled, by_tool, any_tool)


_compiled: dict[tuple[int, int], CompiledRules] = {}


def compiled_rules(queue_id: int, version: int) -> CompiledRules:
    """The queue's live rules, compiled once per process and rules version."""
    key = (queue_id, version)
    found = _compiled.get(key)
    if found is None:
        rows = (
            AnswerRule.objects.filter(queue_id=queue_id, enabled=True, revoked_at__isnull=True)
            .select_related("route_to")
            .order_by("position", "id")
        )
        found = compile_rules(rows)
        if len(_compiled) > 256:
            _compiled.clear()
        _compiled[key] = found
    return found


@dataclass
class IntakeDecision:
    """What the rules made of a request before it is stored: where it goes, how urgent, who must decide, and
    whether a rule already decided (`outcome`)."""

    queue: Queue
    policy: QueuePolicy | None
    priority: int | None = None
    deadline_seconds: int | None = None
    quorum: dict[str, Any] | None = None
    outcome: tuple[str, dict[str, Any] | None, dict[str, Any]] | None = None
    unmatched_reason: str | None = None
    audit: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    digest: str = ""

    @property
    def request_policy(self) -> dict[str, Any] | None:
        """The request's `policy` column: the quorum it needs and the digest it is bound to, or None."""
        if self.quorum is None:
            return None
        return quorum.initial_state(self.quorum, self.digest)


def intake_decision(
    queue: Queue,
    agent: Any,
    message: str,
    mode: str,
    requested_schema: Any,
    context: Any,
    questions: list[dict[str, Any]],
) -> IntakeDecision | None:
    """What the queue's policy makes of a request about to be stored; None for a queue without one (the
    common case costs no query: the policy comes with the queue)."""
    if queue_policy(queue) is None:
        return None
    facts = facts_of(agent.name, message, requested_schema, context)
    decision = decide_at_intake(
        queue, facts=facts, questions=schemas.questions_from_json(questions) if mode == "form" else None
    )
    decision.digest = request_digest(message, requested_schema if mode == "form" else None, context)
    return decision


def request_digest_of(request: ElicitationRequest) -> str:
    return request_digest(request.message, request.requested_schema, request.context)


def queue_policy(queue: Queue) -> QueuePolicy | None:
    """The policy loaded with the queue (select_related("policy")), without another query when there is none."""
    return getattr(queue, "policy", None)


def decide_at_intake(
    queue: Queue,
    *,
    facts: RequestFacts,
    questions: list[schemas.Question] | None,
) -> IntakeDecision:
    """Walk the queue's rules (and those of queues they route to) for a request about to be stored."""
    decision = IntakeDecision(queue=queue, policy=queue_policy(queue))
    visited = {queue.pk}
    now = clock.now()
    while True:
        policy = decision.policy
        routed_to: Queue | None = None
        if policy is not None and policy.rules_version:
            for rule in compiled_rules(decision.queue.pk, policy.rules_version).candidates(facts.tool):
                if not rule.live(now) or not rule.matches(facts):
                    continue
                row = rule.row
                if row.action == RuleAction.SET:
                    _adjust(decision, row)
                    decision.audit.append(("rule_applied", {"rule": rule.ref, **_adjusted(row)}))
                elif row.action == RuleAction.REQUIRE_QUORUM:
                    _adjust(decision, row)
                    if decision.quorum is None:
                        decision.quorum = {**(row.quorum or {}), "source": {"rule": rule.ref}}
                    decision.audit.append(("rule_applied", {"rule": rule.ref, "quorum": row.quorum}))
                elif row.action == RuleAction.ROUTE:
                    target = row.route_to
                    if target is None or target.pk in visited or len(visited) > MAX_ROUTE_HOPS:
                        decision.audit.append(("rule_skipped", {"rule": rule.ref, "reason": "route loop"}))
                        continue
                    _adjust(decision, row)
                    decision.audit.append(
                        (
                            "routed",
                            {"rule": rule.ref, "from_queue": decision.queue.slug, "to_queue": target.slug},
                        )
                    )
                    routed_to = target
                    break
                else:
                    content = row.content if row.action == RuleAction.ACCEPT else None
                    problem = _content_problem(row, questions) if row.action == RuleAction.ACCEPT else None
                    if problem is not None:
                        decision.audit.append(("rule_skipped", {"rule": rule.ref, "reason": problem}))
                        continue
                    decision.outcome = (row.action, content, rule.ref)
                    break
        if routed_to is None:
            break
        visited.add(routed_to.pk)
        decision.queue = Queue.objects.select_related("policy").get(pk=routed_to.pk)
        decision.policy = queue_policy(decision.queue)
    policy = decision.policy
    if decision.quorum is None and policy is not None and policy.quorum:
        decision.quorum = {**policy.quorum, "source": "queue"}
    if policy is not None and policy.mode == QueueMode.SCRIPTED:
        if facts.round is not None and facts.round > policy.round_cap:
            # The 2026-07-28 runner's cap: a tool that keeps asking gets a decline, not an endless loop.
            decision.outcome = None
            decision.unmatched_reason = (
                f"input-required round {facts.round} is past the queue's cap of {policy.round_cap}"
            )
        elif decision.outcome is None and policy.unmatched == "decline":
            decision.unmatched_reason = (
                f"no rule of scripted queue {decision.queue.slug!r} matches this request"
            )
    return decision


def _adjust(decision: IntakeDecision, row: AnswerRule) -> None:
    if row.priority is not None:
        decision.priority = row.priority
    if row.deadline_seconds is not None:
        decision.deadline_seconds = row.deadline_seconds


def _adjusted(row: AnswerRule) -> dict[str, Any]:
    return {
        **({"priority": row.priority} if row.priority is not None else {}),
        **({"deadline": row.deadline_seconds} if row.deadline_seconds is not None else {}),
    }


def _content_problem(row: AnswerRule, questions: list[schemas.Question] | None) -> str | None:
    if questions is None:
        # URL mode: accept means the person finished the page (or a hosted flow got its secret); no rule knows that.
        return "a URL-mode request is accepted by finishing its page, never by a rule"
    try:
        schemas.validate_content(questions, row.content or {})
    except schemas.AnswerInvalid as exc:
        shown = "; ".join(f"{key}: {reason}" for key, reason in list(exc.errors.items())[:3])
        return f"content does not satisfy the request's schema ({shown})"
    return None


# --- remembered decisions: an answer a person gave, turned into a rule that expires ----------------------------


REMEMBER_OPERATORS = ("any", "eq", "lte", "gte")


def remembered_rule_data(
    request: ElicitationRequest, *, arguments: Mapping[str, tuple[str, Any]], days: int
) -> dict[str, Any]:
    """The rule a remembered decision would be: this agent, this MCP server and tool, this form, the answer the
    person gave, and per argument a condition (`any`, `eq`, `lte`, `gte` with a value)."""
    server, tool, _, _ = context_call(request.context)
    match: dict[str, Any] = {"agent": request.agent.name}
    if server is not None:
        match["server"] = server
    if tool is not None:
        match["tool"] = tool
    fingerprint = schema_fingerprint(request.requested_schema)
    if fingerprint is not None:
        match["schema_fingerprint"] = fingerprint
    conditions = {
        name: ({"eq": value} if op == "eq" else {op: value})
        for name, (op, value) in arguments.items()
        if op != "any"
    }
    if conditions:
        match["arguments"] = conditions
    data: dict[str, Any] = {
        "name": f"Remembered: {request.action} {tool or 'request'} for {request.agent.name}",
        "match": match,
        "action": request.action,
        "expires_at": (clock.now() + timedelta(days=days)).isoformat(),
    }
    if request.action == RuleAction.ACCEPT:
        data["content"] = request.content or {}
    return data


def remember_decision(request: ElicitationRequest, data: Any, *, user: Any) -> AnswerRule:
    """Save a remembered decision of a request a person answered (the rule data as `remembered_rule_data` made it,
    after the person confirmed the preview)."""
    if request.action not in (RuleAction.ACCEPT, RuleAction.DECLINE) or request.answered_by_id is None:
        raise InvalidInput(
            "Only an answer a person gave can be remembered.",
            {"request": "was not accepted or declined by a person"},
        )
    if not isinstance(data, dict) or data.get("expires_at") is None:
        raise InvalidInput("A remembered decision expires.", {"expires_at": "is required"})
    return add_rule(request.queue, data, user=user, remembered_from=request)


def preview_matches(
    queue: Queue, data: Any, *, limit: int = 200
) -> tuple[int, list[tuple[ElicitationRequest, bool]]]:
    """Which of the queue's latest requests a rule would match (ignoring its action's validity checks): the
    count and each request with its verdict, newest first."""
    spec, errors = parse_rule(data, "rule", queue=queue)
    if spec is None:
        raise InvalidInput("The rule is not valid.", errors)
    compiled = compile_rules([_row(queue, spec, 0)]).rules[0]
    recent = list(
        ElicitationRequest.objects.select_related("agent").filter(queue=queue).order_by("-created_at")[:limit]
    )
    verdicts = [(row, compiled.matches(request_facts(row))) for row in recent]
    return sum(1 for _, hit in verdicts if hit), verdicts


def remembered_decisions(queue: Queue) -> list[AnswerRule]:
    return list(
        AnswerRule.objects.filter(queue=queue, remembered_from__isnull=False)
        .select_related("created_by", "route_to")
        .order_by("-created_at")
    )


# --- fixtures for agent CI: what people answered, as rules a scripted queue replays ---------------------------


def _flat_arguments(arguments: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar arguments by dotted name (lists are left to the message and schema to tell apart)."""
    flat: dict[str, Any] = {}
    for name, value in arguments.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flat_arguments(value, path + "."))
        elif _is_scalar(value) and "." not in str(name):
            flat[path] = {"eq": value}
    return flat


def fixture_from_answers(queue: Queue, *, since: datetime | None = None) -> dict[str, Any]:
    """A rule file for a scripted queue: one rule per distinct request people answered in `queue` (oldest first;
    of two answers to the same request, the first is kept), matching it exactly (tool, server, schema fingerprint,
    message, scalar arguments) and giving the same answer."""
    answered = (
        ElicitationRequest.objects.filter(queue=queue, status="completed", answered_by__isnull=False)
        .select_related("agent")
        .order_by("closed_at", "created_at")
    )
    if since is not None:
        answered = answered.filter(closed_at__gte=since)
    seen: set[bytes] = set()
    fixture_rules: list[dict[str, Any]] = []
    for request in answered:
        if request.mode == "url" and request.action == RuleAction.ACCEPT:
            continue  # no rule accepts a URL-mode request (see _content_problem)
        server, tool, arguments, _ = context_call(request.context)
        match: dict[str, Any] = {}
        if isinstance(server, str):
            match["server"] = server
        if isinstance(tool, str):
            match["tool"] = tool
        fingerprint = schema_fingerprint(request.requested_schema)
        if fingerprint is not None:
            match["schema_fingerprint"] = fingerprint
        match["message"] = {"eq": request.message}
        flat = _flat_arguments(arguments)
        if flat:
            match["arguments"] = flat
        key = canonical_json(match)
        if key in seen:
            continue
        seen.add(key)
        rule: dict[str, Any] = {
            "name": f"recorded {request.closed_at:%Y-%m-%d %H:%M:%S} {tool or request.mode} {request.action}",
            "match": match,
            "action": request.action,
        }
        if request.action == RuleAction.ACCEPT:
            rule["content"] = request.content or {}
        fixture_rules.append(rule)
    return {"mode": QueueMode.SCRIPTED.value, "unmatched": "decline", "round_cap": 5, "rules": fixture_rules}
