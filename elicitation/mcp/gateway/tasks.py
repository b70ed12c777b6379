"""Tasks (SEP-2663) at the gateway: a client that declares `io.modelcontextprotocol/tasks` on a held `tools/call`
gets a task at once, over the approval request, through the same `TasksExtension` `/mcp/` uses (task ids are the
request's, signed for its agent).

`tasks/get` reads the request row: `working` while it is open; once it is refused, expired or withdrawn,
`completed` with the same tool error a held call gets; once approved, the first `tasks/get` to claim the forward
(an atomic `cache.add`, shared by every process when `REDIS_URL` is set) forwards the call to the upstream and
stores its result in the cache, and that and every later `tasks/get` answer `completed` with it. So the upstream
sees an approved call exactly once, driven by the client's own polling; a poll that finds the forward under way
answers `working`. `tasks/cancel` withdraws the request (a decision that got there first stands)."""

import contextlib
import json
from typing import Any

from django.core.cache import cache
from mcp.server.context import ServerRequestContext
from mcp.server.extension import MethodBinding
from mcp.shared.exceptions import MCPError
from mcp.types import METHOD_NOT_FOUND, CallToolResult, TextContent

from elicitation.mcp import tasks
from elicitation.mcp.callers import Caller, current_caller, load_agent
from elicitation.mcp.gateway import approvals
from elicitation.mcp.gateway.config import Upstream
from elicitation.mcp.results import ReviewRequest
from elicitation.mcp.service_calls import database_call
from elicitation.mcp.tool_actions import TERMINAL, owned_request, read_request
from elicitation.models import OPEN_STATUSES, ElicitationRequest
from elicitation.queue import transitions
from elicitation.queue.errors import DomainError, NotFoundError

# A forwarded call's result is kept this long for tasks/get (the request row itself stays for good).
RESULT_SECONDS = 7 * 24 * 3600
# A forward that claimed the call but never stored a result (its process died mid-call) is not retried: the
# upstream may have run it. Its task then says so, in words, after this long.
FORWARD_CLAIM_SECONDS = RESULT_SECONDS


def _result_key(request_id: str) -> str:
    return f"mcp-gateway:result:{request_id}"


def _claim_key(request_id: str) -> str:
    return f"mcp-gateway:forward:{request_id}"


class HeldTools(frozenset[str]):
    """The tools that may run as a task: every tool but the upstream's `pass` list (those answer at once)."""

    def __new__(cls, passed: frozenset[str]) -> "HeldTools":
        return super().__new__(cls, passed)

    def __contains__(self, name: object) -> bool:
        return not super().__contains__(name)


def _owned(caller: Caller, request_id: str) -> ElicitationRequest:
    try:
        return owned_request(caller, request_id)
    except NotFoundError:
        raise tasks.TaskNotFound from None


def _withdraw(caller: Caller, request_id: str) -> None:
    request = _owned(caller, request_id)
    if request.status in OPEN_STATUSES:
        with contextlib.suppress(DomainError):
            transitions.withdraw_request(request.pk, agent=load_agent(caller.agent_id))


def _read(caller: Caller, request_id: str) -> tuple[ElicitationRequest, ReviewRequest]:
    request = _owned(caller, request_id)
    return request, read_request(caller, request_id)


class GatewayTasks:
    """The gateway's TaskBackend: state from the request row, the forwarded result from the cache."""

    def __init__(self, upstream: Upstream, forward: Any) -> None:
        self.upstream = upstream
        self.forward = forward  # async (tool, arguments, request) -> CallToolResult

    def task_id(self, request_id: str) -> str:
        return tasks.task_id_for(current_caller().agent_id, request_id)

    async def read(self, task_id: str) -> tasks.TaskState:
        caller = current_caller()
        request_id = tasks.request_id_from(caller.agent_id, task_id)
        row, view = await database_call(_read)(caller, request_id)
        mcp = (row.context or {}).get("mcp") or {}
        if mcp.get("server") != self.upstream.name:
            raise tasks.TaskNotFound  # another door's request (or another gateway's): not this server's task
        tool = str(mcp.get("tool"))

        def state(status: tasks.TaskStatus, message: str, **extra: Any) -> tasks.TaskState:
            return tasks.TaskState(
                task_id=task_id,
                status=status,
                status_message=message,
                created_at=row.created_at,
                last_updated_at=row.updated_at,
                **extra,
            )

        if view["status"] not in TERMINAL:
            return state("working", "Waiting for a person to approve the call.", poll_interval_seconds=2)
        if not approvals.approved(view):
            refusal = approvals.refusal(view, self.upstream, tool)
            return state("completed", refusal.structured_content["detail"], result=refusal)
        result = await self._forwarded(request_id, tool, mcp.get("arguments") or {}, view)
        if result is None:
            return state("working", "Approved; the call is being forwarded.", poll_interval_seconds=1)
        return state("completed", "Approved and forwarded.", result=result)

    async def _forwarded(
        self, request_id: str, tool: str, arguments: dict[str, Any], view: ReviewRequest
    ) -> CallToolResult | None:
        stored = await database_call(cache.get)(_result_key(request_id))
        if stored is not None:
            return CallToolResult.model_validate(json.loads(stored))
        if not await database_call(cache.add)(_claim_key(request_id), 1, FORWARD_CLAIM_SECONDS):
            return None  # another poll is forwarding it
        try:
            result: CallToolResult = await self.forward(tool, arguments, view)
        except MCPError as exc:
            # The task completes with the upstream's failure as a tool error: the call is not retried.
            body = {"code": "upstream_error", "detail": exc.message, "requestId": request_id}
            result = CallToolResult(
                content=[TextContent(type="text", text=json.dumps(body))],
                structured_content=body,
                is_error=True,
            )
        dumped = json.dumps(result.model_dump(by_alias=True, mode="json", exclude_none=True))
        await database_call(cache.set)(_result_key(request_id), dumped, RESULT_SECONDS)
        return result

    async def cancel(self, task_id: str) -> None:
        caller = current_caller()
        await database_call(_withdraw)(caller, tasks.request_id_from(caller.agent_id, task_id))


def version_gated(method: MethodBinding) -> Any:
    """An extension method limited to its protocol versions, as MCPServer registers one (the lowlevel server keys
    handlers by method only)."""
    versions = method.protocol_versions

    async def gated(ctx: ServerRequestContext[Any, Any], params: Any) -> Any:
        if versions is not None and ctx.protocol_version not in versions:
            raise MCPError(code=METHOD_NOT_FOUND, message="Method not found", data=method.method)
        return await method.handler(ctx, params)

    return gated
