"""Tasks (SEP-2663) over request rows: on 2026-07-28 requests that declare the Tasks extension
(`io.modelcontextprotocol/tasks`), `ask_reviewer` and `collect_secret` return a task at once instead of waiting;
`tasks/get` polls it and `tasks/cancel` withdraws the request. The protocol side is elicitation/mcp/tasks.py;
here a task is a request row seen through the task vocabulary."""

import contextlib
from typing import Any

import pydantic_core
from mcp.types import CallToolResult, TextContent

from elicitation.mcp import tasks
from elicitation.mcp.callers import Caller, current_caller, load_agent
from elicitation.mcp.results import represent, secret_outcome
from elicitation.mcp.service_calls import database_call
from elicitation.mcp.tool_actions import owned_request
from elicitation.models import OPEN_STATUSES, HostedFlow, Status
from elicitation.queue import transitions
from elicitation.queue.errors import DomainError, NotFoundError

TASK_TOOLS = frozenset({"ask_reviewer", "collect_secret"})


def tool_result(value: Any) -> CallToolResult:
    """A tool's return value as the SDK sends it: JSON text plus the same value as structured content."""
    text = pydantic_core.to_json(value, fallback=str, indent=2).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)


def _task_state(caller: Caller, request_id: str, task_id: str) -> tasks.TaskState:
    try:
        request = owned_request(caller, request_id)
    except NotFoundError:
        raise tasks.TaskNotFound from None
    view = represent(request)
    # The task's tool is read from the row too: a hosted secret flow's request has a flow.
    flow_id = HostedFlow.objects.filter(request=request).values_list("pk", flat=True).first()

    def state(status: tasks.TaskStatus, message: str, **extra: Any) -> tasks.TaskState:
        return tasks.TaskState(
            task_id=task_id,
            status=status,
            status_message=message,
            created_at=request.created_at,
            last_updated_at=request.updated_at,
            **extra,
        )

    if request.status in OPEN_STATUSES:
        claimed = request.status == Status.CLAIMED
        waiting = "A reviewer is answering." if claimed else "Waiting for a reviewer."
        expected = view.get("expectedWaitSeconds")
        if expected is not None:
            waiting += f" An answer is expected in about {spoken_duration(expected)}."
        # Poll about when the answer is expected (tasks/get rereads the estimate each time).
        return state("working", waiting, poll_interval_seconds=view["retryAfterSeconds"])
    if request.status == Status.WITHDRAWN:
        return state("cancelled", "The request was withdrawn.")
    # Answered or expired: the tool would have returned the closed request (an expiry is a result, not a failure).
    value: Any = secret_outcome(str(flow_id), view) if flow_id is not None else view
    outcome = f" ({view['result']['action']})" if view["result"] else ""
    return state("completed", f"The request {request.status}{outcome}.", result=tool_result(value))


def spoken_duration(seconds: int) -> str:
    """`45 s`, `4 min`, `2 h`: the expected wait as a status message says it."""
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{round(seconds / 3600)} h"


def _cancel_task(caller: Caller, request_id: str) -> None:
    try:
        request = owned_request(caller, request_id)
    except NotFoundError:
        raise tasks.TaskNotFound from None
    if request.status in OPEN_STATUSES:
        # Cancellation is cooperative: an answer that won the race stands, and the task ends completed.
        with contextlib.suppress(DomainError):
            transitions.withdraw_request(request.pk, agent=load_agent(caller.agent_id))


class RequestTasks:
    """The TaskBackend: task ids are request ids signed for the calling agent; state comes from the row."""

    def task_id(self, request_id: str) -> str:
        return tasks.task_id_for(current_caller().agent_id, request_id)

    async def read(self, task_id: str) -> tasks.TaskState:
        caller = current_caller()
        request_id = tasks.request_id_from(caller.agent_id, task_id)
        state: tasks.TaskState = await database_call(_task_state)(caller, request_id, task_id)
        return state

    async def cancel(self, task_id: str) -> None:
        caller = current_caller()
        await database_call(_cancel_task)(caller, tasks.request_id_from(caller.agent_id, task_id))
