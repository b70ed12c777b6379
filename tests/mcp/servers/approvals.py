"""A small MCP server whose tools need a human: used in-memory (import `server`) and as a stdio subprocess
(`python tests/mcp/servers/approvals.py`).

- `deploy` asks through a resolver that returns `Elicit[...]`: on a 2026-07-28 connection the SDK turns that
  into an `InputRequiredResult` round trip, on 2025-11-25 into a mid-call `elicitation/create`.
- `deploy_now` asks with `ctx.elicit(...)` (the 2025-11-25 server-initiated request).
- `link_account` asks with `ctx.elicit_url(...)` (URL mode, with an `elicitationId`).
- `connect_bank` does the same; `bank_connected` sends `notifications/elicitation/complete` for it.
- `release` asks two questions at once (one round, two keyed input requests).
- `endless` is a misbehaving server: every call and every retry asks again, forever.
- `warm_up` answers its first call with state only (no question), then completes on the retry.

With `RH_MCP_STATE_KEY` set, `requestState` is sealed with that key instead of a per-process one, so a retry
reaches a *new* server process (a restarted agent's new stdio child) intact. With `RH_MCP_RECORD` set, every
inbound `tools/call` is appended there as a JSON line (JSON-RPC id, arguments, the sealed `requestState` as it
arrived, the `inputResponses` keys), so tests can see the wire as the server saw it.
"""

import json
import os
from typing import Annotated, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import (
    AcceptedElicitation,
    Context,
    Elicit,
    ElicitationResult,
    MCPServer,
    RequestStateSecurity,
    Resolve,
)
from mcp.types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from pydantic import BaseModel, Field


class Approval(BaseModel):
    approve: bool = Field(title="Approve?")
    note: str = Field(default="", title="Note for the operator")


class Window(BaseModel):
    start: str = Field(title="Maintenance window start (HH:MM)")


def ask_approval(version: str) -> Elicit[Approval]:
    return Elicit(f"Deploy {version} to production?", Approval)


def ask_window(version: str) -> Elicit[Window]:
    return Elicit(f"When may {version} go out?", Window)


def outcome(what: str, answer: ElicitationResult[Approval]) -> str:
    if isinstance(answer, AcceptedElicitation):
        verdict = "approved" if answer.data.approve else "rejected"
        return f"{what}: {verdict} ({answer.data.note or 'no note'})"
    return f"{what}: {answer.action}"


async def record(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    path = os.environ.get("RH_MCP_RECORD")
    if path and ctx.method == "tools/call":
        params = dict(ctx.params or {})
        line = {
            "id": ctx.request_id,
            "name": params.get("name"),
            "arguments": params.get("arguments"),
            "requestState": params.get("requestState"),
            "inputResponses": sorted((params.get("inputResponses") or {}).keys()),
        }
        with open(path, "a") as file:
            file.write(json.dumps(line) + "\n")
    return await call_next(ctx)


state_key = os.environ.get("RH_MCP_STATE_KEY")
server = MCPServer(
    "deploy-approvals",
    request_state_security=RequestStateSecurity(keys=[state_key]) if state_key else None,
)
# Outermost, ahead of the SDK's request-state boundary: records requestState sealed, exactly as the client sent it.
server.middleware.insert(0, record)


@server.tool()
async def deploy(version: str, answer: Annotated[ElicitationResult[Approval], Resolve(ask_approval)]) -> str:
    """Deploy a version once a human approves it."""
    return outcome(f"deploy {version}", answer)


@server.tool()
async def release(
    version: str,
    answer: Annotated[ElicitationResult[Approval], Resolve(ask_approval)],
    window: Annotated[Window, Resolve(ask_window)],
) -> str:
    """Release a version: needs an approval and a window, asked together."""
    return outcome(f"release {version} at {window.start}", answer)


@server.tool()
async def deploy_now(version: str, ctx: Context) -> str:
    """Deploy, asking with ctx.elicit (2025-11-25 connections)."""
    answer = await ctx.elicit(f"Deploy {version} right now?", Approval)
    return outcome(f"deploy {version} now", answer)


@server.tool()
async def link_account(provider: str, ctx: Context) -> str:
    """Link a billing account through a browser flow (URL mode)."""
    answer = await ctx.elicit_url(
        f"Sign in to {provider} to link the billing account",
        f"https://billing.example.com/connect/{provider}",
        f"link-{provider}",
    )
    return f"link {provider}: {answer.action}"


@server.tool()
async def connect_bank(bank: str, ctx: Context) -> str:
    """URL mode: the person connects the bank on the bank's own page."""
    answer = await ctx.elicit_url(
        f"Connect {bank}", f"https://banking.example.com/connect/{bank}", f"bank-{bank}"
    )
    return f"connect {bank}: {answer.action}"


@server.tool()
async def bank_connected(bank: str, ctx: Context) -> str:
    """What the bank's webhook does: the server tells the client that the URL flow finished."""
    await ctx.session.send_elicit_complete(f"bank-{bank}")
    return "told"


@server.tool()
async def endless(ctx: Context) -> InputRequiredResult:
    """Never satisfied: answers every round with another question."""
    round_no = len(ctx.request_state or "") + 1
    question = ElicitRequest(
        params=ElicitRequestFormParams(
            message=f"Round {round_no}: one more thing?",
            requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
        )
    )
    return InputRequiredResult(input_requests={f"q{round_no}": question}, request_state="x" * round_no)


@server.tool()
async def warm_up(ctx: Context) -> InputRequiredResult | str:
    """Busy on the first call: hands back only state (nothing to ask), and is ready when called again with it."""
    if ctx.request_state is None:
        return InputRequiredResult(request_state="warming")
    return f"warm after {ctx.request_state}"


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["http"]:  # `approvals.py http PORT`: streamable HTTP on loopback
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
