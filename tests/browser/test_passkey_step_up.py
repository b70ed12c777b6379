"""Passkey step-up in Chromium, with a DevTools Protocol virtual authenticator (CTAP2, internal, resident keys,
user verification): the reviewer registers a passkey on Preferences, approves a request whose rule says
`step_up: passkey` on its page (navigator.credentials.get signs the challenge binding request and digest), the agent
receives accept, and the receipt's passkey bundle verifies offline with `reviewhub_client.receipts.verify_step_up`.
Through the reviewer API, the same request's accept is refused with a pointer to the page.

WebAuthn needs a domain as relying party (Chromium refuses an IP address), so this module runs a live server of its
own whose PUBLIC_URL is http://localhost:<port>, and the browser opens it by that name."""

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from elicitation.models import Passkey, Queue
from elicitation.queue import accounts, receipts, rules
from reviewhub_client.receipts import verify_receipt, verify_step_up
from tests.browser.conftest import ASYNC_UNSAFE, SCREENSHOTS, WAIT_MS, session_cookie
from tests.delivery.liveserver import LiveServer, free_port

pytestmark = pytest.mark.browser

APPROVAL = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Pay 5,000 EUR to Zoë?"}},
    "required": ["approve"],
}
PAY = {"mcp": {"server": "bank", "tool": "pay", "arguments": {"amount": 5000, "to": "Zoë"}}}


@pytest.fixture(scope="module")
def localhost_server(django_db_setup: None) -> Iterator[str]:
    port = free_port()
    origin = f"http://localhost:{port}"
    server = LiveServer(port=port, env={"PUBLIC_URL": origin})
    server.env.pop(ASYNC_UNSAFE, None)
    server.start()
    try:
        yield origin
    finally:
        server.stop()


