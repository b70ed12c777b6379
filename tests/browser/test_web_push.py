"""Web Push in Chromium: the Preferences page registers the service worker and subscribes this browser; a push
reaches the service worker, which shows the notification with Approve / Reject; Approve records the answer, and the
agent receives it. A replayed token is then refused, and a notification without buttons only opens its request. An
approval whose accept needs a passkey shows "Approve with passkey" (it opens the page, posting nothing) and Decline,
which answers.

Chromium subscribes through its push service (GCM): `--gcm-checkin-url` / `--gcm-registration-url` point it at a
stand-in on loopback (FakeGcm) that hands out a registration, so `pushManager.subscribe()` runs for real and yields
a real subscription (endpoint and keys) that the page saves. That endpoint cannot be reached from here, so the
push itself is delivered through the DevTools Protocol (`ServiceWorker.deliverPushMessage`), with the payload the
server sends (`web_push.payload`); its encryption and VAPID signature are tested against a loopback push service in
tests/delivery/reach/test_web_push.py. Push needs a profile on disk (Chromium refuses push in off-the-record
contexts, which `browser.new_context()` makes), hence a persistent context of this module's own.

A notification's click cannot be made from outside the browser; the test calls the service worker's own click
handler (`handleNotificationClick`, the one its `notificationclick` listener calls) with the notification the
browser lists in `registration.getNotifications()` and the action's name, as Chromium does on a button press.
"""

import json
import struct
import tempfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Error as PlaywrightError

from elicitation.delivery import web_push
from elicitation.models import ElicitationRequest, PushSubscription, Queue
from elicitation.queue import accounts, rules
from tests.browser.conftest import (
    ASYNC_UNSAFE,
    CHROMIUM,
    CHROMIUM_ARGS,
    SCREENSHOTS,
    WAIT_MS,
    session_cookie,
)
from tests.delivery.liveserver import LiveServer
from tests.security.test_step_up import PAY, STEP_UP_RULE

pytestmark = pytest.mark.browser

YES_NO = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}
TWO_QUESTIONS = {
    "type": "object",
    "properties": {
        "region": {"type": "string", "title": "Region"},
        "now": {"type": "boolean", "title": "Now?"},
    },
}
PRIVATE_KEY, PUBLIC_KEY = web_push.generate_keys()
PUSH_ENV = {
    "WEB_PUSH_VAPID_PRIVATE_KEY": PRIVATE_KEY,
    "WEB_PUSH_VAPID_PUBLIC_KEY": PUBLIC_KEY,
    "WEB_PUSH_CONTACT": "mailto:ops@example.com",
}


class FakeGcm:
    """Chromium's push service client talks to this instead of Google's: a check-in (a protobuf naming a device)
    and registrations (a token, from which Chromium makes the subscription's endpoint)."""

    def __init__(self) -> None:
        self.registrations: list[str] = []
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        threading.Thread(target=self._http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        gcm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path == "/checkin":
                    # AndroidCheckinResponse: stats_ok (1) = true, android_id (7), security_token (8), fixed64.
                    answer = b"\x08\x01\x39" + struct.pack("<Q", 4242) + b"\x41" + struct.pack("<Q", 2424)
                else:
                    gcm.registrations.append(body.decode(errors="replace"))
                    answer = f"token=loopback-{len(gcm.registrations)}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

        return Handler


@pytest.fixture(scope="module")
def push_server(django_db_setup: None) -> Iterator[str]:
    """A live server of this module's own: its environment carries the VAPID keys."""
    server = LiveServer(env={**PUSH_ENV, "BROWSER_POLL_SECONDS": "60"})
    server.env.pop(ASYNC_UNSAFE, None)
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="module")
def push_context(push_server: str) -> Iterator[Any]:
    from pathlib import Path

    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    gcm = FakeGcm()
    args = [
        *CHROMIUM_ARGS,
        f"--gcm-checkin-url={gcm.url}/checkin",
        f"--gcm-registration-url={gcm.url}/register",
    ]
    with (
        pytest.MonkeyPatch.context() as patch,
        sync_playwright() as playwright,
        tempfile.TemporaryDirectory(prefix="rh-push-profile-") as profile,
    ):
        patch.setenv(ASYNC_UNSAFE, "true")
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=CHROMIUM, args=args, headless=True, base_url=push_server
        )
        context.set_default_timeout(WAIT_MS)
        context.grant_permissions(["notifications"], origin=push_server)
        try:
            yield context
        finally:
            context.close()
            gcm.stop()


