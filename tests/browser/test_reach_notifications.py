"""The browser gets the reviewer's attention: the tab title and favicon count what waits in my queues, and with
the tab hidden a desktop notification (permission granted to the test context) announces a new request; clicking
it opens the request."""

import os
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from elicitation.models import Channel, ElicitationRequest, Notice, Queue
from elicitation.queue import accounts
from tests.browser.conftest import WAIT_MS

# The live server is started once per session from this environment: pages poll every second in the tests.
os.environ.setdefault("BROWSER_POLL_SECONDS", "1")

pytestmark = pytest.mark.browser

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean", "title": "OK?"}}}

# Records every Notification the page creates (and still creates the real one), so the test can see it.
RECORD_NOTIFICATIONS = """
(() => {
  const Real = window.Notification;
  window.__shown = [];
  class Recording extends Real {
    constructor(title, options) {
      super(title, options);
      window.__shown.push({title, body: (options || {}).body, tag: (options || {}).tag});
      window.__lastNotification = this;
    }
  }
  Object.defineProperty(Recording, "permission", {get: () => Real.permission});
  Recording.requestPermission = Real.requestPermission.bind(Real);
  window.Notification = Recording;
})();
"""

HIDE_TAB = """
Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
Object.defineProperty(document, "hidden", {configurable: true, get: () => true});
document.dispatchEvent(new Event("visibilitychange"));
"""


def wait_until(page: Any, expression: str, timeout: float = 8.0) -> None:
    """Poll an expression from the test (the CSP forbids the eval that page.wait_for_function needs)."""
    for _ in range(int(timeout * 10)):
        if page.evaluate(expression):
            return
        page.wait_for_timeout(100)
    raise AssertionError(f"still false after {timeout} s: {expression}")


def test_title_count_and_a_desktop_notification_when_a_request_arrives_in_a_hidden_tab(
    asgi_live_server_url: str,
    browser: Any,
    agent_api: Callable[[str], Any],
    screenshot: Callable[[Any, str], Any],
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments")
    user = User.objects.create_user("alice", password="pw-alice")
    queue.members.add(user)
    _, key = accounts.create_agent("agent-a", queue_slugs=["payments"])
    api = agent_api(key)
    api.create(queue="payments", message="First: approve 100 EUR?", mode="form", requestedSchema=SCHEMA)

    from tests.browser.conftest import session_cookie

    context = browser.new_context(base_url=asgi_live_server_url)
    context.set_default_timeout(WAIT_MS)
    context.grant_permissions(["notifications"], origin=asgi_live_server_url)
    context.add_cookies([session_cookie(user, asgi_live_server_url)])
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    try:
        page.goto("/")
        expect(page).to_have_title("(1) Queues · ReviewHub")
        assert page.evaluate("document.querySelector('link[rel~=icon]').dataset.count") == "1"
        page.evaluate(HIDE_TAB)

        created = api.create(
            queue="payments", message="Second: wire 2,000 EUR to ACME?", mode="form", requestedSchema=SCHEMA
        )
        wait_until(page, "window.__shown.length === 1")
        [shown] = page.evaluate("window.__shown")
        assert shown["title"] == "Payments: new request"
        assert shown["body"] == "Second: wire 2,000 EUR to ACME?"
        expect(page).to_have_title("(2) Queues · ReviewHub")
        screenshot(page, "reach-title-count")

        # The shown notification is the browser channel's first notice (time to a human).
        request = ElicitationRequest.objects.get(pk=created["id"])
        for _ in range(50):
            if Notice.objects.filter(request=request, channel=Channel.BROWSER, user=user).exists():
                break
            page.wait_for_timeout(100)
        assert Notice.objects.filter(request=request, channel=Channel.BROWSER, user=user).exists()

        # Clicking it opens the request.
        page.evaluate("window.__lastNotification.onclick()")
        page.wait_for_url(f"**/requests/{created['id']}/")
        # Seen once: no second notification for the same request on the next polls.
        page.evaluate(HIDE_TAB)
        page.wait_for_timeout(1500)
        assert page.evaluate("window.__shown.length") == 0  # a new page: nothing new to announce
    finally:
        context.close()


def test_no_notification_without_permission_and_an_opt_in_button(
    asgi_live_server_url: str, browser: Any, agent_api: Callable[[str], Any]
) -> None:
    queue = Queue.objects.create(slug="ops", name="Ops")
    user = User.objects.create_user("bob", password="pw-bob")
    queue.members.add(user)
    _, key = accounts.create_agent("agent-b", queue_slugs=["ops"])
    from tests.browser.conftest import session_cookie

    context = browser.new_context(base_url=asgi_live_server_url)
    context.set_default_timeout(WAIT_MS)
    context.add_cookies([session_cookie(user, asgi_live_server_url)])
    context.add_init_script(RECORD_NOTIFICATIONS)
    page = context.new_page()
    try:
        page.goto("/")
        expect(page).to_have_title("Queues · ReviewHub")
        expect(page.locator(".reach-opt-in")).to_be_visible()
        page.evaluate(HIDE_TAB)
        agent_api(key).create(queue="ops", message="Restart?", mode="form", requestedSchema=SCHEMA)
        expect(page).to_have_title("(1) Queues · ReviewHub")
        assert page.evaluate("window.__shown.length") == 0
    finally:
        context.close()
