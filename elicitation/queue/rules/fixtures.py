"""Fixtures for agent CI: what people answered, as rules a scripted queue replays.

A recorded tool call is matched on what it is: server, tool, form and arguments. Its message is left out, since a
tool's question often embeds what changes from run to run (a timestamp, a request id); arguments named in
`ignore_arguments` are left out too. The message stays a condition only when nothing else tells requests apart: no
tool is named, or an argument has no condition that can name it (a list, a key with a dot in it)."""

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from elicitation.models import ElicitationRequest, Queue, QueueMode, RuleAction
from elicitation.queue.audit import canonical_json
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.facts import context_call, schema_fingerprint
from elicitation.queue.rules.validation import is_scalar

ARGUMENT_NAME = "argument names must be non-empty strings"  # the rules' own reason (validation._match_errors)


def ignored_argument_names(names: Any) -> frozenset[str]:
    """`ignore_arguments` checked as a rule file's argument names are: a list of non-empty strings, dotted for a
    nested argument. InvalidInput names each offending entry by path (`ignore_arguments[1]`)."""
    if names is None:
        return frozenset()
    if not isinstance(names, (list, tuple)):
        raise InvalidInput(
            "The fixture options are not valid.", {"ignore_arguments": "must be a list of argument names"}
        )
    errors = {
        f"ignore_arguments[{index}]": ARGUMENT_NAME
        for index, name in enumerate(names)
        if not isinstance(name, str) or not name.strip() or any(not part for part in name.split("."))
    }
    if errors:
        raise InvalidInput("The fixture options are not valid.", errors)
    return frozenset(name.strip() for name in names)


def _is_ignored(path: str, ignored: frozenset[str]) -> bool:
    """`path` is ignored when it or an argument it is nested in is named."""
    parts = path.split(".")
    return any(".".join(parts[:end]) in ignored for end in range(1, len(parts) + 1))


def _argument_conditions(
    arguments: Mapping[str, Any], ignored: frozenset[str], prefix: str = ""
) -> tuple[dict[str, Any], bool]:
    """Scalar arguments by dotted name, each with an `eq` condition, and whether every argument not ignored got
    one (a list, or a name no dotted path can reach, has none)."""
    conditions: dict[str, Any] = {}
    complete = True
    for name, value in arguments.items():
        path = f"{prefix}{name}"
        if _is_ignored(path, ignored):
            continue
        if not isinstance(name, str) or not name or "." in name:
            complete = False  # no condition can name it: the engine splits names at dots
        elif isinstance(value, Mapping):
            nested, nested_complete = _argument_conditions(value, ignored, path + ".")
            conditions.update(nested)
            complete = complete and nested_complete
        elif is_scalar(value):
            conditions[path] = {"eq": value}
        else:
            complete = False
    return conditions, complete


def fixture_match(request: ElicitationRequest, ignored: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The conditions that replay `request`: server, tool, schema fingerprint and arguments (less the ignored
    ones); its exact message only when those cannot tell it from another request."""
    server, tool, arguments, _ = context_call(request.context)
    match: dict[str, Any] = {}
    if isinstance(server, str):
        match["server"] = server
    if isinstance(tool, str):
        match["tool"] = tool
    fingerprint = schema_fingerprint(request.requested_schema)
    if fingerprint is not None:
        match["schema_fingerprint"] = fingerprint
    conditions, complete = _argument_conditions(arguments, ignored)
    if not isinstance(tool, str) or not complete:
        match["message"] = {"eq": request.message}
    if conditions:
        match["arguments"] = conditions
    return match


def fixture_from_answers(
    queue: Queue, *, since: datetime | None = None, ignore_arguments: Iterable[str] | None = None
) -> dict[str, Any]:
    """A rule file for a scripted queue: one rule per distinct call people answered in `queue` (oldest first; of
    two answers to the same call, the first is kept), matching it by `fixture_match` and giving the same
    answer. `ignore_arguments` names arguments that differ from run to run (`timestamp`, `meta.request_id`)."""
    ignored = ignored_argument_names(list(ignore_arguments) if ignore_arguments is not None else None)
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
        match = fixture_match(request, ignored)
        key = canonical_json(match)
        if key in seen:
            continue
        seen.add(key)
        tool = match.get("tool")
        rule: dict[str, Any] = {
            "name": f"recorded {request.closed_at:%Y-%m-%d %H:%M:%S} {str(tool or request.mode)[:120]} {request.action}",
            "match": match,
            "action": request.action,
        }
        if request.action == RuleAction.ACCEPT:
            rule["content"] = request.content or {}
        fixture_rules.append(rule)
    return {"mode": QueueMode.SCRIPTED.value, "unmatched": "decline", "round_cap": 5, "rules": fixture_rules}
