"""The MCP door checks URLs as the REST door does: a URL a browser reads differently is a tool error naming `url`,
and nothing is stored."""

import asyncio
import json
from typing import Any

import pytest
from mcp.types import CallToolResult

from elicitation.models import ElicitationRequest
from tests.mcp.conftest import Hub
from tests.mcp.test_reviewhub_mcp_server import reviewhub_mcp

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]


def tool_error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body == result.structured_content
    return body


async def test_ask_reviewer_refuses_a_url_that_a_browser_opens_elsewhere_and_stores_nothing(hub: Hub) -> None:
    async with reviewhub_mcp(hub) as client:
        backslash = await client.call_tool(
            "ask_reviewer",
            {
                "message": "Sign in",
                "mode": "url",
                "url": "https://evil.example\\@accounts.google.com/",
                "queue": hub.queue,
            },
        )
        numeric = await client.call_tool(
            "ask_reviewer",
            {"message": "Sign in", "mode": "url", "url": "http://2130706433/", "queue": hub.queue},
        )

    assert tool_error(backslash)["fields"] == {
        "url": "is read differently by browsers: it opens evil.example, not accounts.google.com; "
        "send the URL as a browser would write it"
    }
    assert "it opens 127.0.0.1, not 2130706433" in tool_error(numeric)["fields"]["url"]
    assert await asyncio.to_thread(ElicitationRequest.objects.count) == 0