@pytest.fixture
def signed_in_page(
    browser: Any, localhost_server: str, transactional_db: None
) -> Iterator[Callable[[User], tuple[Any, Any]]]:
    contexts: list[Any] = []

    def open_for(user: User) -> tuple[Any, Any]:
        context = browser.new_context(base_url=localhost_server, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(WAIT_MS)
        contexts.append(context)
        context.add_cookies([session_cookie(user, localhost_server)])
        page = context.new_page()
        errors: list[str] = []

        def on_console(message: Any) -> None:
            if message.type == "error":
                errors.append(message.text)

        page.on("console", on_console)
        page.csp_errors = errors
        cdp = context.new_cdp_session(page)
        cdp.send("WebAuthn.enable", {"enableUI": False})
        added = cdp.send(
            "WebAuthn.addVirtualAuthenticator",
            {
                "options": {
                    "protocol": "ctap2",
                    "transport": "internal",
                    "hasResidentKey": True,
                    "hasUserVerification": True,
                    "isUserVerified": True,
                    "automaticPresenceSimulation": True,
                }
            },
        )
        page.authenticator = (cdp, added["authenticatorId"])
        return page, cdp

    yield open_for
    for context in contexts:
        context.close()


def register_passkey(page: Any, name: str) -> None:
    page.goto("/preferences/")
    page.fill("#passkey-name", name)
    page.click("#passkey-register")
    page.wait_for_selector("#passkey-list li[data-passkey]")


def test_register_a_passkey_and_approve_a_step_up_request_the_agent_gets_a_verifiable_bundle(
    signed_in_page: Callable[[User], tuple[Any, Any]], localhost_server: str
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments", default_deadline_seconds=600)
    reviewer = User.objects.create_user("alice", password="pw-alice")
    queue.members.add(reviewer)
    rules.replace_policy(
        queue,
        {
            "rules": [
                {
                    "name": "payments need a passkey",
                    "match": {"tool": "pay"},
                    "action": "set",
                    "step_up": "passkey",
                }
            ]
        },
    )
    _, key = accounts.create_agent("bank-agent", queue_slugs=["payments"])
    agent = httpx.Client(base_url=localhost_server, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    page, cdp = signed_in_page(reviewer)

    # Register on Preferences.
    page.goto("/preferences/")
    page.fill("#passkey-name", "Virtual laptop")
    page.click("#passkey-register")
    page.wait_for_selector("#passkey-list li[data-passkey]")
    assert "Virtual laptop" in page.inner_text("#passkey-list")
    page.screenshot(path=str(SCREENSHOTS / "passkey-registered.png"), full_page=True)
    [credential] = cdp.send("WebAuthn.getCredentials", {"authenticatorId": page.authenticator[1]})[
        "credentials"
    ]
    assert Passkey.objects.get(user=reviewer).name == "Virtual laptop"

    # The agent asks; another door cannot approve it.
    created = agent.post(
        "/api/v1/requests",
        json={"queue": "payments", "message": "Pay Zoë", "requestedSchema": APPROVAL, "context": PAY},
    )
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]
    token = accounts.create_reviewer_token(reviewer, name="script")
    api = httpx.Client(base_url=localhost_server, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    assert api.post(f"/api/v1/review/requests/{request_id}/claim").status_code == 200
    refused = api.post(
        f"/api/v1/review/requests/{request_id}/respond",
        json={"action": "accept", "content": {"approve": True}},
    )
    assert refused.status_code == 403, refused.text
    assert f"{localhost_server}/requests/{request_id}/" in refused.json()["detail"]
    assert agent.get(f"/api/v1/requests/{request_id}").json()["status"] == "claimed"

    # Approve on the page: the passkey signs, the server verifies, the agent hears accept.
    page.goto(f"/requests/{request_id}/")
    assert page.is_visible("#step-up")
    page.screenshot(path=str(SCREENSHOTS / "passkey-step-up-request.png"), full_page=True)
    page.click("#approve-button")
    page.wait_for_url(lambda url: f"/requests/{request_id}/" not in url)
    result = agent.get(f"/api/v1/requests/{request_id}").json()
    assert result["status"] == "completed", result
    assert result["result"]["action"] == "accept"
    used = cdp.send("WebAuthn.getCredentials", {"authenticatorId": page.authenticator[1]})["credentials"][0]
    assert used["signCount"] > credential["signCount"]

    # Offline: the receipt's signature, then the passkey bundle, with nothing of ReviewHub's but the JWK Set.
    jwks = httpx.get(f"{localhost_server}/.well-known/reviewhub-receipts.json", timeout=10).json()
    digest = rules.request_digest("Pay Zoë", APPROVAL, PAY)
    receipt = verify_receipt(result["result"]["_meta"][receipts.RECEIPT_META], jwks, expected_digest=digest)
    [approval] = verify_step_up(receipt, rp_id="localhost", origin=localhost_server)
    assert approval.by == "alice"
    assert not [text for text in page.csp_errors if "Content Security Policy" in text]


def test_a_quorum_of_two_passkey_approvals_reaches_the_agent_as_a_bundle(
    signed_in_page: Callable[[User], tuple[Any, Any]], localhost_server: str
) -> None:
    queue = Queue.objects.create(slug="payments", name="Payments", default_deadline_seconds=600)
    alice = User.objects.create_user("alice", password="pw-alice")
    bob = User.objects.create_user("bob", password="pw-bob")
    queue.members.add(alice, bob)
    rules.replace_policy(
        queue,
        {
            "rules": [
                {
                    "name": "two passkeys for payments",
                    "match": {"tool": "pay"},
                    "action": "require_quorum",
                    "quorum": {"approvals": 2},
                    "step_up": "passkey",
                }
            ]
        },
    )
    _, key = accounts.create_agent("bank-agent", queue_slugs=["payments"])
    agent = httpx.Client(base_url=localhost_server, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    alices, _ = signed_in_page(alice)
    bobs, _ = signed_in_page(bob)
    register_passkey(alices, "Alice's laptop")
    register_passkey(bobs, "Bob's phone")
    created = agent.post(
        "/api/v1/requests",
        json={"queue": "payments", "message": "Pay Zoë", "requestedSchema": APPROVAL, "context": PAY},
    )
    assert created.status_code == 201, created.text
    request_id = created.json()["id"]

    alices.goto(f"/requests/{request_id}/")
    alices.click("#approve-button")  # proposes "yes" and approves it, signed
    alices.wait_for_url(lambda url: f"/requests/{request_id}/" not in url)
    assert agent.get(f"/api/v1/requests/{request_id}").json()["status"] == "pending"

    bobs.goto(f"/requests/{request_id}/")
    bobs.click("#quorum-approve")
    bobs.wait_for_selector("#result")  # the approval's page, now showing what the agent received
    result = agent.get(f"/api/v1/requests/{request_id}").json()
    assert result["status"] == "completed", result
    assert result["result"]["action"] == "accept"

    jwks = httpx.get(f"{localhost_server}/.well-known/reviewhub-receipts.json", timeout=10).json()
    digest = rules.request_digest("Pay Zoë", APPROVAL, PAY)
    receipt = verify_receipt(result["result"]["_meta"][receipts.RECEIPT_META], jwks, expected_digest=digest)
    bundle = verify_step_up(receipt, rp_id="localhost", origin=localhost_server)
    assert [approval.by for approval in bundle] == ["alice", "bob"]
    assert bundle[0].credential_id != bundle[1].credential_id
