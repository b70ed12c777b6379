"""Fixtures for agent CI: what people answered, as rules a scripted queue replays."""

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from elicitation.models import ElicitationRequest, Queue, QueueMode, RuleAction
from elicitation.queue.audit import canonical_json
from elicitation.queue.rules.facts import context_call, schema_fingerprint
from elicitation.queue.rules.validation import is_scalar


def _flat_arguments(arguments: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Scalar arguments by dotted name (lists are left to the message and schema to tell apart)."""
    flat: dict[str, Any] = {}
    for name, value in arguments.items():
        path = f"{prefix}{name}"
        if isinstance(value, Mapping):
            flat.update(_flat_arguments(value, path + "."))
        elif is_scalar(value) and "." not in str(name):
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
            continue  # no rule accepts a URL-mode request (see engine.py, _content_problem)
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
