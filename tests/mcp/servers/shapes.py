"""A low-level MCP server whose one tool answers with a half-shaped input_required result: `resultType` says
input_required but there is nothing to answer and no state to echo (a server bug a client must not loop on)."""

from typing import Any

import mcp.types as types
from mcp.server import Server
from mcp.server.context import ServerRequestContext

calls: list[dict[str, Any]] = []


async def list_tools(
    ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
) -> types.ListToolsResult:
    return types.ListToolsResult(tools=[types.Tool(name="half", input_schema={"type": "object"})])


async def call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> Any:
    calls.append({"name": params.name, "requestState": params.request_state})
    return {
        "resultType": "input_required",
        "inputRequests": {},
        "content": [{"type": "text", "text": "half-shaped, but final"}],
    }


server = Server("shapes", on_list_tools=list_tools, on_call_tool=call_tool)
