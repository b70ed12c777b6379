"""ReviewHub's own MCP server at /mcp/: a real `mcp` client over streamable HTTP against a live uvicorn."""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from elicitation.models import Agent
from elicitation.queue import accounts
from tests.mcp.conftest import Hub, ScriptedReviewer, agent_api

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the deploy?"},
        "note": {"type": "string", "title": "Note"},
    },
    "required": ["approve"],
}


@asynccontextmanager
async def reviewhub_mcp(hub: Hub, *, mode: str = "auto", key: str | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {key or hub.agent_key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http:
        transport = streamable_http_client(hub.url + "/mcp/", http_client=http)
        async with Client(transport, mode=mode) as client:
            yield client


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


async def test_ask_reviewer_returns_the_answer_that_arrives_within_the_wait(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    async with reviewhub_mcp(hub) as client:
        assert client.protocol_version == "2026-07-28"
        asking = asyncio.ensure_future(
            client.call_tool(
                "ask_reviewer",
                {
                    "message": "Deploy 1.4 to production?",
                    "requestedSchema": SCHEMA,
                    "queue": hub.queue,
                    "waitSeconds": 20,
                    "context": {"ticket": "OPS-7"},
                },
            )
        )
        seen = await scripted_reviewer.answer_next("accept", {"approve": True, "note": "after 18:00"})
        request = structured(await asyncio.wait_for(asking, 60))

    assert seen["message"] == "Deploy 1.4 to production?"
    assert seen["context"] == {"ticket": "OPS-7"}
    assert request["id"] == seen["id"]
    assert request["status"] == "completed"
    assert request["result"] == {"action": "accept", "content": {"approve": True, "note": "after 18:00"}}


async def test_a_slow_answer_is_read_later_with_get_request_on_a_2025_connection(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    async with reviewhub_mcp(hub, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        asked = structured(
            await client.call_tool(
                "ask_reviewer", {"message": "Rotate the key?", "requestedSchema": SCHEMA, "queue": hub.queue}
            )
        )
        assert asked["status"] == "pending"
        assert asked["result"] is None

        checking = asyncio.ensure_future(
            client.call_tool("get_request", {"id": asked["id"], "waitSeconds": 20})
        )
        await scripted_reviewer.answer_next("decline")
        later = structured(await asyncio.wait_for(checking, 60))

    assert later["id"] == asked["id"]
    assert later["status"] == "completed"
    assert later["result"] == {"action": "decline"}


async def test_list_open_requests_shows_only_open_ones_and_cancel_request_withdraws(hub: Hub) -> None:
    async with reviewhub_mcp(hub) as client:
        ids = []
        for n in range(2):
            asked = structured(
                await client.call_tool(
                    "ask_reviewer",
                    {"message": f"Question {n}", "requestedSchema": SCHEMA, "queue": hub.queue},
                )
            )
            ids.append(asked["id"])
        withdrawn = structured(await client.call_tool("cancel_request", {"id": ids[0]}))
        listed = structured(await client.call_tool("list_open_requests", {}))["result"]
        again = await client.call_tool("cancel_request", {"id": ids[0]})

    assert withdrawn["status"] == "withdrawn"
    assert [row["id"] for row in listed] == [ids[1]]
    assert again.is_error
    with agent_api(hub) as api:
        assert api.get(f"/requests/{ids[0]}").json()["status"] == "withdrawn"
        rest_again = api.post(f"/requests/{ids[0]}/cancel")
    # The same refusal REST gives, byte for byte: code, words and the status the request is in.
    assert rest_again.status_code == 409
    assert json.loads(again.content[0].text) == rest_again.json() == again.structured_content  # type: ignore[union-attr]
    assert rest_again.json() == {
        "code": "conflict",
        "detail": "Cannot withdraw: the request is withdrawn.",
        "status": "withdrawn",
    }


async def test_bad_arguments_and_other_agents_requests_come_back_as_tool_errors(hub: Hub) -> None:
    _, other_key = await asyncio.to_thread(accounts.create_agent, "other-agent", queue_slugs=[hub.queue])
    async with reviewhub_mcp(hub, key=other_key) as other_client:
        theirs = structured(
            await other_client.call_tool(
                "ask_reviewer", {"message": "Theirs", "requestedSchema": SCHEMA, "queue": hub.queue}
            )
        )
    async with reviewhub_mcp(hub) as client:
        bad_schema = await client.call_tool(
            "ask_reviewer",
            {
                "message": "Nested?",
                "requestedSchema": {"type": "object", "properties": {"a": {"type": "object"}}},
                "queue": hub.queue,
            },
        )
        unknown_queue = await client.call_tool(
            "ask_reviewer", {"message": "Where?", "requestedSchema": SCHEMA, "queue": "nowhere"}
        )
        not_mine = await client.call_tool("get_request", {"id": theirs["id"]})

    def error(result: CallToolResult) -> dict[str, Any]:
        assert result.is_error
        body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
        assert body == result.structured_content
        return body

    assert error(bad_schema)["fields"] == {
        "requestedSchema.properties.a.type": "nested objects are not supported"
    }
    assert error(unknown_queue)["fields"] == {"queue": "unknown queue, or not one this key may post to"}
    assert error(not_mine)["detail"] == "No such request."


async def test_the_endpoint_refuses_missing_and_revoked_keys_and_foreign_hosts(hub: Hub) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx.AsyncClient(base_url=hub.url, timeout=10) as http:
        anonymous = await http.post("/mcp/", json=body, headers=headers)
        agent = await asyncio.to_thread(Agent.objects.get, pk=hub.agent_id)
        await asyncio.to_thread(accounts.revoke_agent, agent)
        revoked = await http.post(
            "/mcp/", json=body, headers={**headers, "Authorization": f"Bearer {hub.agent_key}"}
        )
        foreign = await http.post("/mcp", json=body, headers={**headers, "Host": "evil.example"})
        cross_origin = await http.post(
            "/mcp", json=body, headers={**headers, "Origin": "http://evil.example"}
        )
        elsewhere = await http.get("/mcp/other")

    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")
    assert revoked.status_code == 401
    assert foreign.status_code == 400
    assert cross_origin.status_code == 403
    assert elsewhere.status_code == 404  # only /mcp and /mcp/ belong to the MCP server; the rest is Django's


async def test_a_host_that_gives_up_waiting_withdraws_its_question(hub: Hub) -> None:
    async def ask(client: Client) -> None:
        await client.call_tool(
            "ask_reviewer",
            {"message": "Still there?", "requestedSchema": SCHEMA, "queue": hub.queue, "waitSeconds": 60},
        )

    async with reviewhub_mcp(hub) as client, anyio.create_task_group() as group:
        group.start_soon(ask, client)
        assert await rows_until(hub, "pending") == [("Still there?", "pending")]
        group.cancel_scope.cancel()  # the host gives up: its request (the HTTP POST) is abandoned

    assert await rows_until(hub, "withdrawn") == [("Still there?", "withdrawn")]


async def rows_until(hub: Hub, status: str, seconds: float = 30) -> list[tuple[str, str]]:
    deadline = asyncio.get_running_loop().time() + seconds
    with agent_api(hub) as api:
        while True:
            rows = [
                (row["message"], row["status"])
                for row in api.get("/requests", params={"status": "all"}).json()
            ]
            if (rows and rows[0][1] == status) or asyncio.get_running_loop().time() > deadline:
                return rows
            await asyncio.sleep(0.05)
