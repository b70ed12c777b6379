"""Compiling rules (cached per queue and rules version) and walking them for a request about to be stored: what the
rules make of it, as an IntakeDecision; the transitions that apply a decision live in transitions.py.

A rule the engine cannot evaluate or apply for this request never decides and never lets a later rule decide: the
walk stops there, audited, and the request waits for whoever answers the queue's unmatched requests (a person, or
a scripted queue's `unmatched`). That covers a route into a queue the request's agent may not post to, a regex
over a value longer than MAX_MATCHED_CHARS, and a stored regex RE2 cannot compile (saved before rules ran on it).
"""

import logging
import operator
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from heapq import merge
from typing import Any

import re2

from elicitation.models import AnswerRule, Queue, QueueMode, QueuePolicy, RuleAction
from elicitation.queue import access, clock, quorum, schemas
from elicitation.queue.rules.facts import RequestFacts, facts_of, request_digest
from elicitation.queue.rules.storage import queue_policy
from elicitation.queue.rules.validation import compile_pattern, is_number, is_scalar

logger = logging.getLogger(__name__)

MAX_ROUTE_HOPS = 5
# A regex reads at most this much of a value. RE2 is linear, but linear in 256 KB of arguments times a few
# thousand rules is still seconds per request. A longer value is not cut and matched: a prefix can satisfy
# `^…$` or hide what a decline rule looks for, so the rule cannot tell and the request goes to a person.
MAX_MATCHED_CHARS = 4096


class RuleUndecidable(Exception):
    """A rule cannot tell whether it matches this request; `reason` goes to the audit row."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _equals(spec: Any) -> Any:
    """Equality that keeps JSON's types apart: true is not 1, "5" is not 5, but 5 is 5.0."""
    if spec is None or isinstance(spec, bool):
        return lambda value: value is spec
    if isinstance(spec, str):
        return lambda value: value == spec
    return lambda value: value == spec and is_number(value)


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


def _searches(pattern: str) -> Any:
    """A predicate: the value is a string in which `pattern` is found (searched, not anchored, as ever)."""
    try:
        search = compile_pattern(pattern).search
    except re2.error:
        logger.warning("a stored rule regex RE2 cannot compile holds its requests for a person: %r", pattern)

        def uncompiled(value: Any) -> bool:
            if not isinstance(value, str):
                return False
            raise RuleUndecidable(
                "its regex is not one RE2 runs (saved before rules ran on RE2); fix the rule"
            )

        return uncompiled

    def found(value: Any) -> bool:
        if not isinstance(value, str):
            return False
        if len(value) > MAX_MATCHED_CHARS:
            raise RuleUndecidable(
                f"a regex is not matched against a value over {MAX_MATCHED_CHARS} characters"
            )
        return search(value) is not None

    return found


def _compile_condition(spec: Any) -> Any:
    """A predicate over one value (None when the value is absent)."""
    if is_scalar(spec):
        return _equals(spec)
    if isinstance(spec, list):
        return _one_of(spec)
    checks = []
    for op, operand in spec.items():
        if op in ("eq", "in"):
            checks.append(_compile_condition(operand))
        elif op == "regex":
            checks.append(_searches(operand))
        else:
            compare = COMPARISONS[op]
            checks.append(lambda value, c=compare, o=operand: is_number(value) and c(value, o))
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
    # (is_argument, name, predicate), those with a regex last (`_regex_last`): a request's fact or argument.
    conditions: list[tuple[bool, str, Any]]

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
        arguments = facts.arguments
        for is_argument, name, check in self.conditions:
            if not is_argument:
                if not check(getattr(facts, name)):
                    return False
            elif name in arguments:  # the common case: a top-level argument
                if not check(arguments[name]):
                    return False
            else:
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


def _regex_last(conditions: Iterable[tuple[bool, str, Any]]) -> list[tuple[bool, str, Any]]:
    """Conditions (is_argument, name, spec) in their order, those with a regex moved last, facts' and arguments'
    alike: the cheap ones rule most requests out first, and a value too long for a regex holds a request only when
    everything else about the rule matched."""
    return sorted(conditions, key=lambda item: isinstance(item[2], dict) and "regex" in item[2])


