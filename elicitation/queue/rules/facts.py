"""What a request is, to a rule: the facts a rule matches on (agent, MCP server, tool, arguments, schema
fingerprint, message, input-required round), read from a request's context, and the digest a decision is bound to.
"""

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import rfc8785

from elicitation.models import ElicitationRequest, Mode
from elicitation.queue import untrusted_json
from elicitation.queue.audit import canonical_json


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


# RFC 8785 numbers are IEEE-754 doubles; `rfc8785` refuses integers beyond 2**53 - 1 rather than round them.
_EXACT_INTEGER_LIMIT = 2**53 - 1


def _as_jcs_value(value: Any) -> Any:
    """The value as a JSON parser that reads numbers as doubles (JavaScript's JSON.parse) sees it: an integer
    beyond ±(2**53 - 1) becomes the double nearest it, so the digest is defined for every request we accept."""
    if isinstance(value, dict):
        return {key: _as_jcs_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_jcs_value(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > _EXACT_INTEGER_LIMIT:
        return float(value)
    return value


def digest_object(message: str, requested_schema: Any, context: Any) -> dict[str, Any]:
    """What a decision is bound to, as docs/approvals.md defines it: the message, the form's schema (null for a
    URL-mode request), and the MCP server, tool and arguments read from the context by `context_call` (null, null
    and {} when the context names none)."""
    server, tool, arguments, _ = context_call(context)
    return {
        "arguments": arguments,
        "message": message,
        "requestedSchema": requested_schema,
        "server": server,
        "tool": tool,
    }


def request_digest(message: str, requested_schema: Any, context: Any) -> str:
    """`sha256:` and the lowercase hex SHA-256 of the RFC 8785 (JCS) canonical JSON of `digest_object`. An MCP
    server recomputes it from the call it is about to make to know an approval is for these exact arguments."""
    body = _as_jcs_value(digest_object(message, requested_schema, context))
    try:
        canonical = rfc8785.dumps(body)
    except rfc8785.CanonicalizationError:
        # A row stored before intake refused lone surrogates: digest it as every door shows it (U+FFFD).
        canonical = rfc8785.dumps(untrusted_json.scrub(body))
    return "sha256:" + hashlib.sha256(canonical).hexdigest()


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


def request_digest_of(request: ElicitationRequest) -> str:
    # A URL-mode request has no form: its digest names none, as intake's (`engine.intake_decision`) does.
    schema = request.requested_schema if request.mode == Mode.FORM else None
    return request_digest(request.message, schema, request.context)
