"""The MCP Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663) on ReviewHub's MCP server.

On a 2026-07-28 request whose per-request capabilities declare the extension, `ask_reviewer` and `collect_secret`
queue the question and answer at once with a task (`resultType: "task"`) instead of waiting for the human. The
client then polls `tasks/get`, which reports `working` while the request is open and inlines the tool's
`CallToolResult` once it is `completed` (answered or expired); `tasks/cancel` withdraws the request, after which
the task is `cancelled`. `tasks/update` acknowledges: a ReviewHub task never asks the client for input.

What this module owns is the wire: negotiation, the three methods, task ids and the task shapes. What a task *is*
comes from a `TaskBackend` (elicitation/mcp/server.py), which reads every state from the request row: no table of
tasks exists, so a task lives exactly as long as its request and any process behind the load balancer can answer
for it.

A task id names the request and is signed for the agent that owns it (HMAC under SECRET_KEY, with
SECRET_KEY_FALLBACKS accepted): another agent's `tasks/get` of the same id is indistinguishable from an unknown
id. Not implemented, both optional in the spec: `notifications/tasks` pushes (the SDK's `subscriptions/listen`
honours no `taskIds` filter, so the acknowledgement tells the client to poll) and `input_required` (reviewers
answer in ReviewHub, never through the client).
"""

import base64
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from django.conf import settings
from django.utils.crypto import constant_time_compare, salted_hmac
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.mcpserver import require_client_extension
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolRequestParams, CallToolResult, RequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
# The extension is defined on the per-request envelope of 2026-07-28; handshake-era sessions never see it.
TASK_PROTOCOL_VERSIONS = frozenset(MODERN_PROTOCOL_VERSIONS)
TASK_ID_MAX_LENGTH = 200
_HMAC_SALT = "elicitation.mcp.tasks.task-id"

TaskStatus = Literal["working", "input_required", "completed", "failed", "cancelled"]


class TaskNotFound(Exception):
    """No task by that id for this caller (unknown, forged, another agent's, or a queue the token no longer covers)."""


@dataclass(frozen=True)
class TaskState:
    task_id: str
    status: TaskStatus
    status_message: str
    created_at: datetime
    last_updated_at: datetime
    poll_interval_seconds: int | None = None
    result: CallToolResult | None = None

    def task(self) -> dict[str, Any]:
        """The `Task` shape (what `CreateTaskResult` carries)."""
        shape: dict[str, Any] = {
            "taskId": self.task_id,
            "status": self.status,
            "statusMessage": self.status_message,
            "createdAt": _iso(self.created_at),
            "lastUpdatedAt": _iso(self.last_updated_at),
            # Request rows are never purged, so neither is the task.
            "ttlMs": None,
        }
        if self.poll_interval_seconds is not None:
            shape["pollIntervalMs"] = self.poll_interval_seconds * 1000
        return shape

    def detailed(self) -> dict[str, Any]:
        """The `DetailedTask` shape of `tasks/get`: a completed task inlines the tool's result."""
        shape = self.task()
        if self.status == "completed" and self.result is not None:
            shape["result"] = self.result.model_dump(by_alias=True, mode="json", exclude_none=True)
        return shape


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TaskBackend(Protocol):
    """What a task is, for the caller of the current request."""

    def task_id(self, request_id: str) -> str: ...

    async def read(self, task_id: str) -> TaskState:
        """The task's state; raises TaskNotFound."""
        ...

    async def cancel(self, task_id: str) -> None:
        """Withdraw the request behind the task if it is still open; raises TaskNotFound."""
        ...


# --- task ids ------------------------------------------------------------------------------------------------------


def _mac(agent_id: int, request_id: str, secret: str) -> str:
    digest = salted_hmac(_HMAC_SALT, f"{agent_id}:{request_id}", secret=secret, algorithm="sha256").digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def task_id_for(agent_id: int, request_id: str) -> str:
    """Stable for a request and its agent, so a client that lost the id can be given the same one again."""
    return f"{request_id}.{_mac(agent_id, request_id, settings.SECRET_KEY)}"