def poll(page: Any, expression: str, arg: Any = None, timeout: float = 10.0) -> Any:
    """Evaluate until truthy (the CSP forbids the eval that page.wait_for_function needs)."""
    for _ in range(int(timeout * 10)):
        value = page.evaluate(expression, arg)
        if value:
            return value
        page.wait_for_timeout(100)
    raise AssertionError(f"still false after {timeout} s: {expression}")


NOTIFICATIONS = """async (tag) => {
  const registration = await navigator.serviceWorker.getRegistration("/");
  const shown = registration ? await registration.getNotifications(tag ? {tag} : undefined) : [];
  return shown.map((n) => ({title: n.title, body: n.body, tag: n.tag, actions: n.actions.map((a) => a.action)}));
}"""

CLICK = """async ([tag, action]) => {
  const [notification] = await self.registration.getNotifications({tag});
  return await self.handleNotificationClick(notification, action);
}"""


def registration_id(cdp: Any, page: Any, origin: str) -> str:
    """The id DevTools knows the site's service worker registration by (ServiceWorker domain enabled on `cdp`)."""
    seen: list[dict[str, Any]] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda event: seen.extend(event["registrations"]))
    cdp.send("ServiceWorker.enable")
    for _ in range(100):
        found = [r for r in seen if r["scopeURL"] == origin + "/" and not r["isDeleted"]]
        if found:
            return str(found[0]["registrationId"])
        page.wait_for_timeout(100)
    raise AssertionError(f"no service worker registration for {origin}/: {seen}")


def deliver(cdp: Any, page: Any, target: dict[str, str], payload: dict[str, Any], tag: str) -> dict[str, Any]:
    """Push `payload` to the service worker through DevTools; the notification it shows. On a loaded machine a
    push delivered this way was once not shown within 10 s (cause not found): it is delivered again, as a push
    service retries, and the tag keeps it one notification."""
    for _ in range(6):
        cdp.send("ServiceWorker.deliverPushMessage", {**target, "data": json.dumps(payload)})
        try:
            [shown] = poll(page, NOTIFICATIONS, tag, timeout=5.0)
            return dict(shown)
        except AssertionError:
            continue
    raise AssertionError(f"no notification {tag} after six pushes")


def ask(
    server: str, agent: dict[str, str], message: str, schema: dict[str, Any], **extra: Any
) -> ElicitationRequest:
    """An agent's request through the REST API, as the live server stored it."""
    created = httpx.post(
        f"{server}/api/v1/requests",
        json={"queue": "deploys", "message": message, "mode": "form", "requestedSchema": schema, **extra},
        headers=agent,
        timeout=10,
    ).json()
    return ElicitationRequest.objects.get(pk=created["id"])


def newest_worker(context: Any) -> Any:
    """The site's service worker that shows pushes now (Chromium stops an idle one and starts it again for a push)."""
    return [w for w in context.service_workers if w.url.endswith("/service-worker.js")][-1]


