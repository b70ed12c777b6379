"""How an async tool calls the synchronous core (off the event loop), and what a refused call answers: an MCP tool
error whose text is exactly the REST error body `{code, detail, fields?}` and whose structured content is the same
body, so a host parses one shape whichever door it used. The bodies come from `elicitation/api/errors.py`, the
function REST answers with; `tools.ReviewHubMCPServer` decides which refusal a call met."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.types import CallToolResult, TextContent
from pydantic import ValidationError

from elicitation.api.errors import domain_error_body, invalid_input
from elicitation.delivery import waiter_threads
from elicitation.queue.errors import DomainError


def database_call(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """ORM code off the event loop, on the loop's default executor (tool calls are few; waits are not)."""
    return waiter_threads.database_call(func, executor=None)


def tool_error(body: dict[str, Any]) -> CallToolResult:
    """A REST error body as an MCP tool error. Returned rather than raised: the SDK prefixes the text of a raised
    `ToolError` with "Error executing tool <name>: ", which no JSON parser reads."""
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(body))], structured_content=body, is_error=True
    )


def refusal_body(exc: ToolError) -> dict[str, Any] | None:
    """The REST body for a tool call the SDK reports as failed, or None for a crash (left to the SDK, which logs it
    with its traceback).

    `MCPServer.call_tool` documents that `__cause__` is what was raised: a domain error from the tool (which the SDK
    counts as unexpected, being no ToolError), or pydantic's refusal of the arguments before the tool ran."""
    cause = exc.__cause__
    if isinstance(cause, DomainError):
        return domain_error_body(cause)
    if isinstance(cause, ValidationError) and not isinstance(exc, UnexpectedToolError):
        # Field paths (`waitSeconds`, `requestedSchema`) as REST's `fields` name them, in pydantic's words.
        fields = {".".join(str(part) for part in error["loc"]): error["msg"] for error in cause.errors()}
        return domain_error_body(invalid_input(fields))
    return None


async def call_service(func: Callable[..., Any], *args: Any) -> Any:
    """A tool's synchronous half, run off the event loop. A domain error it raises passes through the tool to
    `ReviewHubMCPServer.call_tool`, which answers it with the REST body (`refusal_body`)."""
    return await database_call(func)(*args)