def request_id_from(agent_id: int, task_id: str) -> str:
    """The request a task id names, if it was issued to this agent; raises TaskNotFound otherwise."""
    request_id, _, mac = task_id.partition(".")
    if request_id and mac:
        for secret in (settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", ())):
            if constant_time_compare(mac, _mac(agent_id, request_id, secret)):
                return request_id
    raise TaskNotFound


# --- the tools' side: "am I running as a task?" --------------------------------------------------------------------


@dataclass
class _TaskCall:
    request_id: str | None = None


_current_call: contextvars.ContextVar[_TaskCall | None] = contextvars.ContextVar(
    "mcp_task_call", default=None
)


def deferred() -> bool:
    """True while a tool runs for a task-augmented call: it must queue its request and return without waiting."""
    return _current_call.get() is not None


def started(request_id: str) -> None:
    """The tool queued the request that stands behind the task."""
    call = _current_call.get()
    if call is not None:
        call.request_id = request_id


# --- the extension ---------------------------------------------------------------------------------------------------


class TaskParams(RequestParams):
    task_id: str = Field(min_length=1, max_length=TASK_ID_MAX_LENGTH)


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any] = Field(default_factory=dict)


def _declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.extensions and TASKS_EXTENSION in capabilities.extensions)


def _not_found() -> MCPError:
    return MCPError(code=INVALID_PARAMS, message="Failed to retrieve task: Task not found")


class TasksExtension(Extension):
    """Task-augmented `tools/call` for the tools named in `task_tools`, and `tasks/get|update|cancel`."""

    identifier = TASKS_EXTENSION

    def __init__(self, backend: TaskBackend, task_tools: frozenset[str]) -> None:
        self.backend = backend
        self.task_tools = task_tools

    def methods(self) -> Sequence[MethodBinding]:
        return (
            MethodBinding("tasks/get", TaskParams, self._get, TASK_PROTOCOL_VERSIONS),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, TASK_PROTOCOL_VERSIONS),
            MethodBinding("tasks/cancel", TaskParams, self._cancel, TASK_PROTOCOL_VERSIONS),
        )

    async def intercept_tool_call(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        # The server decides per request; it MUST NOT answer with a task a client that did not declare the
        # extension on this very request. The 2025-11-25 `params.task` field is ignored, as SEP-2663 says.
        if (
            params.name not in self.task_tools
            or ctx.protocol_version not in TASK_PROTOCOL_VERSIONS
            or not _declared(ctx)
        ):
            return await call_next(ctx)
        call = _TaskCall()
        token = _current_call.set(call)
        try:
            result = await call_next(ctx)
        finally:
            _current_call.reset(token)
        if call.request_id is None:
            return result  # refused before any request existed: the tool's own (error) result, synchronously
        # Read back through the same path tasks/get takes: the task is durable before its id leaves.
        state = await self.backend.read(self.backend.task_id(call.request_id))
        return {"resultType": "task", **state.task()}

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, TASKS_EXTENSION)
        try:
            state = await self.backend.read(params.task_id)
        except TaskNotFound:
            raise _not_found() from None
        return {"resultType": "complete", **state.detailed()}

    async def _update(self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams) -> dict[str, Any]:
        # No ReviewHub task ever has outstanding inputRequests, so every response is for a key that is not
        # outstanding, which the spec says to ignore; the task must still exist.
        require_client_extension(ctx, TASKS_EXTENSION)
        try:
            await self.backend.read(params.task_id)
        except TaskNotFound:
            raise _not_found() from None
        return {}

    async def _cancel(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        require_client_extension(ctx, TASKS_EXTENSION)
        try:
            await self.backend.cancel(params.task_id)
        except TaskNotFound:
            raise _not_found() from None
        return {}


__all__ = [
    "TASKS_EXTENSION",
    "TaskBackend",
    "TaskNotFound",
    "TaskState",
    "TasksExtension",
    "deferred",
    "request_id_from",
    "started",
    "task_id_for",
]
