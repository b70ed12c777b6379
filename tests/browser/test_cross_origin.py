"""A page on another origin calls the agent API with fetch, as reviewhub-client does in a browser.

The live server lists `http://127.0.0.1:CROSS_ORIGIN_PORT` in CORS_ALLOWED_ORIGINS (conftest); a tiny server of
this module serves the agent app's page there. The same page reached as `unlisted.localhost` (Chromium resolves
every *.localhost name to loopback) is another origin, one the server does not list."""

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import accounts
from tests.browser.conftest import CROSS_ORIGIN_PORT

pytestmark = pytest.mark.browser

PAGE = b"""<!doctype html>
<html><head><meta charset="utf-8"><title>Agent app</title><script src="/agent-app.js"></script></head>
<body><h1>Agent app</h1></body></html>
"""

# What reviewhub-client sends from a browser: the key in Authorization, a JSON body with an Idempotency-Key, and
# for the socket a single-use ticket (a browser's WebSocket cannot carry a header).
SCRIPT = b"""
"use strict";
window.agentApp = {
  async call(base, key, method, path, body) {
    const headers = { Authorization: `Bearer ${key}` };
    if (body !== undefined) {
      headers["Content-Type"] = "application/json";
      headers["Idempotency-Key"] = body.message;
    }
    try {
      const response = await fetch(base + path, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      return { status: response.status, body: await response.json() };
    } catch (error) {
      return { failed: `${error.name}: ${error.message}` };
    }
  },
  firstFrame(url) {
    return new Promise((resolve) => {
      const socket = new WebSocket(url);
      socket.onmessage = (event) => {
        resolve(JSON.parse(event.data).type);
        socket.close();
      };
      socket.onclose = (event) => resolve(`closed ${event.code}`);
    });
  },
};
"""

SCHEMA = {
    "type": "object",
    "properties": {"deploy": {"type": "boolean", "title": "Deploy now?"}},
    "required": ["deploy"],
}


class AgentAppHandler(BaseHTTPRequestHandler):
    """The agent app's own web server: its page and its script, nothing from a third party."""

    files = {"/": (PAGE, "text/html"), "/agent-app.js": (SCRIPT, "text/javascript")}

    def do_GET(self) -> None:
        body, content_type = self.files.get(self.path, (b"not here", "text/plain"))
        self.send_response(200 if self.path in self.files else 404)
        self.send_header("Content-Type", f"{content_type}; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def agent_app() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", CROSS_ORIGIN_PORT), AgentAppHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield CROSS_ORIGIN_PORT
    server.shutdown()
    server.server_close()


@pytest.fixture
def billing_bot(asgi_live_server_url: str) -> tuple[Agent, str]:
    Queue.objects.create(slug="deploys", name="Deploys")
    return accounts.create_agent("browser-bot", queue_slugs=["deploys"])


def open_agent_app(open_page: Callable[..., Any], url: str) -> Any:
    page = open_page(path="")
    page.goto(url)
    page.wait_for_function("window.agentApp !== undefined")
    return page


def call(page: Any, base: str, key: str, method: str, path: str, body: Any = None) -> dict[str, Any]:
    return dict(
        page.evaluate(
            "([base, key, method, path, body]) => agentApp.call(base, key, method, path, body ?? undefined)",
            [base, key, method, path, body],
        )
    )


def ask(message: str) -> dict[str, Any]:
    return {"queue": "deploys", "message": message, "requestedSchema": SCHEMA}


def test_a_page_on_a_listed_origin_creates_a_request_and_reads_it_back(
    open_page: Callable[..., Any], asgi_live_server_url: str, agent_app: int, billing_bot: tuple[Agent, str]
) -> None:
    agent, key = billing_bot
    page = open_agent_app(open_page, f"http://127.0.0.1:{agent_app}/")

    created = call(page, asgi_live_server_url, key, "POST", "/api/v1/requests", ask("Deploy build 42?"))
    assert created.get("status") == 201, created
    read = call(page, asgi_live_server_url, key, "GET", f"/api/v1/requests/{created['body']['id']}")

    assert read == {"status": 200, "body": read["body"]}
    assert (read["body"]["id"], read["body"]["status"]) == (created["body"]["id"], "pending")
    assert ElicitationRequest.objects.filter(agent=agent).count() == 1


def test_a_page_on_a_listed_origin_long_polls_and_opens_the_agent_socket(
    open_page: Callable[..., Any], asgi_live_server_url: str, agent_app: int, billing_bot: tuple[Agent, str]
) -> None:
    _, key = billing_bot
    page = open_agent_app(open_page, f"http://127.0.0.1:{agent_app}/")
    created = call(page, asgi_live_server_url, key, "POST", "/api/v1/requests", ask("Roll back build 41?"))
    path = f"/api/v1/requests/{created['body']['id']}?wait=1"
    # A caller without an Origin long-polls the route first, so the page's answer cannot be a copy of its headers.
    assert (
        httpx.get(asgi_live_server_url + path, headers={"Authorization": f"Bearer {key}"}).status_code == 200
    )

    polled = call(page, asgi_live_server_url, key, "GET", path)
    ticket = call(page, asgi_live_server_url, key, "POST", "/api/v1/ws-ticket")
    socket_url = (
        f"{asgi_live_server_url.replace('http', 'ws', 1)}/ws/agent/?ticket={ticket['body']['ticket']}"
    )
    first_frame = page.evaluate("(url) => agentApp.firstFrame(url)", socket_url)

    assert (polled.get("status"), polled["body"]["status"]) == (200, "pending")
    assert ticket.get("status") == 201
    assert first_frame == "hello"


def test_a_page_on_an_unlisted_origin_cannot_call_the_agent_api(
    open_page: Callable[..., Any], asgi_live_server_url: str, agent_app: int, billing_bot: tuple[Agent, str]
) -> None:
    agent, key = billing_bot
    page = open_agent_app(open_page, f"http://unlisted.localhost:{agent_app}/")

    created = call(page, asgi_live_server_url, key, "POST", "/api/v1/requests", ask("Deploy build 43?"))
    ticket = call(page, asgi_live_server_url, key, "POST", "/api/v1/ws-ticket")

    assert created == {"failed": "TypeError: Failed to fetch"}
    assert ticket == {"failed": "TypeError: Failed to fetch"}
    # Refused by CORS (the preflight), not by a dead server; the create itself was never sent.
    blocked = [text for text in page.watch.console_errors if "blocked by CORS policy" in text]
    assert len(blocked) == 2, page.watch.console_errors
    assert ElicitationRequest.objects.filter(agent=agent).count() == 0


def test_the_agent_socket_is_opened_by_a_ticket_whatever_the_pages_origin(
    open_page: Callable[..., Any], asgi_live_server_url: str, agent_app: int, billing_bot: tuple[Agent, str]
) -> None:
    """The socket takes no cookie, so the origin guards nothing there: the ticket (which the page's own backend got
    with the key) is what lets it in, and without one no origin gets in."""
    _, key = billing_bot
    minted = httpx.post(
        f"{asgi_live_server_url}/api/v1/ws-ticket", headers={"Authorization": f"Bearer {key}"}
    )
    page = open_agent_app(open_page, f"http://unlisted.localhost:{agent_app}/")
    socket_url = f"{asgi_live_server_url.replace('http', 'ws', 1)}/ws/agent/"

    with_ticket = page.evaluate(
        "(url) => agentApp.firstFrame(url)", f"{socket_url}?ticket={minted.json()['ticket']}"
    )
    without = page.evaluate("(url) => agentApp.firstFrame(url)", socket_url)

    assert with_ticket == "hello"
    assert without == "closed 4401"
