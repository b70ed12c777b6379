"""Fixtures for agent CI, end to end: an MCP server built with the official SDK, the ReviewHub bridge and a person
answering give tool results; `export_fixture` turns those answers into a rules file; a scripted queue loaded with
it gives the same tool results with nobody at the keyboard, and declines what nobody answered."""

import asyncio
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from mcp import Client

from elicitation.models import Agent, Queue
from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.mcp.conftest import Hub, ScriptedReviewer
from tests.mcp.servers.approvals import server as approvals

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

CI_QUEUE = "mcp-ci"
CALLS: list[tuple[str, dict[str, Any], str, dict[str, Any] | None]] = [
    ("deploy", {"version": "1.4"}, "accept", {"approve": True, "note": "after 18:00"}),
    ("deploy", {"version": "1.5"}, "decline", None),
    ("deploy", {"version": "1.6"}, "accept", {"approve": False, "note": "not on a Friday"}),
]


def text(result: Any) -> str:
    assert not result.is_error, result.content
    return str(result.content[0].text)


async def test_a_fixture_exported_from_real_answers_replays_the_same_tool_results(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient, tmp_path: Path
) -> None:
    # A person answers a session of tool calls.
    human: list[str] = []
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(approvals, elicitation_callback=bridge) as client:
        for tool, arguments, action, content in CALLS:
            calling = asyncio.ensure_future(bridge.call_tool(client, tool, arguments))
            await scripted_reviewer.answer_next(action, content)
            human.append(text(await asyncio.wait_for(calling, 60)))
    assert human == [
        "deploy 1.4: approved (after 18:00)",
        "deploy 1.5: decline",
        "deploy 1.6: rejected (not on a Friday)",
    ]

    # The recording becomes a scripted queue's rules.
    fixture = tmp_path / "deploys.yaml"
    await asyncio.to_thread(call_command, "export_fixture", hub.queue, "--output", str(fixture))
    await asyncio.to_thread(call_command, "import_rules", CI_QUEUE, str(fixture))
    await asyncio.to_thread(
        lambda: Agent.objects.get(pk=hub.agent_id).queues.add(Queue.objects.get(slug=CI_QUEUE))
    )

    # CI: the same calls, nobody at the keyboard, the same results.
    replay: list[str] = []
    ci_bridge = ReviewHubElicitation(reviewhub_client, queue=CI_QUEUE)
    async with Client(approvals, elicitation_callback=ci_bridge) as client:
        for tool, arguments, _, _ in CALLS:
            replay.append(text(await asyncio.wait_for(ci_bridge.call_tool(client, tool, arguments), 30)))
        unknown = text(await asyncio.wait_for(ci_bridge.call_tool(client, "deploy", {"version": "9.9"}), 30))

    assert replay == human
    assert unknown == "deploy 9.9: decline"
    assert len(scripted_reviewer.seen) == len(CALLS)  # the replay never reached a person
