"""A tool call held by the MCP gateway, approved by a person in Chromium: the SDK client's `tools/call` through
`/mcp/gateway/tools/` waits, the request page shows it as a yes/no approval naming the server, tool and arguments,
one click on Approve forwards it, and the stdio upstream (the gateway's child process) runs it exactly once."""

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import expect

from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import accounts
from tests.browser.conftest import SCREENSHOTS, WAIT_MS, session_cookie
from tests.delivery.liveserver import REPO, LiveServer

pytestmark = [pytest.mark.browser, pytest.mark.mcp]

UPSTREAM = REPO / "tests" / "mcp" / "servers" / "gateway_upstream.py"
SECRET = "upstream-secret-in-the-browser-test"


@pytest.fixture(scope="module")
def gateway_server(
    django_db_setup: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, Path]]:
    call_log = tmp_path_factory.mktemp("gateway-browser") / "calls.jsonl"
    env = {"UPSTREAM_CALL_LOG": str(call_log), "UPSTREAM_EXPECTED_TOKEN": SECRET, "UPSTREAM_TOKEN": SECRET}
    upstreams = {"tools": {"command": [sys.executable, str(UPSTREAM)], "env": env, "queue": "gw-browser"}}
    server = LiveServer(
        env={"MCP_GATEWAY_UPSTREAMS": json.dumps(upstreams), "MCP_PROGRESS_INTERVAL_SECONDS": "1"}
    )
    server.env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    server.start()
    try:
        yield server.url, call_log
    finally:
        server.stop()


def call_in_thread(url: str, key: str, outcome: dict[str, Any]) -> threading.Thread:
    """The agent's held call, on an event loop of its own (Playwright's sync API holds this thread's)."""

    async def call() -> None:
        async with (
            httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {key}"}, timeout=httpx2.Timeout(30, read=120)
            ) as http,
            Client(streamable_http_client(url + "/mcp/gateway/tools/", http_client=http)) as client,
        ):
            outcome["result"] = await client.call_tool("deploy", {"version": "4.2", "environment": "staging"})

    thread = threading.Thread(target=lambda: asyncio.run(call()), daemon=True)
    thread.start()
    return thread


def held_request(seconds: float = 60) -> ElicitationRequest:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = ElicitationRequest.objects.filter(status="pending").first()
        if found is not None:
            return found
        time.sleep(0.05)
    raise AssertionError("the gateway's approval request never reached the queue")


def test_a_person_approves_a_held_tool_call_on_the_request_page(
    browser: Any, gateway_server: tuple[str, Path], transactional_db: None
) -> None:
    url, call_log = gateway_server
    queue = Queue.objects.create(
        slug="gw-browser", name="Gateway", lease_seconds=60, default_deadline_seconds=600
    )
    alice = User.objects.create_user("alice")
    queue.members.add(alice)
    _, key = accounts.create_agent("gw-browser-agent", queue_slugs=["gw-browser"])
    outcome: dict[str, Any] = {}
    thread = call_in_thread(url, key, outcome)

    request = held_request()
    context = browser.new_context(base_url=url, viewport={"width": 1280, "height": 860})
    context.set_default_timeout(WAIT_MS)
    context.add_cookies([session_cookie(alice, url)])
    page = context.new_page()
    page.goto(f"/requests/{request.pk}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(
        "Allow the tool call 'deploy' on the MCP server 'tools'?"
    )
    facts = page.locator("#who-facts")
    expect(facts).to_contain_text("tools")
    expect(facts).to_contain_text("deploy")
    expect(page.locator("body")).to_contain_text("staging")
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "gateway-approval.png"), full_page=True)
    assert not call_log.exists()  # held: the upstream has seen nothing
    page.locator("#approve-button").click()
    thread.join(60)
    context.close()

    result = outcome["result"]
    assert not result.is_error, result.content
    assert result.content[0].text == "deployed 4.2 to staging"
    calls = [json.loads(line) for line in call_log.read_text().splitlines()]
    assert calls == [
        {"tool": "deploy", "arguments": {"version": "4.2", "environment": "staging"}, "transport": "stdio"}
    ]
    request.refresh_from_db()
    assert request.status == "completed" and request.answered_by_id == alice.pk
