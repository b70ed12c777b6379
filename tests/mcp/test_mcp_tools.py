"""The tools a remote host gets at /mcp/: list_queues, human-length waits kept alive by progress, URL mode and
hosted secret flows through the MCP door (the secret never in an MCP message), retry hints, REST error codes."""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from elicitation.flows import hosted_flows
from elicitation.models import Agent
from tests.mcp.conftest import Hub, ScriptedReviewer, agent_api

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve?"}},
    "required": ["approve"],
}
SECRET = "sk-live-7c1f0c1d2e3f4a5b"


class RecordingTransport(httpx2.AsyncHTTPTransport):
    """Every byte of every MCP exchange, both ways, for tests that must prove something never crossed."""

    def __init__(self) -> None:
        super().__init__()
        self.wire: list[bytes] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        self.wire.append(request.content)
        response = await super().handle_async_request(request)
        body = await response.aread()
        self.wire.append(body)
        return httpx2.Response(response.status_code, headers=response.headers, content=body, request=request)


@asynccontextmanager
async def mcp_client(hub: Hub, transport: httpx2.AsyncBaseTransport | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {hub.agent_key}"}
    async with (
        httpx2.AsyncClient(
            headers=headers, timeout=httpx2.Timeout(30, read=120), transport=transport
        ) as http,
        Client(streamable_http_client(hub.url + "/mcp/", http_client=http)) as client,
    ):
        yield client


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


def error_body(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body == result.structured_content
    return body


async def call_with_progress_timeout(
    client: Client, name: str, arguments: dict[str, Any], timeout: float
) -> tuple[CallToolResult, list[float]]:
    """A host that gives a call `timeout` seconds and starts the count again at every progress notification
    (what the MCP spec suggests and most hosts do)."""
    loop = asyncio.get_running_loop()
    last = loop.time()
    beats: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        nonlocal last
        last = loop.time()
        beats.append(progress)

    call = asyncio.ensure_future(client.call_tool(name, arguments, progress_callback=on_progress))
    while not call.done():
        if loop.time() - last > timeout:
            call.cancel()
            raise AssertionError(f"the host timed out after {len(beats)} progress notifications")
        await asyncio.wait({call}, timeout=0.1)
    return call.result(), beats


async def test_ask_reviewer_outwaits_a_host_timeout_three_times_over_thanks_to_progress(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    # Five of the server's 1 s progress beats: a loaded machine delays a beat, not five (at 2 s, one late beat
    # timed the host out under the suite's load).
    host_timeout = 5.0
    async with mcp_client(hub) as client:
        asking = asyncio.ensure_future(
            call_with_progress_timeout(
                client,
                "ask_reviewer",
                {"message": "Slow one", "requestedSchema": SCHEMA, "queue": hub.queue, "waitSeconds": 120},
                host_timeout,
            )
        )
        claimed = await scripted_reviewer.claim_next()
        await asyncio.sleep(3 * host_timeout)  # the human thinks for three host timeouts
        await scripted_reviewer.respond(claimed["id"], "accept", {"approve": True})
        result, beats = await asyncio.wait_for(asking, 60)

    answered = structured(result)
    assert answered["result"] == {"action": "accept", "content": {"approve": True}}
    assert len(beats) >= 3
    assert beats == sorted(beats)


async def test_get_request_suggests_when_to_ask_again_while_open(hub: Hub) -> None:
    async with mcp_client(hub) as client:
        asked = structured(
            await client.call_tool(
                "ask_reviewer",
                {"message": "Later", "requestedSchema": SCHEMA, "queue": hub.queue, "expiresIn": 300},
            )
        )
        read = structured(await client.call_tool("get_request", {"id": asked["id"]}))
        cancelled = structured(await client.call_tool("cancel_request", {"id": asked["id"]}))

    assert 5 <= read["retryAfterSeconds"] <= 60
    assert read["retryAfterSeconds"] in (29, 30)  # a tenth of the five minutes left
    assert "retryAfterSeconds" not in cancelled


async def test_list_queues_shows_the_callers_queues_with_open_counts(hub: Hub) -> None:
    async with mcp_client(hub) as client:
        await client.call_tool(
            "ask_reviewer", {"message": "One", "requestedSchema": SCHEMA, "queue": hub.queue}
        )
        queues = structured(await client.call_tool("list_queues", {}))["result"]

    assert [(q["slug"], q["pending"], q["claimed"]) for q in queues] == [(hub.queue, 1, 0)]
    assert queues[0]["description"].startswith("MCP review:")


async def test_url_mode_goes_through_the_same_url_checks_as_rest(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    url = "https://docs.example.com/approve/42"
    async with mcp_client(hub) as client:
        asking = asyncio.ensure_future(
            client.call_tool(
                "ask_reviewer",
                {
                    "message": "Approve on the vendor's page",
                    "mode": "url",
                    "url": url,
                    "elicitationId": "el-42",
                    "queue": hub.queue,
                    "waitSeconds": 30,
                },
            )
        )
        seen = await scripted_reviewer.answer_next("accept")
        answered = structured(await asyncio.wait_for(asking, 60))
        refused = await client.call_tool(
            "ask_reviewer", {"message": "x", "mode": "url", "url": "javascript:alert(1)", "queue": hub.queue}
        )
        both = await client.call_tool(
            "ask_reviewer",
            {"message": "x", "mode": "url", "url": url, "requestedSchema": SCHEMA, "queue": hub.queue},
        )
    with agent_api(hub) as api:
        rest = api.post(
            "/requests",
            json={"message": "x", "mode": "url", "url": "javascript:alert(1)", "queue": hub.queue},
        )

    assert (seen["mode"], seen["url"]) == ("url", url)
    assert (answered["mode"], answered["elicitationId"], answered["result"]) == (
        "url",
        "el-42",
        {"action": "accept"},
    )
    assert error_body(refused) == rest.json()
    assert rest.json()["code"] == "invalid"
    assert error_body(both)["fields"] == {"requestedSchema": "only allowed in form mode"}


async def test_collect_secret_returns_only_the_outcome_and_the_secret_never_crosses_mcp(hub: Hub) -> None:
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
        asking = asyncio.ensure_future(
            client.call_tool(
                "collect_secret",
                {
                    "message": "Paste the deploy token",
                    "requestedSchema": schema,
                    "queue": hub.queue,
                    "waitSeconds": 30,
                },
            )
        )
        flow_id = await wait_for_flow(hub)

        def reviewer_enters_the_secret() -> None:
            hosted_flows.claim_flow(flow_id, reviewer)
            hosted_flows.complete_hosted_flow(flow_id, user=reviewer, content={"token": SECRET})

        await sync_to_async(reviewer_enters_the_secret)()
        outcome = structured(await asyncio.wait_for(asking, 60))
        read_back = await client.call_tool("get_request", {"id": outcome["requestId"]})

    assert outcome["flowId"] == flow_id
    assert (outcome["status"], outcome["action"]) == ("completed", "accept")
    assert outcome["redeem"] == f"POST /api/v1/flows/{flow_id}/retrieve with the agent key"
    assert structured(read_back)["result"] == {"action": "accept"}
    assert all(SECRET.encode() not in chunk for chunk in recording.wire)
    with agent_api(hub) as api:  # the agent's backend redeems it once, with its key
        assert api.post(f"/flows/{flow_id}/retrieve").json()["content"] == {"token": SECRET}


def flow_id_of(url: str) -> str | None:
    """The flow id in one of ReviewHub's own flow URLs (`hosted_flows.flow_url`), else None."""
    prefix = f"{settings.PUBLIC_URL}{hosted_flows.FLOW_PATH_PREFIX}"
    return url[len(prefix) : -1] if url.startswith(prefix) and url.endswith("/") else None


async def wait_for_flow(hub: Hub, seconds: float = 30) -> str:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        with agent_api(hub) as api:
            rows = api.get("/requests", params={"status": "open"}).json()
        for row in rows:
            flow = flow_id_of(row["url"]) if row["mode"] == "url" else None
            if flow is not None:
                return str(flow)
        await asyncio.sleep(0.05)
    raise AssertionError("no hosted flow was opened")


async def test_collect_secret_needs_the_flows_capability(hub: Hub) -> None:
    async with mcp_client(hub) as client:
        refused = await client.call_tool(
            "collect_secret",
            {
                "message": "Token?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"t": {"type": "string", "sensitive": True}},
                },
                "queue": hub.queue,
            },
        )
    with agent_api(hub) as api:
        rest = api.post(
            "/flows",
            json={
                "message": "Token?",
                "requestedSchema": {
                    "type": "object",
                    "properties": {"t": {"type": "string", "sensitive": True}},
                },
                "queue": hub.queue,
            },
        )
    assert error_body(refused) == rest.json()
    assert rest.status_code == 403
