"""The MCP Tasks extension (SEP-2663) at /mcp/: the SDK's own client over streamable HTTP against a live uvicorn.

The client declares `io.modelcontextprotocol/tasks` through the SDK's extension mechanism (a `ClientExtension`
claiming `resultType: "task"`) and speaks `tasks/get`, `tasks/update` and `tasks/cancel` with raw
`send_request`s, so every assertion is about what crossed the wire."""

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    CallToolResult,
    Request,
    RequestParams,
    Result,
)
from pydantic import TypeAdapter

from elicitation.flows import hosted_flows
from elicitation.mcp.tasks import TASKS_EXTENSION, task_id_for
from elicitation.models import Agent, ElicitationRequest, RequestEvent
from elicitation.queue import accounts
from tests.answers import answer_of
from tests.mcp.conftest import Hub, ScriptedReviewer
from tests.mcp.test_mcp_tools import SECRET, RecordingTransport, wait_for_flow

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve?"}},
    "required": ["approve"],
}
WIRE = TypeAdapter(dict[str, Any])


# --- the client half of the extension, as a host would write it with the SDK ---------------------------------------


class CreateTaskResult(Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskParams(RequestParams):
    task_id: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams
    name_param = "taskId"  # SEP-2663: tasks/* carry the task id in Mcp-Name


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams
    name_param = "taskId"


class UpdateTaskParams(TaskParams):
    input_responses: dict[str, Any]


class UpdateTask(Request[UpdateTaskParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    params: UpdateTaskParams
    name_param = "taskId"


class DroppedTaskMethod(Request[TaskParams, str]):
    """`tasks/result` and `tasks/list`: 2025-11-25 methods that SEP-2663 removed."""

    params: TaskParams


async def update_task(client: Client, task_id: str) -> dict[str, Any]:
    params = UpdateTaskParams(task_id=task_id, input_responses={"x": {"action": "accept"}})
    return await client.session.send_request(UpdateTask(params=params), WIRE)


async def get_task(client: Client, task_id: str) -> dict[str, Any]:
    return await client.session.send_request(GetTask(params=TaskParams(task_id=task_id)), WIRE)


async def cancel_task(client: Client, task_id: str) -> dict[str, Any]:
    return await client.session.send_request(CancelTask(params=TaskParams(task_id=task_id)), WIRE)


async def poll_until_done(client: Client, task_id: str, seconds: float = 60) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        task = await get_task(client, task_id)
        if task["status"] in ("completed", "failed", "cancelled"):
            return task
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"task still {task['status']}")
        await asyncio.sleep(0.1)  # tests poll faster than the server's pollIntervalMs hint


class Tasks(ClientExtension):
    """Declares the extension; `call_tool` finishes a task by polling it (what a host that hides tasks does)."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.resolved: list[str] = []

    def claims(self) -> Sequence[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self._resolve)]

    async def _resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> CallToolResult:
        async def get(task_id: str) -> dict[str, Any]:
            return await ctx.session.send_request(GetTask(params=TaskParams(task_id=task_id)), WIRE)

        deadline = asyncio.get_running_loop().time() + 60
        task = await get(created.task_id)
        while task["status"] == "working" and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.1)
            task = await get(created.task_id)
        assert task["status"] == "completed", task
        self.resolved.append(created.task_id)
        return CallToolResult.model_validate(task["result"])


@asynccontextmanager
async def mcp_client(
    hub: Hub,
    *,
    key: str | None = None,
    tasks: bool = True,
    mode: str = "auto",
    transport: httpx2.AsyncBaseTransport | None = None,
    extension: Tasks | None = None,
) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key or hub.agent_key}"}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30, read=120), transport=transport
        ) as http,
        Client(
            streamable_http_client(hub.url + "/mcp/", http_client=http),
            mode=mode,
            extensions=[extension or Tasks()] if tasks else None,
        ) as client,
    ):
        yield client


async def ask_as_task(client: Client, hub: Hub, **extra: Any) -> CreateTaskResult:
    arguments = {"message": "Ship it?", "requestedSchema": SCHEMA, "queue": hub.queue, **extra}
    created = await client.session.call_tool("ask_reviewer", arguments, allow_claimed=True)
    assert isinstance(created, CreateTaskResult), created
    return created


def request_id_of(task_id: str) -> str:
    return task_id.partition(".")[0]


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


# --- the round trip ----------------------------------------------------------------------------------------------


async def test_a_task_reports_working_while_the_human_thinks_and_inlines_the_answer(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    async with mcp_client(hub) as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.extensions == {TASKS_EXTENSION: {}}
        # waitSeconds would hold a plain call for two minutes; a task comes back at once.
        created = await asyncio.wait_for(ask_as_task(client, hub, waitSeconds=120), 20)
        waiting = await get_task(client, created.task_id)
        claimed = await scripted_reviewer.claim_next()
        answering = await get_task(client, created.task_id)
        await scripted_reviewer.respond(claimed["id"], "accept", {"approve": True})
        done = await get_task(client, created.task_id)
        again = await get_task(client, created.task_id)
        acknowledged = await update_task(client, created.task_id)
        read = await client.session.call_tool("get_request", {"id": claimed["id"]}, allow_claimed=True)
        dropped = {}
        for method in ("tasks/result", "tasks/list"):
            with pytest.raises(MCPError) as refused:
                await client.session.send_request(
                    DroppedTaskMethod(method=method, params=TaskParams(task_id=created.task_id)), WIRE
                )
            dropped[method] = refused.value.code

    assert (created.status, created.ttl_ms) == ("working", None)
    assert created.poll_interval_ms in (
        59000,
        60000,
    )  # get_request's retry hint: a tenth of 600 s, capped at 60 s
    assert claimed["id"] == request_id_of(created.task_id)
    assert (waiting["resultType"], waiting["status"], waiting["statusMessage"]) == (
        "complete",
        "working",
        "Waiting for a reviewer.",
    )
    assert waiting["taskId"] == created.task_id
    assert "result" not in waiting
    assert (answering["status"], answering["statusMessage"]) == ("working", "A reviewer is answering.")
    assert done["status"] == "completed"
    assert done["statusMessage"] == "The request completed (accept)."
    assert "pollIntervalMs" not in done
    assert done["lastUpdatedAt"] >= done["createdAt"] == waiting["createdAt"]
    result = CallToolResult.model_validate(done["result"])
    request = structured(result)
    assert request["id"] == claimed["id"]
    assert (request["status"], answer_of(request["result"])) == (
        "completed",
        {"action": "accept", "content": {"approve": True}},
    )
    assert json.loads(result.content[0].text) == request  # type: ignore[union-attr]
    assert again == done  # a finished task reads the same every time: it is the request row
    assert acknowledged == {"resultType": "complete", "_meta": acknowledged["_meta"]}
    assert isinstance(read, CallToolResult)  # only ask_reviewer and collect_secret become tasks
    assert answer_of(structured(read)["result"]) == answer_of(request["result"])
    assert dropped == {"tasks/result": METHOD_NOT_FOUND, "tasks/list": METHOD_NOT_FOUND}


async def test_a_host_that_hides_tasks_gets_the_answer_from_call_tool(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    extension = Tasks()
    async with mcp_client(hub, extension=extension) as client:
        asking = asyncio.ensure_future(
            client.call_tool(
                "ask_reviewer", {"message": "Merge?", "requestedSchema": SCHEMA, "queue": hub.queue}
            )
        )
        await scripted_reviewer.answer_next("decline")
        answered = structured(await asyncio.wait_for(asking, 60))

    assert (answered["status"], answer_of(answered["result"])) == ("completed", {"action": "decline"})
    assert [request_id_of(task_id) for task_id in extension.resolved] == [answered["id"]]


async def test_cancelling_a_task_withdraws_the_request(hub: Hub, scripted_reviewer: ScriptedReviewer) -> None:
    async with mcp_client(hub) as client:
        created = await ask_as_task(client, hub)
        acknowledged = await cancel_task(client, created.task_id)
        cancelled = await get_task(client, created.task_id)
        again = await cancel_task(client, created.task_id)  # already withdrawn: still acknowledged

    request_id = request_id_of(created.task_id)
    row = await sync_to_async(ElicitationRequest.objects.get)(pk=request_id)
    events = await sync_to_async(list)(
        RequestEvent.objects.filter(request_id=request_id).values_list("kind", "actor_type", "actor_agent_id")
    )
    assert acknowledged["resultType"] == again["resultType"] == "complete"
    assert (cancelled["status"], cancelled["statusMessage"]) == ("cancelled", "The request was withdrawn.")
    assert "result" not in cancelled
    assert row.status == "withdrawn"
    assert row.closed_at is not None
    assert events[-1] == ("withdrawn", "agent", hub.agent_id)
    assert [kind for kind, _, _ in events].count("withdrawn") == 1
    with pytest.raises(AssertionError, match="no request reached the reviewer queue"):
        await scripted_reviewer.claim_next(timeout=0.5)  # gone from the reviewers' queue


async def test_a_cancel_that_loses_the_race_to_an_answer_leaves_the_task_completed(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    async with mcp_client(hub) as client:
        created = await ask_as_task(client, hub)
        await scripted_reviewer.answer_next("accept", {"approve": False})
        acknowledged = await cancel_task(client, created.task_id)
        task = await get_task(client, created.task_id)

    row = await sync_to_async(ElicitationRequest.objects.get)(pk=request_id_of(created.task_id))
    assert acknowledged["resultType"] == "complete"  # cancellation is cooperative: acknowledged, not honoured
    assert task["status"] == "completed"
    assert structured(CallToolResult.model_validate(task["result"]))["result"]["content"] == {
        "approve": False
    }
    assert row.status == "completed"


# --- who may see a task ----------------------------------------------------------------------------------------------


async def test_another_agents_task_id_is_not_found(hub: Hub) -> None:
    other, other_key = await sync_to_async(accounts.create_agent)("other-agent", queue_slugs=[hub.queue])
    async with mcp_client(hub) as client:
        created = await ask_as_task(client, hub)
    request_id = request_id_of(created.task_id)
    forged = {
        "another agent's id": created.task_id,
        "signed for the other agent": task_id_for(other.pk, request_id),
        "unsigned": request_id,
        "bad signature": request_id + ".AAAA",
        "overlong": "x" * 201,
    }
    refusals: dict[str, tuple[str, int, str]] = {}
    async with mcp_client(hub, key=other_key) as client:
        for label, task_id in forged.items():
            for verb, call in (("get", get_task), ("update", update_task), ("cancel", cancel_task)):
                with pytest.raises(MCPError) as refused:
                    await call(client, task_id)
                refusals[f"{verb} {label}"] = (verb, refused.value.code, refused.value.message)

    assert all(code == INVALID_PARAMS for _, code, _ in refusals.values()), refusals
    for label in ("another agent's id", "signed for the other agent", "unsigned", "bad signature"):
        # Indistinguishable from an id that never existed.
        assert refusals[f"get {label}"][2] == "Failed to retrieve task: Task not found"
    row = await sync_to_async(ElicitationRequest.objects.get)(pk=request_id)
    assert row.status == "pending"  # the other agent's cancel withdrew nothing


# --- negotiation --------------------------------------------------------------------------------------------------


async def test_without_the_extension_on_the_request_the_call_is_plain_and_tasks_are_refused(hub: Hub) -> None:
    async with mcp_client(hub, tasks=False) as client:
        plain = structured(
            await client.call_tool(
                "ask_reviewer", {"message": "Plain?", "requestedSchema": SCHEMA, "queue": hub.queue}
            )
        )
        with pytest.raises(MCPError) as refused:
            await get_task(client, task_id_for(hub.agent_id, plain["id"]))

    assert plain["status"] == "pending"
    assert refused.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused.value.data["requiredCapabilities"] == {"extensions": {TASKS_EXTENSION: {}}}


async def test_a_2025_connection_is_offered_no_tasks(hub: Hub, scripted_reviewer: ScriptedReviewer) -> None:
    async with mcp_client(hub, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        assert not client.server_capabilities.extensions
        asking = asyncio.ensure_future(
            client.call_tool(
                "ask_reviewer",
                {"message": "Old host?", "requestedSchema": SCHEMA, "queue": hub.queue, "waitSeconds": 30},
            )
        )
        await scripted_reviewer.answer_next("accept", {"approve": True})
        answered = structured(await asyncio.wait_for(asking, 60))
        with pytest.raises(MCPError) as refused:
            await get_task(client, task_id_for(hub.agent_id, answered["id"]))

    # The plain call behaves as before: it waited and returned the answer itself.
    assert answered["result"] == {"action": "accept", "content": {"approve": True}}
    assert refused.value.code == METHOD_NOT_FOUND


async def test_a_call_refused_before_any_request_exists_is_a_plain_tool_error(hub: Hub) -> None:
    async with mcp_client(hub) as client:
        refused = await client.session.call_tool(
            "ask_reviewer",
            {"message": "x", "mode": "url", "url": "javascript:alert(1)", "queue": hub.queue},
            allow_claimed=True,
        )
    assert isinstance(refused, CallToolResult)
    assert refused.is_error
    assert json.loads(refused.content[0].text) == refused.structured_content  # type: ignore[union-attr]
    assert refused.structured_content["fields"] == {"url": "must be an http or https URL"}  # type: ignore[index]
    assert await sync_to_async(ElicitationRequest.objects.count)() == 0


# --- collect_secret as a task ---------------------------------------------------------------------------------------


async def test_collect_secret_as_a_task_inlines_only_the_outcome(hub: Hub) -> None:
    agent = await sync_to_async(Agent.objects.get)(pk=hub.agent_id)
    agent.scopes = ["flows:secrets"]
    await sync_to_async(agent.save)(update_fields=["scopes"])
    reviewer = await sync_to_async(User.objects.get)(username="mcp-reviewer")
    schema = {
        "type": "object",
        "properties": {"token": {"type": "string", "title": "API token", "sensitive": True}},
        "required": ["token"],
    }
    recording = RecordingTransport()
    async with mcp_client(hub, transport=recording) as client:
        created = await client.session.call_tool(
            "collect_secret",
            {"message": "Paste the deploy token", "requestedSchema": schema, "queue": hub.queue},
            allow_claimed=True,
        )
        assert isinstance(created, CreateTaskResult), created
        flow_id = await wait_for_flow(hub)

        def reviewer_enters_the_secret() -> None:
            hosted_flows.claim_flow(flow_id, reviewer)
            hosted_flows.complete_hosted_flow(flow_id, user=reviewer, content={"token": SECRET})

        await sync_to_async(reviewer_enters_the_secret)()
        done = await poll_until_done(client, created.task_id)

    outcome = structured(CallToolResult.model_validate(done["result"]))
    assert done["status"] == "completed"
    assert (outcome["flowId"], outcome["requestId"]) == (flow_id, request_id_of(created.task_id))
    assert (outcome["status"], outcome["action"]) == ("completed", "accept")
    assert all(SECRET.encode() not in chunk for chunk in recording.wire)
