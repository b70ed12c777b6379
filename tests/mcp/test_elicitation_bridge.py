"""The elicitation bridge: real MCP servers (in memory and stdio subprocesses) whose tools elicit, a real `mcp`
client whose `elicitation_callback` is `ReviewHubElicitation`, a live ReviewHub, and a scripted reviewer."""

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx2
import pytest
from asgiref.sync import sync_to_async
from mcp import Client, types
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from elicitation.models import ElicitationRequest
from reviewhub_client import AsyncReviewHubClient, ReviewHubClient
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.answers import answer_of
from tests.delivery.liveserver import free_port
from tests.mcp.conftest import (
    REPO,
    SERVERS,
    Hub,
    ScriptedReviewer,
    agent_requests,
    approvals_stdio,
)
from tests.mcp.servers.approvals import server as approvals

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"title": "Approve?", "type": "boolean"},
        "note": {"default": "", "title": "Note for the operator", "type": "string"},
    },
    "required": ["approve"],
}


def text(result: CallToolResult) -> str:
    assert not result.is_error, result.content
    return result.content[0].text  # type: ignore[union-attr]


async def call_while_reviewer_answers(
    bridge: ReviewHubElicitation,
    client: Client,
    tool: str,
    arguments: dict[str, Any],
    reviewer: ScriptedReviewer,
    action: str,
    content: dict[str, Any] | None = None,
) -> tuple[str, dict[str, Any]]:
    calling = asyncio.ensure_future(bridge.call_tool(client, tool, arguments))
    seen = await reviewer.answer_next(action, content)
    return text(await asyncio.wait_for(calling, 60)), seen


