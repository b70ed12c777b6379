"""The gateway's AGENT_RATE, counted on a live server: one call per list, read or tool call, none for the session's
initialize and notifications, and never twice for one request (a 2026-07-28 tool call with arguments included: the
SDK checks its `Mcp-Param-*` headers against the tool's schema before dispatch, and the gateway must answer that from
the list it passed on, not by running its charged `tools/list` again)."""

import json
import sys
from collections.abc import Iterator

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from elicitation.models import Queue
from elicitation.queue import accounts
from tests.delivery.liveserver import LiveServer
from tests.mcp.conftest import LiveReviewHub
from tests.mcp.test_gateway import UPSTREAM_SCRIPT

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

QUEUE = "gw-rate"


@pytest.fixture(scope="module")
def server(django_db_setup: None) -> Iterator[LiveServer]:
    upstreams = {
        "tools": {
            "command": [sys.executable, str(UPSTREAM_SCRIPT)],
            "queue": QUEUE,
            "pass": ["read_status", "deploy"],
        }
    }
    # As test_mcp_contract.py's rate_limited_server: counts in the server's own memory (a shared Redis keeps an
    # earlier run's counts under agent ids a new test database hands out again), in a day's window (AGENT_RATE counts
    # in fixed windows; a minute's could end mid-test, while the first request waits for the stdio upstream).
    live = LiveReviewHub(
        MCP_GATEWAY_UPSTREAMS=json.dumps(upstreams), AGENT_RATE="3/day", REDIS_URL=""
    ).start()
    try:
        yield live
    finally:
        live.stop()


@pytest.fixture
def key(server: LiveServer, transactional_db: None) -> str:
    Queue.objects.get_or_create(slug=QUEUE, defaults={"name": "Gateway rate"})
    _, key = accounts.create_agent("gw-rate-agent", queue_slugs=[QUEUE])
    return key


async def test_each_request_is_one_call_of_the_rate_and_the_session_setup_none(
    server: LiveServer, key: str
) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(
            streamable_http_client(f"{server.url}/mcp/gateway/tools/", http_client=http), cache=None
        ) as client,
    ):
        tools = await client.list_tools()  # 1 (initialize and notifications/initialized are not counted)
        first = await client.call_tool("read_status", {})  # 2
        second = await client.call_tool("read_status", {})  # 3
        over = await client.call_tool("read_status", {})  # 4: over the rate, as a tool error
        with pytest.raises(MCPError) as refused:  # 5: over the rate, as a JSON-RPC error
            await client.list_prompts()

    assert "read_status" in {tool.name for tool in tools.tools}
    assert [first.is_error, second.is_error] == [False, False]
    assert over.is_error and over.structured_content is not None
    assert over.structured_content["code"] == "throttled"
    assert refused.value.error.code == -32012
    assert refused.value.error.data["code"] == "throttled"


async def test_a_caller_whose_key_is_wrong_is_not_charged(server: LiveServer, key: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as http:
        for _ in range(5):
            response = await http.post(
                f"{server.url}/mcp/gateway/tools/",
                headers={"Authorization": f"Bearer {key}x", "Accept": "application/json, text/event-stream"},
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            )
            assert response.status_code == 401
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(
            streamable_http_client(f"{server.url}/mcp/gateway/tools/", http_client=http), cache=None
        ) as client,
    ):
        await client.list_tools()  # 1 (the SDK's client lists before its first call of a tool anyway)
        results = [
            await client.call_tool("read_status", {}) for _ in range(2)
        ]  # 2, 3: all of the rate is left
    assert [result.is_error for result in results] == [False, False]


async def test_a_call_with_arguments_is_one_call_of_the_rate_too(server: LiveServer, key: str) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
        Client(
            streamable_http_client(f"{server.url}/mcp/gateway/tools/", http_client=http),
            cache=None,
            mode="2026-07-28",  # the era whose tool calls have their headers checked against the tool's schema
        ) as client,
    ):
        await client.list_tools()  # 1
        first = await client.call_tool("deploy", {"version": "1.0"})  # 2
        second = await client.call_tool("deploy", {"version": "1.1"})  # 3
        over = await client.call_tool("deploy", {"version": "1.2"})  # 4: over the rate

    assert [first.is_error, second.is_error] == [False, False], second.content
    assert over.is_error and over.structured_content is not None
    assert over.structured_content["code"] == "throttled"