def test_subscribe_receive_a_push_and_approve_from_the_notification(
    push_server: str, push_context: Any, transactional_db: None
) -> None:
    queue = Queue.objects.create(slug="deploys", name="Deploys")
    alice = User.objects.create_user("alice", password="pw-alice")
    queue.members.add(alice)
    _, key = accounts.create_agent("agent-a", queue_slugs=["deploys"])
    agent = {"Authorization": f"Bearer {key}"}
    push_context.add_cookies([session_cookie(alice, push_server)])
    page = push_context.new_page()
    errors: list[str] = []

    def keep_error(message: Any) -> None:
        if message.type == "error":
            errors.append(message.text)

    page.on("console", keep_error)

    # Preferences: turn push on in this browser.
    page.goto("/preferences/")
    with page.expect_navigation():  # the page reloads to list the new browser
        page.locator("#push-subscribe").click()
    poll(page, "document.getElementById('web-push').dataset.state === 'subscribed'")
    subscription = PushSubscription.objects.get(user=alice)
    assert subscription.endpoint.startswith("https://") and "loopback-" in subscription.endpoint
    assert page.locator("#push-browsers li").count() == 1
    assert page.locator("#push-browsers").inner_text().startswith(subscription.label)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "web-push-preferences.png"), full_page=True)

    # An agent asks; the push the server would send reaches the service worker.
    request = ask(push_server, agent, "Deploy v2 to production?", YES_NO)
    payload = web_push.payload(request, alice)
    cdp = page.context.new_cdp_session(page)
    registration = registration_id(cdp, page, push_server)
    tag = f"request:{request.pk}"
    shown = deliver(cdp, page, {"origin": push_server, "registrationId": registration}, payload, tag)
    assert shown == {
        "title": "Deploys: agent-a needs a reviewer",
        "body": "Deploy v2 to production?",
        "tag": tag,
        "actions": ["approve", "reject"],
    }

    # Approve, as the button would: the service worker posts the token; the agent receives the answer.
    result = newest_worker(push_context).evaluate(CLICK, [tag, "approve"])
    assert (result["ok"], result["status"], result["body"]["outcome"]) == (True, 200, "Approved"), result
    answer = httpx.get(f"{push_server}/api/v1/requests/{request.pk}", headers=agent, timeout=10).json()
    assert answer["status"] == "completed"
    assert (answer["result"]["action"], answer["result"]["content"]) == ("accept", {"ok": True})
    [told] = poll(page, NOTIFICATIONS, f"result:{request.pk}")
    assert (told["title"], told["body"]) == ("Approved", "Your answer was sent to the agent.")
    assert page.evaluate(NOTIFICATIONS, tag) == []  # the answered notification was closed

    # The same token again (a replay) is refused, and the answer stands.
    token = next(a["token"] for a in payload["actions"] if a["action"] == "approve")
    again = httpx.post(f"{push_server}/requests/{request.pk}/push-answer", json={"token": token}, timeout=10)
    assert again.status_code == 409 and "already used" in again.json()["detail"]
    answer = httpx.get(f"{push_server}/api/v1/requests/{request.pk}", headers=agent, timeout=10).json()
    assert answer["result"]["content"] == {"ok": True}

    # A request that is not a yes/no approval has no buttons: a click goes to `clients.openWindow` for its page
    # (which Chromium allows only inside a real click, so called from here it refuses: the refusal is the proof
    # that the click opens a window rather than posting anything), and nothing is answered.
    other_request = ask(push_server, agent, "Which region?", TWO_QUESTIONS)
    other_tag = f"request:{other_request.pk}"
    target = {"origin": push_server, "registrationId": registration}
    shown = deliver(cdp, page, target, web_push.payload(other_request, alice), other_tag)
    assert (shown["body"], shown["actions"]) == ("Which region?", [])
    with pytest.raises(PlaywrightError, match="Not allowed to open a window"):
        newest_worker(push_context).evaluate(CLICK, [other_tag, ""])
    other_request.refresh_from_db()
    assert other_request.status == "pending"

    # An approval whose accept needs a passkey: no Approve. "Approve with passkey" carries no token, so its click
    # opens the page (refused from here, as above) and posts nothing; Decline answers without a passkey.
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    paying = ask(push_server, agent, "Pay 5000 EUR to Zoë?", YES_NO, context=PAY)
    paying_tag = f"request:{paying.pk}"
    paying_payload = web_push.payload(paying, alice)
    shown = deliver(cdp, page, target, paying_payload, paying_tag)
    assert shown["actions"] == ["open", "decline"]
    with pytest.raises(PlaywrightError, match="Not allowed to open a window"):
        newest_worker(push_context).evaluate(CLICK, [paying_tag, "open"])
    paying.refresh_from_db()
    assert paying.status == "pending"
    deliver(cdp, page, target, paying_payload, paying_tag)  # shown again: the click above closed it
    result = newest_worker(push_context).evaluate(CLICK, [paying_tag, "decline"])
    assert (result["ok"], result["status"], result["body"]["outcome"]) == (True, 200, "Declined"), result
    answer = httpx.get(f"{push_server}/api/v1/requests/{paying.pk}", headers=agent, timeout=10).json()
    assert (answer["status"], answer["result"]["action"]) == ("completed", "decline")
    assert not [text for text in errors if "Content Security Policy" in text], errors
