"""The elicitation bridge: real MCP servers (in memory and stdio subprocesses) whose tools elicit, a real `mcp`
client whose `elicitation_callback` is `ReviewHubElicitation`, a live ReviewHub, and a scripted reviewer."""

import asyncio
from typing import Any

import pytest
from mcp import Client
from mcp.types import CallToolResult

from reviewhub_client import AsyncReviewHubClient, ReviewHubClient
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.mcp.conftest import Hub, ScriptedReviewer, agent_requests, approvals_stdio, free_port
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
    assert agent_requests(hub)[0]["result"] == {"action": "accept"}


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


async def test_no_answer_within_the_timeout_is_a_cancel_and_withdraws_the_request(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue, timeout=1)
    async with Client(approvals, elicitation_callback=bridge) as client:
        output = text(await asyncio.wait_for(bridge.call_tool(client, "deploy", {"version": "4.0"}), 20))

    assert output == "deploy 4.0: cancel"
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


async def test_an_unreachable_reviewhub_is_a_prompt_cancel_not_an_error(hub: Hub) -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    async with AsyncReviewHubClient(nowhere, hub.agent_key, max_retries=1) as unreachable:
        bridge = ReviewHubElicitation(unreachable, queue=hub.queue)
        async with Client(approvals, elicitation_callback=bridge, mode="legacy") as client:
            output = text(
                await asyncio.wait_for(bridge.call_tool(client, "deploy_now", {"version": "6.0"}), 20)
            )

    assert output == "deploy 6.0 now: cancel"
