"""Every page ReviewHub serves, in light and dark, on a desktop and a phone: axe-core finds no serious or critical
violation, nothing scrolls sideways, no CSP refusal, and a screenshot of each is saved to pytest's tmp dir (or
to REVIEWHUB_SCREENSHOTS_DIR when set). `slow`: about 18 pages x 4 contexts take 1.5-2.5 minutes here; the consent
page's phone check at the end of this file is the quick one `make test` runs.

One seeded world (a queue, an agent's requests of each kind, a hosted flow, an MCP host asking for consent) and one
browser context per scheme and size walk every page. axe-core comes from npm (package.json); it is evaluated
through the DevTools protocol, which the pages' CSP does not govern, so the pages keep their real CSP.

`make screenshots` runs this walk with REVIEWHUB_GUIDE_SCREENSHOTS set to docs/screenshots: the reviewer guide's
few images (docs/reviewers.md) are written there, at viewport size, as PNG.
"""

import base64
import hashlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User

from elicitation.models import Queue, Scope
from elicitation.queue import accounts
from tests.browser.conftest import WAIT_MS, session_cookie

pytestmark = pytest.mark.browser

AXE = Path(settings.BASE_DIR) / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING_IMPACTS = ("serious", "critical")
AXE_TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]
SIZES = {"desktop": {"width": 1440, "height": 900}, "phone": {"width": 390, "height": 844}}
SCHEMES = ("light", "dark")
GUIDE_ENV = "REVIEWHUB_GUIDE_SCREENSHOTS"
# (page name, scheme, size) shown in docs/reviewers.md.
GUIDE_SHOTS = {
    ("approval", "light", "desktop"),
    ("approval", "dark", "phone"),
    ("answered", "light", "desktop"),
    ("queue", "dark", "desktop"),
    ("flow", "light", "phone"),
    ("consent", "dark", "phone"),
    ("metrics", "light", "desktop"),
}
REDIRECT = "http://127.0.0.1:53682/callback"

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve the transfer?"}},
    "required": ["approve"],
}
FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "full_name": {"type": "string", "title": "Full name", "minLength": 2},
        "email": {"type": "string", "format": "email", "title": "Contact email"},
        "start_date": {"type": "string", "format": "date", "title": "Start date"},
        "seats": {"type": "integer", "title": "Seats", "minimum": 1, "maximum": 10},
        "plan": {
            "type": "string",
            "title": "Plan",
            "oneOf": [{"const": "basic", "title": "Basic plan"}, {"const": "pro", "title": "Pro plan"}],
        },
        "note": {"type": "string", "title": "Note", "maxLength": 200},
    },
    "required": ["full_name", "email", "plan"],
}
FLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "api_token": {"type": "string", "title": "Registry token", "sensitive": True},
        "account": {"type": "string", "title": "Account name"},
    },
    "required": ["api_token"],
}


# Swagger UI's own markup (drf-spectacular's sidecar build) puts a link inside its summary button and sizes its
# path links at 14-19 px; ReviewHub serves that page but does not write its DOM.
SWAGGER_UI_RULES = ("nested-interactive", "target-size")


@dataclass(frozen=True)
class Visit:
    name: str
    path: str
    user: str | None = "alice"  # who is signed in; None: nobody
    third_party_rules: tuple[str, ...] = ()
    status: int = 200


def seed_world(base_url: str, reviewer_api: Callable[[User], Callable[..., httpx.Response]]) -> list[Visit]:
    """Requests of every kind, through the live server as an agent and a reviewer make them; the pages to visit."""
    payments = Queue.objects.create(slug="payments", name="Payments", default_deadline_seconds=3600)
    Queue.objects.create(slug="secret-ops", name="Secret ops")
    alice = User.objects.create_user("alice", is_staff=True)
    bob = User.objects.create_user("bob")
    payments.members.add(alice, bob)
    payments.supervisors.add(alice)
    _, key = accounts.create_agent(
        "billing-bot", queue_slugs=["payments"], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
    )
    agent = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10)
    as_alice = reviewer_api(alice)

    def create(**body: Any) -> dict[str, Any]:
        response = agent.post("/api/v1/requests", json={"queue": "payments", **body})
        assert response.status_code == 201, response.text
        return dict(response.json())

    approval = create(
        message="Drop the production orders table?",
        requestedSchema=APPROVAL_SCHEMA,
        priority=5,
        context={"mcp": {"server": "db-admin", "tool": "drop_table", "arguments": {"table": "orders"}}},
    )
    form = create(message="Fill in the new customer's contract details.", requestedSchema=FORM_SCHEMA)
    answered = create(message="Pay 80 EUR to ACME?", requestedSchema=APPROVAL_SCHEMA)
    assert as_alice("POST", f"/api/v1/review/requests/{answered['id']}/claim").status_code == 200
    response = as_alice(
        "POST",
        f"/api/v1/review/requests/{answered['id']}/respond",
        {"action": "decline", "content": None},
    )
    assert response.status_code == 200, response.text

    opened = agent.post(
        "/api/v1/flows",
        json={
            "queue": "payments",
            "message": "The deploy tool needs your registry token.",
            "requestedSchema": FLOW_SCHEMA,
        },
    )
    assert opened.status_code == 201, opened.text
    flow = opened.json()
    assert as_alice("POST", f"/api/v1/review/requests/{flow['requestId']}/claim").status_code == 200
    flow_path = urlsplit(flow["url"]).path

    return [
        Visit("login", "/accounts/login/", user=None),
        Visit("queues", "/"),
        Visit("queue", "/queues/payments/"),
        Visit("approval", f"/requests/{approval['id']}/"),
        Visit("form", f"/requests/{form['id']}/"),
        Visit("hosted-flow-request", f"/requests/{flow['requestId']}/"),
        Visit("answered", f"/requests/{answered['id']}/"),
        Visit("history", "/history/"),
        Visit("preferences", "/preferences/"),
        Visit("remember", f"/requests/{answered['id']}/remember"),
        Visit("remembered", "/queues/payments/remembered"),
        Visit("metrics", "/dashboard/"),
        Visit("flow", flow_path),
        Visit("flow-not-found", "/flows/00000000-0000-4000-8000-000000000000/", status=404),
        Visit("consent", consent_path(base_url)),
        Visit("not-found", "/no-such-page/", status=404),
        Visit("not-allowed", "/dashboard/", user="bob", status=403),
        Visit("api-docs", "/api/docs/", third_party_rules=SWAGGER_UI_RULES),
    ]


