"""End to end in a real browser against a live server: an MCP server opens a hosted flow, the MCP client forwards
the URL elicitation to ReviewHub, a reviewer claims it, opens the flow from the request page, types the secret;
the MCP side sees `accept` with no content, the server retrieves exactly that value once, and nothing else it can
reach (server log, database file, socket frames, webhooks, pages) ever held it."""

import contextlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.answers import answer_of
from tests.flows.conftest import LiveServer, new_secret
from tests.flows.leaks import LeakSearch, WebhookReceiver, sqlite_file_bytes, sqlite_file_rows

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
]
SCHEMA = {
    "type": "object",
    "properties": {"api_token": {"type": "string", "title": "Registry token", "sensitive": True}},
    "required": ["api_token"],
}

pytestmark = pytest.mark.browser


class SocketFrames:
    """The agent's WebSocket, read on a thread until closed."""

    def __init__(self, server: LiveServer, request_ids: list[str]) -> None:
        url = server.base_url.replace("http://", "ws://") + "/ws/agent/"
        self._stack = contextlib.ExitStack()
        self.socket = self._stack.enter_context(
            connect(url, additional_headers={"Authorization": f"Bearer {server.agent_key}"})
        )
        self.frames: list[str] = []
        self.socket.send(json.dumps({"type": "subscribe", "ids": request_ids}))
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for message in self.socket:
                self.frames.append(str(message))
        except Exception:  # closing the socket ends the loop
            pass

    def wait_for(self, count: int, kind: str, timeout: float = 10) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [json.loads(f) for f in self.frames if json.loads(f).get("type") == kind]
            if len(found) >= count:
                return found
            time.sleep(0.1)
        raise AssertionError(f"expected {count} {kind} frames, got {self.frames}")

    def close(self) -> None:
        self._stack.close()
        self.thread.join(timeout=5)


def test_a_reviewer_enters_a_secret_that_only_the_agents_server_retrieves(
    flows_live_server: LiveServer,
) -> None:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing (make browser installs it)")
    from playwright.sync_api import sync_playwright

    server = flows_live_server
    secret = new_secret()
    search = LeakSearch(secret)
    agent = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {server.agent_key}"})
    responses: list[str] = []

    def agent_call(method: str, path: str, **kwargs: Any) -> httpx.Response:
        response = agent.request(method, path, **kwargs)
        responses.append(f"{method} {path} -> {response.status_code}\n{response.text}")
        return response

    with WebhookReceiver() as receiver:
        # The MCP server (holding flows:secrets) opens the flow...
        flow = agent_call(
            "POST",
            "/api/v1/flows",
            json={
                "message": "The deploy tool needs your registry token.",
                "requestedSchema": SCHEMA,
                "queue": "secrets",
                "callbackUrl": receiver.url,
            },
        ).json()
        assert flow["url"] == f"{server.base_url}/flows/{flow['id']}/"
        # ...and the MCP client forwards the resulting URL-mode elicitation to ReviewHub, as it would any other.
        elicitation = flow["elicitation"]
        forwarded = agent_call(
            "POST",
            "/api/v1/requests",
            json={**elicitation, "queue": "secrets", "callbackUrl": receiver.url},
        ).json()
        assert forwarded["mode"] == "url" and forwarded["url"] == flow["url"]
        sockets = SocketFrames(server, [flow["requestId"], forwarded["id"]])

        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
            context = browser.new_context()
            pages_seen: list[str] = []
            context.on(
                "response",
                lambda r: pages_seen.append(r.url) if r.request.resource_type == "document" else None,
            )
            page = context.new_page()
            # Opening the flow URL without a session leads to the sign-in page, not to the form.
            page.goto(flow["url"])
            assert "/accounts/login/" in page.url
            page.fill("input[name=username]", server.reviewer)
            page.fill("input[name=password]", server.reviewer_password)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            # The reviewer opens the forwarded request (a look claims nothing), claims it, and follows its link.
            page.goto(f"{server.base_url}/requests/{forwarded['id']}/")
            assert page.locator("#url-host").inner_text() == "127.0.0.1"
            page.locator("#claim-form button").click()
            page.wait_for_load_state()
            with context.expect_page() as opened:
                page.click("#open-url")
            flow_page = opened.value
            flow_page.wait_for_load_state()
            assert flow_page.url == flow["url"]
            # The flow page, too, shows before it binds: the reviewer claims the flow, then gets the form.
            flow_page.get_by_role("button", name="Claim and answer").click()
            flow_page.wait_for_load_state()
            token_input = flow_page.locator("input[name='answer-api_token']")
            assert token_input.get_attribute("type") == "password"
            assert token_input.get_attribute("autocomplete") == "off"
            token_input.fill(secret)
            flow_page.get_by_role("button", name="Submit securely").click()
            flow_page.wait_for_load_state()
            assert flow_page.locator("h1").inner_text() == "Submitted"
            page_texts = [flow_page.content()]
            page.goto(f"{server.base_url}/requests/{forwarded['id']}/")
            page_texts.append(page.content())
            page.go_back()
            browser.close()

        # The MCP side: accept, and no content, for both the forwarded elicitation and the flow's own request.
        for request_id in (forwarded["id"], flow["requestId"]):
            result = agent_call("GET", f"/api/v1/requests/{request_id}?wait=5").json()
            assert (result["status"], answer_of(result["result"])) == ("completed", {"action": "accept"})
        completed = sockets.wait_for(2, "completed")
        assert all(answer_of(frame["result"]) == {"action": "accept"} for frame in completed)
        agent_call("GET", "/api/v1/events?after=0")
        # The agent's server retrieves exactly the typed value, once.
        retrieved = agent.post(f"/api/v1/flows/{flow['id']}/retrieve")
        assert retrieved.status_code == 200
        assert retrieved.json() == {"id": flow["id"], "content": {"api_token": secret}}
        assert agent_call("POST", f"/api/v1/flows/{flow['id']}/retrieve").status_code == 410
        sockets.close()
        for _ in range(50):
            if len(receiver.bodies) >= 2:
                break
            time.sleep(0.1)
        webhooks = list(receiver.bodies)

    assert len(webhooks) == 2 and all(
        answer_of(json.loads(body)["result"]) == {"action": "accept"} for body in webhooks
    )
    assert any("/flows/" in url for url in pages_seen)
    search.check_all("agent response", responses)
    search.check_all("websocket frame", sockets.frames)
    search.check_all("webhook body", webhooks)
    search.check_all("page", page_texts)
    search.check("server log", server.log_text())
    for where, text in [*sqlite_file_rows(server.database), *sqlite_file_bytes(server.database)]:
        search.check(where, text)
    assert search.hits == []
    assert "POST /flows/" in server.log_text() or search.searched > 50
