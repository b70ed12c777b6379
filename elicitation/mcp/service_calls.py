"""How an async tool calls the synchronous core: off the event loop, with a domain error mapped once to an MCP tool
error whose text is the REST error body `{code, detail, fields?}`, so hosts parse one shape."""

import json
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError

from elicitation.delivery import waiter_threads
from elicitation.queue.errors import DomainError


def database_call(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """ORM code off the event loop, on the loop's default executor (tool calls are few; waits are not)."""
    return waiter_threads.database_call(func, executor=None)


def tool_error(exc: DomainError) -> ToolError:
    """The REST error body `{code, detail, fields?}` as the tool error text, so hosts parse one shape."""
    body: dict[str, Any] = {"code": exc.code, "detail": exc.detail}
    if exc.fields:
        body["fields"] = exc.fields
    return ToolError(json.dumps(body))


async def call_service(func: Callable[..., Any], *args: Any) -> Any:
    """A tool's synchronous half, run off the event loop; a domain error it raises becomes the tool error."""
    try:
        return await database_call(func)(*args)
    except DomainError as exc:
        raise tool_error(exc) from None
