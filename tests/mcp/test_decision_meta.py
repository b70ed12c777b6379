"""The decision's `_meta` reaches the MCP server: an answer rule accepts at intake, the bridge hands the result on,
and the server's tool (a stdio subprocess) sees `reviewhub/decision` with the digest it computes itself from the
docs, and a receipt that verifies against ReviewHub's published keys."""

import json
import sys

import pytest
from asgiref.sync import sync_to_async
from mcp import Client, StdioServerParameters

from elicitation.models import Queue
from elicitation.queue import rules
from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.mcp.conftest import REPO, SERVERS, Hub, agent_requests, subprocess_env

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]


def receipted_stdio(hub: Hub) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=[str(SERVERS / "receipted.py")],
        env=subprocess_env(RH_RECEIPTS_JWKS_URL=hub.url + "/.well-known/reviewhub-receipts.json"),
        cwd=str(REPO),
    )


def auto_accept_transfers(queue_slug: str) -> None:
    rules.replace_policy(
        Queue.objects.get(slug=queue_slug),
        {
            "rules": [
                {
                    "name": "small transfers",
                    "match": {"tool": "transfer", "arguments": {"amount": {"lte": 100}}},
                    "action": "accept",
                    "content": {"approve": True},
                }
            ]
        },
    )


async def test_the_mcp_servers_tool_sees_the_rules_digest_and_a_receipt_it_can_verify(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    await sync_to_async(auto_accept_transfers)(hub.queue)
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(receipted_stdio(hub), elicitation_callback=bridge, mode="legacy") as client:
        result = await bridge.call_tool(client, "transfer", {"amount": 100, "note": "Miete 🏠"})

    assert not result.is_error, result.content
    seen = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert seen["action"] == "accept"
    assert seen["decision"]["rule"]["name"] == "small transfers"
    assert seen["decision"]["digest"] == seen["mine"]
    [stored] = await sync_to_async(agent_requests)(hub)
    assert seen["receipt"] == {"action": "accept", "rule": "small transfers", "request": stored["id"]}


async def test_an_approval_for_other_arguments_is_refused_by_the_server(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    # The bridge tells ReviewHub other arguments than the server will act on: the digest cannot match.
    await sync_to_async(auto_accept_transfers)(hub.queue)
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(receipted_stdio(hub), elicitation_callback=bridge, mode="legacy") as client:
        with bridge.tool_call("transfer", {"amount": 5, "note": "Miete 🏠"}):
            result = await client.call_tool("transfer", {"amount": 100, "note": "Miete 🏠"})

    seen = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert seen["decision"]["digest"] != seen["mine"]
    assert "digest mismatch" in seen["receipt"]["refused"]