def consent_path(base_url: str) -> str:
    """An MCP host registers itself (RFC 7591, as anyone may) and sends the person to the consent page."""
    registered = httpx.post(
        f"{base_url}/oauth/register/",
        json={
            "client_name": "Claude Desktop",
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        },
        timeout=10,
    )
    assert registered.status_code == 201, registered.text
    resource = httpx.get(f"{base_url}/.well-known/oauth-protected-resource", timeout=10).json()["resource"]
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    query = {
        "response_type": "code",
        "client_id": registered.json()["client_id"],
        "redirect_uri": REDIRECT,
        "state": "st4te",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": resource,
        "scope": "mcp",
    }
    return f"/oauth/authorize/?{urlencode(query)}"


def axe_violations(page: Any, skipped: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.evaluate(AXE.read_text())
    result = page.evaluate(
        "(tags) => axe.run(document, {runOnly: {type: 'tag', values: tags}, resultTypes: ['violations']})",
        AXE_TAGS,
    )
    return [v for v in result["violations"] if v["impact"] in BLOCKING_IMPACTS and v["id"] not in skipped]


def described(page_name: str, scheme: str, size: str, violation: dict[str, Any]) -> str:
    targets = "; ".join(" ".join(node["target"]) for node in violation["nodes"][:5])
    summary = violation["nodes"][0].get("failureSummary", "").replace("\n", " ")
    return f"{page_name} [{scheme} {size}] {violation['id']} ({violation['impact']}): {targets} — {summary}"


def screenshot_dir(tmp_path: Path) -> Path:
    named = os.environ.get("REVIEWHUB_SCREENSHOTS_DIR")
    return Path(named) if named else tmp_path


@pytest.mark.slow
def test_every_page_passes_axe_in_both_schemes_on_desktop_and_phone(
    browser: Any,
    asgi_live_server_url: str,
    reviewer_api: Callable[[User], Callable[..., httpx.Response]],
    tmp_path: Path,
) -> None:
    # make test-services installs it first: a missing axe-core is a broken setup, never a page that passed.
    assert AXE.exists(), "axe-core is missing: npm ci (package.json) installs it"
    visits = seed_world(asgi_live_server_url, reviewer_api)
    users = {user.username: user for user in User.objects.all()}
    shots = screenshot_dir(tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    guide = Path(os.environ[GUIDE_ENV]) if os.environ.get(GUIDE_ENV) else None
    problems: list[str] = []
    csp_errors: list[str] = []
    for scheme in SCHEMES:
        for size, viewport in SIZES.items():
            context = browser.new_context(
                base_url=asgi_live_server_url, viewport=viewport, color_scheme=scheme, reduced_motion="reduce"
            )
            context.set_default_timeout(WAIT_MS)
            page = context.new_page()
            page.on(
                "console",
                lambda message: (
                    message.type == "error"
                    and "Content Security Policy" in message.text
                    and csp_errors.append(message.text)
                ),
            )
            signed_in: str | None = None
            for visit in visits:
                if visit.user != signed_in:
                    context.clear_cookies()
                    if visit.user is not None:
                        context.add_cookies([session_cookie(users[visit.user], asgi_live_server_url)])
                    signed_in = visit.user
                response = page.goto(visit.path, wait_until="load")
                assert response is not None and response.status == visit.status, (visit, response)
                stem = f"{visit.name}-{scheme}-{size}"
                page.screenshot(path=str(shots / f"{stem}.png"), full_page=True)
                if guide is not None and (visit.name, scheme, size) in GUIDE_SHOTS:
                    guide.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(guide / f"{stem}.png"))
                width = page.evaluate("document.scrollingElement.scrollWidth")
                if width > viewport["width"]:
                    problems.append(f"{visit.name} [{scheme} {size}] scrolls sideways: {width} px")
                found = axe_violations(page, visit.third_party_rules)
                problems += [described(visit.name, scheme, size, v) for v in found]
            context.close()
    assert not problems + csp_errors, "\n".join(problems + csp_errors)


def test_the_consent_page_fits_a_phone_marks_an_unverified_host_and_checks_a_sole_queue(
    open_page: Callable[..., Any], asgi_live_server_url: str
) -> None:
    """The quick check of what the walk above covers at length (it is `slow`): the page that scrolled 432 px."""
    Queue.objects.create(slug="payments", name="Payments")
    sam = User.objects.create_user("sam")
    Queue.objects.get(slug="payments").supervisors.add(sam)
    accounts.create_agent("billing-bot", queue_slugs=["payments"])
    page = open_page(sam, consent_path(asgi_live_server_url))
    page.set_viewport_size(SIZES["phone"])
    assert page.evaluate("document.scrollingElement.scrollWidth") <= SIZES["phone"]["width"]
    assert "Claude Desktop" not in page.locator("h1").inner_text()
    assert "Anyone can register this name" in page.locator("#oauth-identity").inner_text()
    assert page.locator("input[name=queues][value=payments]").is_checked()
    if AXE.exists():
        assert axe_violations(page) == []
