"""In headless Chromium: property names in any script are answered through the page under their exact keys, and a
URL is shown, highlighted and opened as the browser reads it."""

import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from elicitation.models import Queue
from elicitation.queue import accounts, transitions
from tests.answers import answer_of

pytestmark = pytest.mark.browser

CITY = "città"
SPACED = " date of birth "
QUOTED = "\"><img src=x onerror=alert('name')>"
KANJI = "名前"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        CITY: {"type": "string"},
        SPACED: {"type": "string", "format": "date", "title": "Date of birth"},
        QUOTED: {"type": "string", "enum": ["yes", "no"]},
        KANJI: {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
        "skipped one": {"type": "string"},
    },
    "required": [CITY],
}


@pytest.fixture
def desk(asgi_live_server_url: str) -> dict[str, Any]:
    queue = Queue.objects.create(
        slug="payments", name="Payments", lease_seconds=60, default_deadline_seconds=900
    )
    alice = User.objects.create_user("alice")
    queue.members.add(alice)
    agent, key = accounts.create_agent("billing-bot", queue_slugs=["payments"])
    return {"base": asgi_live_server_url, "alice": alice, "agent": agent, "key": key}


def agent_call(desk: dict[str, Any], method: str, path: str, body: Any = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {desk['key']}"}
    return httpx.request(method, f"{desk['base']}{path}", json=body, headers=headers, timeout=10)


def claim_on_page(page: Any) -> None:
    page.locator("button[name='action'][value='claim']").click()
    expect(page.locator("#holder-text")).to_contain_text("You hold this request")


def test_odd_property_names_are_answered_on_the_page_under_their_exact_keys(
    open_page: Any, desk: dict[str, Any], screenshot: Any
) -> None:
    created = agent_call(
        desk,
        "POST",
        "/api/v1/requests",
        {"message": "Tell us about yourself", "requestedSchema": SCHEMA, "queue": "payments"},
    )
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]
    page = open_page(desk["alice"], f"/requests/{request_id}/")
    expect(page.locator("body")).to_have_attribute("data-live", "on")
    claim_on_page(page)

    # Labels show the names as text; ids are derived, so labels and inputs stay tied together.
    expect(page.locator("#q-citta .req")).to_have_text("required")
    page.get_by_label(CITY).fill("Roma")
    page.get_by_label("Date of birth").fill("1990-05-01")
    expect(page.locator("#q-img-src-x-onerror-alert-name legend")).to_contain_text(QUOTED)
    page.locator("#q-img-src-x-onerror-alert-name").get_by_label("yes", exact=True).check()
    page.locator("#q-question").get_by_label("b", exact=True).check()
    # "skipped one", optional, is skipped by leaving it empty.
    assert page.locator("main img").count() == 0
    screenshot(page, "request-form-odd-names")
    page.get_by_role("button", name="Accept").click()

    expect(page.locator(".flash")).to_contain_text("Accepted")
    result = agent_call(desk, "GET", f"/api/v1/requests/{request_id}").json()["result"]
    assert answer_of(result) == {
        "action": "accept",
        "content": {CITY: "Roma", SPACED: "1990-05-01", QUOTED: "yes", KANJI: ["b"]},
    }
    assert page.watch.dialogs == []


class RecordingHandler(BaseHTTPRequestHandler):
    hits: list[tuple[str, str]] = []

    def do_GET(self) -> None:
        type(self).hits.append((self.headers.get("Host", ""), self.path))
        body = b"<!doctype html><title>Opened</title><p>Opened</p>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def loopback_site() -> Iterator[tuple[int, list[tuple[str, str]]]]:
    """A loopback web server; Chromium sends every *.localhost name to it, so it sees which host was opened."""
    handler = type("Handler", (RecordingHandler,), {"hits": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], handler.hits
    server.shutdown()
    server.server_close()


def test_a_backslash_url_is_refused_and_one_stored_before_is_shown_as_the_host_the_browser_opens(
    open_page: Any, desk: dict[str, Any], loopback_site: tuple[int, list[tuple[str, str]]], screenshot: Any
) -> None:
    port, hits = loopback_site
    url = f"http://evil.localhost:{port}\\@accounts.localhost:{port}/login"
    body = {"message": "Sign in", "mode": "url", "url": url, "queue": "payments"}

    refused = agent_call(desk, "POST", "/api/v1/requests", body)

    assert refused.status_code == 400
    assert list(refused.json()["fields"]) == ["url"]
    assert "it opens evil.localhost, not accounts.localhost" in refused.json()["fields"]["url"]

    # A row stored before intake checked this is shown the browser's way: the highlighted host is the opened one.
    stored, _ = transitions.create_request(
        agent=desk["agent"], queue_slug="payments", message="Sign in", mode="url", url=url
    )
    page = open_page(desk["alice"], f"/requests/{stored.pk}/")
    claim_on_page(page)
    expect(page.locator("#url-host")).to_have_text("evil.localhost")
    expect(page.locator("#url-full")).to_have_text(
        f"http://evil.localhost:{port}/@accounts.localhost:{port}/login"
    )
    expect(
        page.locator("[data-url-warning]").filter(has_text="a browser opens evil.localhost")
    ).to_be_visible()
    open_link = page.get_by_role("link", name=re.compile("^Open"))
    expect(open_link).to_have_accessible_name(re.compile("evil.localhost"))
    screenshot(page, "request-url-backslash")

    with page.context.expect_page() as popup_info:
        open_link.click()
    popup = popup_info.value
    popup.wait_for_load_state()
    assert hits[0] == (f"evil.localhost:{port}", f"/@accounts.localhost:{port}/login")
    popup.close()