async def test_a_2026_resolver_tool_gets_the_reviewers_exact_answer(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(approvals, elicitation_callback=bridge) as client:
        assert client.protocol_version == "2026-07-28"
        output, seen = await call_while_reviewer_answers(
            bridge,
            client,
            "deploy",
            {"version": "1.4"},
            scripted_reviewer,
            "accept",
            {"approve": True, "note": "after 18:00"},
        )

    assert output == "deploy 1.4: approved (after 18:00)"
    assert seen["mode"] == "form"
    assert seen["message"] == "Deploy 1.4 to production?"
    assert seen["requestedSchema"] == APPROVAL_SCHEMA
    assert seen["context"] == {
        "mcp": {
            "server": "deploy-approvals",
            "protocolVersion": "2026-07-28",
            "inputKey": "tests.mcp.servers.approvals:ask_approval",
            "tool": "deploy",
            "arguments": {"version": "1.4"},
        }
    }
    assert [row["status"] for row in agent_requests(hub)] == ["completed"]


async def test_a_2025_ctx_elicit_tool_over_stdio_hears_a_decline(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue, context={"team": "ops"})
    async with Client(approvals_stdio(), elicitation_callback=bridge, mode="legacy") as client:
        assert client.protocol_version == "2025-11-25"
        output, seen = await call_while_reviewer_answers(
            bridge, client, "deploy_now", {"version": "1.5"}, scripted_reviewer, "decline"
        )

    assert output == "deploy 1.5 now: decline"
    assert seen["message"] == "Deploy 1.5 right now?"
    mcp = seen["context"]["mcp"]
    assert seen["context"]["team"] == "ops"
    assert (mcp["server"], mcp["protocolVersion"], mcp["tool"]) == (
        "deploy-approvals",
        "2025-11-25",
        "deploy_now",
    )
    assert mcp["arguments"] == {"version": "1.5"}
    assert isinstance(mcp["requestId"], int)  # the JSON-RPC id of the server's elicitation/create


async def test_a_2026_call_over_stdio_hears_a_cancel(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue, server_name="approvals (stdio)")
    async with Client(approvals_stdio(), elicitation_callback=bridge) as client:
        assert client.protocol_version == "2026-07-28"
        output, seen = await call_while_reviewer_answers(
            bridge, client, "deploy", {"version": "2.0"}, scripted_reviewer, "cancel"
        )

    assert output == "deploy 2.0: cancel"
    assert seen["context"]["mcp"]["server"] == "approvals (stdio)"
    assert seen["context"]["mcp"]["inputKey"] == "__main__:ask_approval"


async def test_a_url_elicitation_keeps_its_id_and_returns_no_content_through_the_sync_client(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    with ReviewHubClient(hub.url, hub.agent_key) as blocking:  # run off the MCP session's event loop
        bridge = ReviewHubElicitation(blocking, queue=hub.queue)
        async with Client(approvals, elicitation_callback=bridge, mode="legacy") as client:
            output, seen = await call_while_reviewer_answers(
                bridge, client, "link_account", {"provider": "acme"}, scripted_reviewer, "accept"
            )

    assert output == "link acme: accept"
    assert (seen["mode"], seen["url"], seen["elicitationId"]) == (
        "url",
        "https://billing.example.com/connect/acme",
        "link-acme",
    )
    assert answer_of(agent_requests(hub)[0]["result"]) == {"action": "accept"}


async def test_two_questions_of_one_round_become_two_requests_answered_separately(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(approvals, elicitation_callback=bridge) as client:
        calling = asyncio.ensure_future(bridge.call_tool(client, "release", {"version": "3.0"}))
        answers = {"When may 3.0 go out?": {"start": "06:30"}, "Deploy 3.0 to production?": {"approve": True}}
        for _ in range(2):
            claimed = await scripted_reviewer.claim_next()
            await scripted_reviewer.respond(claimed["id"], "accept", answers[claimed["message"]])
        output = text(await asyncio.wait_for(calling, 60))

    assert output == "release 3.0 at 06:30: approved (no note)"
    assert sorted(seen["context"]["mcp"]["inputKey"] for seen in scripted_reviewer.seen) == [
        "tests.mcp.servers.approvals:ask_approval",
        "tests.mcp.servers.approvals:ask_window",
    ]


async def test_no_answer_within_the_timeout_is_a_timeout_error_and_withdraws_the_request(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue, timeout=1)
    async with bridge.connect(approvals, mode="legacy") as client:
        with pytest.raises(MCPError, match="No ReviewHub reviewer answered within 1 s") as raised:
            await asyncio.wait_for(bridge.call_tool(client, "deploy_now", {"version": "4.0"}), 20)

    assert raised.value.code == types.REQUEST_TIMEOUT
    assert [row["status"] for row in agent_requests(hub)] == ["withdrawn"]


async def test_on_failure_cancel_keeps_the_old_answer_for_a_timeout(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue, timeout=1, on_failure="cancel")
    async with Client(approvals, elicitation_callback=bridge) as client:
        output = text(await asyncio.wait_for(bridge.call_tool(client, "deploy", {"version": "4.1"}), 20))

    assert output == "deploy 4.1: cancel"
    assert [row["status"] for row in agent_requests(hub)] == ["withdrawn"]


async def test_an_expired_request_gives_the_queues_expiry_outcome_cancel_by_default(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue, expires_in=1)
    async with Client(approvals, elicitation_callback=bridge) as client:
        output = text(await asyncio.wait_for(bridge.call_tool(client, "deploy", {"version": "5.0"}), 20))

    assert output == "deploy 5.0: cancel"
    [row] = agent_requests(hub)
    assert (row["status"], row["result"]) == ("expired", {"action": "cancel"})


async def test_an_unreachable_reviewhub_is_a_prompt_json_rpc_error_never_a_humans_cancel(hub: Hub) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    async with AsyncReviewHubClient(nowhere, hub.agent_key, max_retries=1) as unreachable:
        bridge = ReviewHubElicitation(unreachable, queue=hub.queue)
        async with bridge.connect(approvals, mode="legacy") as client:
            with pytest.raises(MCPError, match="ReviewHub could not take the question") as raised:
                await asyncio.wait_for(bridge.call_tool(client, "deploy_now", {"version": "6.0"}), 20)
        old_style = ReviewHubElicitation(unreachable, queue=hub.queue, on_failure="cancel")
        async with old_style.connect(approvals, mode="legacy") as client:
            output = text(
                await asyncio.wait_for(old_style.call_tool(client, "deploy_now", {"version": "6.0"}), 20)
            )

    assert raised.value.code == types.INTERNAL_ERROR
    assert output == "deploy 6.0 now: cancel"


async def test_the_bridge_names_itself_and_forwards_elicitation_complete_to_reviewhub(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with bridge.connect(approvals, mode="legacy") as client:
        connecting = asyncio.ensure_future(bridge.call_tool(client, "connect_bank", {"bank": "acme"}))
        seen = await scripted_reviewer.claim_next()
        await client.call_tool("bank_connected", {"bank": "acme"})
        completed = await until(lambda: url_flow_completed(seen["id"]))
        await scripted_reviewer.respond(seen["id"], "accept")
        output = text(await asyncio.wait_for(connecting, 60))

    assert output == "connect acme: accept"
    assert seen["elicitationId"] == "bank-acme"
    assert completed
    assert bridge.client_info.name == "reviewhub-bridge"
    assert bridge.client_info.version


def url_flow_completed(request_id: str) -> bool:
    return ElicitationRequest.objects.filter(pk=request_id, url_flow_completed_at__isnull=False).exists()


async def until(check: Any, seconds: float = 10) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while asyncio.get_running_loop().time() < deadline:
        if await sync_to_async(check)():
            return True
        await asyncio.sleep(0.05)
    return False


async def test_complete_url_reports_a_finished_flow_by_elicitation_id_or_request_id(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    by_elicitation = await reviewhub_client.create(
        "Open it", queue=hub.queue, url="https://vendor.example/flow/1", elicitation_id="flow-1"
    )
    by_request = await reviewhub_client.create(
        "Open that", queue=hub.queue, url="https://vendor.example/flow/2"
    )

    await reviewhub_client.complete_url("flow-1")
    await reviewhub_client.complete_url(request_id=str(by_request.id))
    await reviewhub_client.complete_url("no-such-flow")  # unknown ids are ignored, as MCP requires
    with pytest.raises(ValueError):
        await reviewhub_client.complete_url("flow-1", request_id=str(by_request.id))

    assert await sync_to_async(url_flow_completed)(str(by_elicitation.id))
    assert await sync_to_async(url_flow_completed)(str(by_request.id))


@pytest.fixture
def approvals_over_http() -> Iterator[str]:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVERS / "approvals.py"), "http", str(port)],
        cwd=str(REPO),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                    break
            except OSError:
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        process.wait(timeout=10)


async def test_two_concurrent_calls_on_one_2025_session_each_show_their_own_tool(
    hub: Hub,
    scripted_reviewer: ScriptedReviewer,
    reviewhub_client: AsyncReviewHubClient,
    approvals_over_http: str,
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with (
        bridge.http_client(timeout=httpx2.Timeout(30, read=120)) as http,
        bridge.connect(
            streamable_http_client(approvals_over_http, http_client=http), mode="legacy"
        ) as client,
    ):
        # Plain client.call_tool, both in flight at once: only the wire can tell which call asked what.
        deploying = asyncio.ensure_future(client.call_tool("deploy_now", {"version": "7.0"}))
        linking = asyncio.ensure_future(client.call_tool("link_account", {"provider": "acme"}))
        first = await scripted_reviewer.claim_next()
        second = await scripted_reviewer.claim_next()
        for seen in (first, second):
            answer = {"approve": True} if seen["mode"] == "form" else None
            await scripted_reviewer.respond(seen["id"], "accept", answer)
        outputs = [text(await asyncio.wait_for(call, 60)) for call in (deploying, linking)]

    tools = {seen["message"]: seen["context"]["mcp"] for seen in (first, second)}
    assert tools["Deploy 7.0 right now?"]["tool"] == "deploy_now"
    assert tools["Deploy 7.0 right now?"]["arguments"] == {"version": "7.0"}
    assert tools["Sign in to acme to link the billing account"]["tool"] == "link_account"
    assert tools["Sign in to acme to link the billing account"]["arguments"] == {"provider": "acme"}
    assert outputs == ["deploy 7.0 now: approved (no note)", "link acme: accept"]