def compile_rules(rows: Iterable[AnswerRule]) -> CompiledRules:
    compiled: list[CompiledRule] = []
    by_tool: dict[str, list[int]] = {}
    any_tool: list[int] = []
    for index, row in enumerate(rows):
        match = row.match or {}
        facts = [(False, key, spec) for key, spec in match.items() if key != "arguments"]
        arguments = [(True, name, spec) for name, spec in (match.get("arguments") or {}).items()]
        conditions = [
            (is_argument, name, _compile_condition(spec))
            for is_argument, name, spec in _regex_last(facts + arguments)
        ]
        compiled.append(CompiledRule(row, conditions))
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
    step_up: str = ""  # "passkey" when a matched rule says each approver signs with a passkey
    outcome: tuple[str, dict[str, Any] | None, dict[str, Any]] | None = None
    unmatched_reason: str | None = None
    held_reason: str | None = None  # a rule could not be evaluated or applied: the walk stopped there
    audit: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    digest: str = ""

    @property
    def writes_more(self) -> bool:
        """Whether applying it writes more than the request and its `created` row: audit rows or a decision."""
        return bool(self.audit) or self.outcome is not None or self.unmatched_reason is not None

    @property
    def request_policy(self) -> dict[str, Any] | None:
        """The request's `policy` column: the quorum it needs, the step-up its approvers owe and the digest it is
        bound to, or None."""
        if self.quorum is None and not self.step_up:
            return None
        state = (
            quorum.initial_state(self.quorum, self.digest)
            if self.quorum is not None
            else {"digest": self.digest}
        )
        return {**state, "step_up": self.step_up} if self.step_up else state


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
        queue,
        agent_id=agent.pk,
        facts=facts,
        questions=schemas.questions_from_json(questions) if mode == "form" else None,
    )
    decision.digest = request_digest(message, requested_schema if mode == "form" else None, context)
    return decision


def _matches(rule: CompiledRule, facts: RequestFacts, decision: IntakeDecision) -> bool:
    """Whether the rule matches; a rule that cannot tell holds the request (audited) and matches nothing."""
    try:
        return rule.matches(facts)
    except RuleUndecidable as undecidable:
        decision.held_reason = undecidable.reason
        decision.audit.append(("rule_skipped", {"rule": rule.ref, "reason": undecidable.reason}))
        return False


def decide_at_intake(
    queue: Queue,
    *,
    agent_id: int,
    facts: RequestFacts,
    questions: list[schemas.Question] | None,
) -> IntakeDecision:
    """Walk the queue's rules (and those of queues they route to) for a request of agent `agent_id` about to be
    stored."""
    decision = IntakeDecision(queue=queue, policy=queue_policy(queue))
    visited = {queue.pk}
    now = clock.now()
    while True:
        policy = decision.policy
        routed_to: Queue | None = None
        if policy is not None and policy.rules_version:
            for rule in compiled_rules(decision.queue.pk, policy.rules_version).candidates(facts.tool):
                if not rule.live(now) or not _matches(rule, facts, decision):
                    if decision.held_reason is not None:
                        break
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
                    # Where the agent could not post, its rules cannot send it (nor another team's reviewers
                    # its work): checked here too, since a rule saved long ago outlives the agent's scope.
                    reachable = access.postable_queue_by_id(agent_id, target.pk)
                    if reachable is None:
                        decision.held_reason = (
                            f"route refused: this agent may not post to queue {target.slug!r}; the request "
                            f"stays in {decision.queue.slug!r}"
                        )
                        decision.audit.append(
                            ("rule_skipped", {"rule": rule.ref, "reason": decision.held_reason})
                        )
                        break
                    _adjust(decision, row)
                    decision.audit.append(
                        (
                            "routed",
                            {"rule": rule.ref, "from_queue": decision.queue.slug, "to_queue": target.slug},
                        )
                    )
                    routed_to = reachable
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
        decision.queue = routed_to
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
            decision.unmatched_reason = decision.held_reason or (
                f"no rule of scripted queue {decision.queue.slug!r} matches this request"
            )
    return decision


def _adjust(decision: IntakeDecision, row: AnswerRule) -> None:
    if row.step_up:
        decision.step_up = row.step_up
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
