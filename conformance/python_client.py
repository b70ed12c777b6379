"""Client under test for `@modelcontextprotocol/conformance`: ReviewHub's Python MCP clients, wired as an agent
wires them, against the suite's scenario server.

    python conformance/python_client.py driver|bridge <server-url>

The suite appends the server URL and names the scenario in `MCP_CONFORMANCE_SCENARIO` (tool calls it wants made
in `MCP_CONFORMANCE_CONTEXT`). `driver` calls every tool through `reviewhub_client.input_required`
(`resolve_input_required`, rounds driven by hand); `bridge` through the SDK's own `Client.call_tool`, whose
input-required loop hands elicitations to `ReviewHubElicitation`. Either way each question goes to a reviewer:
here `AutoReviewer`, a stand-in for ReviewHub's client that accepts every question at once (the suite checks the
MCP wire; tests/mcp/test_input_required_wire.py runs the same path against a live ReviewHub).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import uuid
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

from mcp import Client
from mcp.shared.exceptions import MCPError

from reviewhub_client.input_required import call_tool_raw, resolve_input_required
from reviewhub_client.mcp_bridge import ReviewHubElicitation

QUEUE = "conformance"
SAMPLE = {"boolean": True, "string": "ok", "number": 1, "integer": 1}


class AutoReviewer:
    """The calls `reviewhub_client.mcp_bridge.Hub` makes on a ReviewHub client, answered at once with "accept"
    and content filled from the requested schema. `on_question` runs while a question is open."""

    def __init__(self, on_question: Callable[[], Awaitable[None]] | None = None) -> None:
        self.questions: dict[str, dict[str, Any]] = {}
        self.on_question = on_question

    async def create(self, message: str, requested_schema: dict[str, Any] | None, **fields: Any) -> Any:
        request_id = str(uuid.uuid4())
        self.questions[request_id] = {"message": message, "schema": requested_schema or {}, **fields}
        if self.on_question is not None:
            hook, self.on_question = self.on_question, None
            await hook()
        return SimpleNamespace(id=request_id)

    async def wait(self, request_id: str, timeout: float | None) -> Any:
        properties = self.questions[request_id]["schema"].get("properties", {})
        content = {key: SAMPLE.get(spec.get("type"), "ok") for key, spec in properties.items()}
        return SimpleNamespace(action="accept", content=content, meta=None)

    async def cancel(self, request_id: str) -> None:
        self.questions.pop(request_id, None)

    async def complete_url(self, elicitation_id: str) -> None:
        pass

    async def list_requests(self, status: str) -> list[Any]:
        return []


def arguments_for(schema: dict[str, Any]) -> dict[str, Any]:
    """Values of the right type for a tool's required arguments (`tools_call` checks their types)."""
    properties = schema.get("properties", {})
    return {key: SAMPLE.get(properties.get(key, {}).get("type"), "ok") for key in schema.get("required", [])}


class Caller:
    def __init__(self, mode: str, client: Client, reviewer: AutoReviewer) -> None:
        self.mode, self.client, self.reviewer = mode, client, reviewer

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        if self.mode == "driver":
            return await resolve_input_required(self.client.session, name, arguments, self.reviewer, QUEUE)
        return await self.client.call_tool(name, arguments)


async def request_state(caller: Caller) -> None:
    """sep-2322-client-request-state: state echoed, omitted when not sent, isolated from a call made while a
    round is open, and a result without `resultType` taken as complete."""

    async def unrelated_while_a_round_is_open() -> None:
        await call_tool_raw(caller.client.session, "test_mrtr_unrelated", {})

    caller.reviewer.on_question = unrelated_while_a_round_is_open
    for name in ("test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_no_result_type"):
        result = await caller.call(name, {})
        print(name, json.dumps(result.model_dump(mode="json", by_alias=True, exclude_none=True)), flush=True)


async def every_tool(caller: Caller, context: dict[str, Any]) -> None:
    """The other scenarios: list the tools, then call those the scenario names, or else every tool listed."""
    tools = await caller.client.list_tools()
    calls = context.get("toolCalls") or [
        {"name": tool.name, "arguments": arguments_for(tool.input_schema)} for tool in tools.tools
    ]
    for call in calls:
        try:
            result = await caller.call(call["name"], call.get("arguments") or {})
        except MCPError as refused:  # some scenario servers only list their tools
            print(call["name"], "refused:", refused, flush=True)
            continue
        print(call["name"], "isError" if result.is_error else "ok", flush=True)


async def main(caller_mode: str, url: str) -> None:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    reviewer = AutoReviewer()
    # Connected as an agent would (mode "auto": server/discover, else the initialize handshake).
    bridge = ReviewHubElicitation(reviewer, queue=QUEUE)
    async with Client(url, elicitation_callback=bridge) as client:
        caller = Caller(caller_mode, client, reviewer)
        if scenario == "sep-2322-client-request-state":
            await request_state(caller)
        else:
            await every_tool(caller, context)
    print("done", flush=True)  # conformance/run.py tells a finished client from one that crashed


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("driver", "bridge"):
        sys.exit("usage: python conformance/python_client.py driver|bridge <server-url>")
    asyncio.run(main(sys.argv[1], sys.argv[2]))
