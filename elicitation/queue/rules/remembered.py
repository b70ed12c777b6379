"""Remembered decisions: an answer a person gave, turned into a rule that expires."""

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.contrib.auth.models import User

from elicitation.models import AnswerRule, ElicitationRequest, Queue, RuleAction
from elicitation.queue import clock
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.engine import CompiledRule, RuleUndecidable, compile_rules
from elicitation.queue.rules.facts import RequestFacts, context_call, request_facts, schema_fingerprint
from elicitation.queue.rules.storage import add_rule, rule_row
from elicitation.queue.rules.validation import parse_rule

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


def remember_decision(request: ElicitationRequest, data: Any, *, user: User) -> AnswerRule:
    """Save a remembered decision of a request a person answered (the rule data as `remembered_rule_data` made it,
    after the person confirmed the preview)."""
    if request.action not in (RuleAction.ACCEPT, RuleAction.DECLINE) or request.answered_by_id is None:
        raise InvalidInput(
            "Only an answer a person gave can be remembered.",
            {"request": "was not accepted or declined by a person"},
        )
    if request.action == RuleAction.ACCEPT and (request.policy or {}).get("step_up"):
        # A remembered accept would answer later requests with no passkey signature: each must be signed.
        raise InvalidInput(
            "An approval signed with a passkey is not remembered: each such request is signed anew.",
            {"request": "needed a passkey step-up"},
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
    compiled = compile_rules([rule_row(queue, spec, 0)]).rules[0]
    recent = list(
        ElicitationRequest.objects.select_related("agent").filter(queue=queue).order_by("-created_at")[:limit]
    )
    verdicts = [(row, _would_match(compiled, request_facts(row))) for row in recent]
    return sum(1 for _, hit in verdicts if hit), verdicts


def _would_match(rule: CompiledRule, facts: RequestFacts) -> bool:
    try:
        return rule.matches(facts)
    except RuleUndecidable:
        return False  # at intake such a request would wait for a person: the rule would not answer it


def remembered_decisions(queue: Queue) -> list[AnswerRule]:
    return list(
        AnswerRule.objects.filter(queue=queue, remembered_from__isnull=False)
        .select_related("created_by", "route_to")
        .order_by("-created_at")
    )
