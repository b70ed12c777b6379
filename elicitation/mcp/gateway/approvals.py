"""A held `tools/call` as a request in the upstream's queue, and what its outcome means for the call.

The request is an approval: one required boolean, `approve`, asked in the words of the call (upstream, tool), with
`context.mcp.{server, tool, arguments}` (what the reviewer's page shows and what rules, quorum, remembered
decisions and the argument digest read) and the digest itself in `context.mcp.digest`. It is created through
`tool_actions.create_request`, the MCP door's create (REST's serializer, then `transitions.create_request`), so a
rule that accepts it at intake answers it before this module ever waits: the call goes on without a person.

Only `accept` with `approve: true` forwards the call. Anything else is a tool error (`isError: true`) whose text
says, in words, what happened and which request decided it; its `structuredContent` is the same body in the REST
error vocabulary's shape, `{code, detail, requestId}`."""

import asyncio
import contextlib
import logging
from datetime import datetime
from typing import Any

import anyio
from mcp.server.context import ServerRequestContext
from mcp.types import CallToolResult

from elicitation.delivery.long_poll import wait_for_request
from elicitation.mcp.callers import Caller
from elicitation.mcp.gateway.config import Upstream
from elicitation.mcp.results import ReviewRequest
from elicitation.mcp.service_calls import call_service, database_call, tool_error
from elicitation.mcp.tool_actions import (
    TERMINAL,
    create_request,
    progress_interval,
    read_request,
    wait_cap,
    withdraw_request,
)
from elicitation.queue import clock, rules
from elicitation.queue.errors import DomainError

logger = logging.getLogger(__name__)

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {
            "type": "boolean",
            "title": "Allow this tool call?",
            "description": "Yes forwards the call to the upstream MCP server; no refuses it.",
        }
    },
    "required": ["approve"],
}


def approval_message(upstream: Upstream, tool: str) -> str:
    # Fixed words per (upstream, tool): the digest covers the message, so a remembered decision keeps matching.
    return f"Allow the tool call {tool!r} on the MCP server {upstream.name!r}?"


def approval_body(upstream: Upstream, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """The create body, as `POST /api/v1/requests` would take it."""
    message = approval_message(upstream, tool)
    call = {"server": upstream.name, "tool": tool, "arguments": arguments}
    context = {"mcp": {**call, "gateway": True}}
    # Not a member of the digest's object, so stating it in the context leaves the digest unchanged.
    context["mcp"]["digest"] = rules.request_digest(message, APPROVAL_SCHEMA, context)
    body: dict[str, Any] = {
        "message": message,
        "mode": "form",
        "queue": upstream.queue,
        "requestedSchema": APPROVAL_SCHEMA,
        "context": context,
    }
    if upstream.expires_in is not None:
        body["expiresIn"] = upstream.expires_in
    return body


def approved(request: ReviewRequest) -> bool:
    result: dict[str, Any] = dict(request.get("result") or {})
    return (
        request["status"] == "completed"
        and result.get("action") == "accept"
        and (result.get("content") or {}).get("approve") is True
    )


def refusal(request: ReviewRequest, upstream: Upstream, tool: str) -> CallToolResult:
    """Why the call was not forwarded, in words; never a bare "cancelled"."""
    result: dict[str, Any] = dict(request.get("result") or {})
    action = result.get("action")
    what = f"The call to {tool!r} on {upstream.name!r} was not forwarded"
    status = request["status"]
    if status == "expired":
        code, detail = "expired", f"{what}: nobody decided before the approval request expired."
    elif status == "withdrawn":
        code, detail = "withdrawn", f"{what}: the approval request was withdrawn."
    elif status != "completed":
        code, detail = (
            "undecided",
            f"{what}: no decision arrived in time; the approval request was withdrawn.",
        )
    elif action == "accept":
        code, detail = "declined", f"{what}: the reviewer answered no."
    elif action == "decline":
        code, detail = "declined", f"{what}: the reviewer declined it."
    else:
        code, detail = (
            "dismissed",
            f"{what}: the reviewer dismissed the approval request without approving it.",
        )
    return tool_error({"code": code, "detail": detail, "requestId": request["id"]})


async def hold(ctx: ServerRequestContext[Any, Any], caller: Caller, request_id: str) -> ReviewRequest:
    """Wait for the request to close, never past its deadline plus the sweeper's grace, with a progress
    notification after every `MCP_PROGRESS_INTERVAL_SECONDS` still open (hosts that reset their timeout on
    progress keep waiting). A client that goes away cancels this wait: the request is withdrawn, so nobody
    decides a call no one will receive."""
    loop = asyncio.get_running_loop()
    try:
        current: ReviewRequest = await call_service(read_request, caller, request_id)
        deadline_left = (datetime.fromisoformat(current["deadline"]) - clock.now()).total_seconds()
        end = loop.time() + max(0.0, deadline_left + 2 * progress_interval())
        beat = 0
        while current["status"] not in TERMINAL and loop.time() < end:
            slice_seconds = min(progress_interval(), end - loop.time(), wait_cap(60))
            await wait_for_request(caller.agent_id, request_id, slice_seconds)
            current = await call_service(read_request, caller, request_id)
            if current["status"] not in TERMINAL:
                beat += 1
                await ctx.session.report_progress(
                    beat, None, f"Waiting for a human reviewer ({current['status']})."
                )
    except anyio.get_cancelled_exc_class():
        await withdraw_quietly(caller, request_id)
        raise
    if current["status"] not in TERMINAL:
        await withdraw_quietly(caller, request_id)
    return current


async def withdraw_quietly(caller: Caller, request_id: str) -> None:
    # Shielded: the caller is being cancelled. A decision that won the race stands (DomainError).
    with anyio.CancelScope(shield=True), contextlib.suppress(DomainError):
        await database_call(withdraw_request)(caller, request_id)
        logger.info("Gateway approval %s withdrawn: its call was given up", request_id)


async def open_approval(
    caller: Caller, upstream: Upstream, tool: str, arguments: dict[str, Any]
) -> ReviewRequest:
    # Shielded: a client that leaves while the row is being written must still learn its id, so that hold()
    # (whose first await then meets the cancellation) withdraws it instead of leaving it to a reviewer.
    with anyio.CancelScope(shield=True):
        created: ReviewRequest = await call_service(
            create_request, caller, approval_body(upstream, tool, arguments)
        )
    return created
