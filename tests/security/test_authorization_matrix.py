"""Who may do what: every endpoint and page by {anonymous, agent A, agent B, reviewer in the queue, reviewer outside
it, supervisor, staff}, with the exact answer for each cell. The rows are checked against the URL resolver and the
WebSocket routes: a new endpoint without a row fails `test_every_endpoint_has_a_row`.

Cells:  an int is the exact status;  LOGIN = 302 to the sign-in page;  ADMIN_LOGIN = 302 to the admin's;
REDIRECT = 302 anywhere else. WebSocket cells: ACCEPT, or the close code (4401 no credentials, 4403 not yours).
Each row builds its world once; each caller's call runs in a savepoint rolled back after it (a socket's cell in a
world of its own), so a state-changing call by one actor never changes another's cell.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from elicitation.api import throttling
from elicitation.flows import hosted_flows
from elicitation.models import Agent, AnswerRule, ElicitationRequest, HostedFlow, Queue, Scope
from elicitation.queue import accounts, rules, transitions
from tests.conftest import FORM_SCHEMA

ACTORS = ("anonymous", "agent_a", "agent_b", "reviewer_in", "reviewer_out", "supervisor", "staff")
LOGIN, ADMIN_LOGIN, REDIRECT, ACCEPT = "login", "admin-login", "redirect", "accept"
Cell = int | str


@dataclass
class World:
    queue: Queue
    other_queue: Queue
    agent_a: Agent
    agent_b: Agent
    keys: dict[str, str]
    users: dict[str, User]
    request: ElicitationRequest  # agent A's, pending in `queue`
    flow: HostedFlow  # agent A's hosted flow in `queue`

    def claim_as(self, actor: str) -> None:
        transitions.claim_request(self.request.pk, user=self.users[actor])


def build_world() -> World:
    queue = Queue.objects.create(slug="payments", name="Payments", lease_seconds=60)
    other_queue = Queue.objects.create(slug="other", name="Other")
    scopes = [Scope.REQUESTS, Scope.FLOWS_SECRETS]
    agent_a, key_a = accounts.create_agent("agent-a", queue_slugs=[queue.slug], scopes=scopes)
    agent_b, key_b = accounts.create_agent("agent-b", queue_slugs=[queue.slug], scopes=scopes)
    # No passwords: sessions come from force_login, and hashing would cost a second per cell.
    users = {
        "reviewer_in": User.objects.create(username="in"),
        "reviewer_out": User.objects.create(username="out"),
        "supervisor": User.objects.create(username="sup"),
        "staff": User.objects.create(username="staff", is_staff=True, is_superuser=True),
    }
    queue.members.add(users["reviewer_in"], users["supervisor"])
    queue.supervisors.add(users["supervisor"])
    other_queue.members.add(users["reviewer_out"])
    request, _ = transitions.create_request(
        agent=agent_a, queue_slug=queue.slug, message="Approve?", mode="form", requested_schema=FORM_SCHEMA
    )
    flow, _ = hosted_flows.create_hosted_flow(
        agent=agent_a,
        queue_slug=queue.slug,
        message="Your card number",
        requested_schema={"type": "object", "properties": {"pan": {"type": "string", "sensitive": True}}},
    )
    return World(
        queue, other_queue, agent_a, agent_b, {"agent_a": key_a, "agent_b": key_b}, users, request, flow
    )


@dataclass
class Row:
    name: str  # the URL name (namespaced for the admin) or the WebSocket route
    method: str
    path: Callable[[World], str]
    cells: tuple[Cell, ...]  # in ACTORS order
    body: dict[str, Any] | None = None
    setup: Callable[[World], None] | None = None
    note: str = ""
    expected: dict[str, Cell] = field(init=False)

    def __post_init__(self) -> None:
        assert len(self.cells) == len(ACTORS), self.name
        self.expected = dict(zip(ACTORS, self.cells, strict=True))


def rid(w: World) -> str:
    return str(w.request.pk)


def fid(w: World) -> str:
    return str(w.flow.pk)


def claimed_by_in(w: World) -> None:
    w.claim_as("reviewer_in")


def with_rule(w: World) -> None:
    rules.add_rule(w.queue, {"name": "no refunds", "match": {"tool": "refund"}, "action": "decline"})


def with_remembered_rule(w: World) -> None:
    w.claim_as("reviewer_in")
    transitions.respond(w.request.pk, user=w.users["reviewer_in"], action="decline")
    rules.remember_decision(
        ElicitationRequest.objects.get(pk=w.request.pk),
        {"name": "remembered", "action": "decline", "expires_at": "2999-01-01T00:00:00+00:00"},
        user=w.users["supervisor"],
    )


def answered_by_in(w: World) -> None:
    w.claim_as("reviewer_in")
    transitions.respond(w.request.pk, user=w.users["reviewer_in"], action="accept", content={"approve": True})


def rule_id(w: World) -> int:
    return AnswerRule.objects.filter(queue=w.queue).values_list("pk", flat=True).get()


CREATE = {"message": "Approve?", "requestedSchema": FORM_SCHEMA, "queue": "payments"}
FLOW = {"message": "PIN", "requestedSchema": {"type": "object", "properties": {"pin": {"type": "string"}}}}
ANSWER = {"action": "accept", "content": {"approve": True}}
#                 anonymous   agent_a  agent_b  rev_in  rev_out  superv  staff
AGENT_ONLY = (401, 200, 200, 401, 401, 401, 401)
OWNER_ONLY = (401, 200, 404, 401, 401, 401, 401)
REVIEWERS = (401, 401, 401, 200, 403, 200, 200)
PAGE = (LOGIN, LOGIN, LOGIN, 200, 403, 200, 200)

HTTP_ROWS = [
    # --- agent API: a key is the only way in; another agent's objects look missing (404), never forbidden ---
    Row("api-requests", "GET", lambda w: "/api/v1/requests", AGENT_ONLY),
    Row("api-requests", "POST", lambda w: "/api/v1/requests", (401, 201, 201, 401, 401, 401, 401), CREATE),
    Row(
        "api-url-complete",
        "POST",
        lambda w: "/api/v1/requests/url-complete",
        (401, 202, 202, 401, 401, 401, 401),
        {"requestId": "00000000-0000-0000-0000-000000000000"},
        note="unknown ids are ignored, as MCP requires: it reveals nothing",
    ),
    Row("api-request", "GET", lambda w: f"/api/v1/requests/{rid(w)}", OWNER_ONLY),
    Row("api-request-cancel", "POST", lambda w: f"/api/v1/requests/{rid(w)}/cancel", OWNER_ONLY),
    Row("api-events", "GET", lambda w: "/api/v1/events", AGENT_ONLY),
    Row("api-ws-ticket", "POST", lambda w: "/api/v1/ws-ticket", (401, 201, 201, 401, 401, 401, 401)),
    Row(
        "api-flows",
        "POST",
        lambda w: "/api/v1/flows",
        (401, 201, 201, 401, 401, 401, 401),
        {**FLOW, "queue": "payments"},
    ),
    Row("api-flow", "GET", lambda w: f"/api/v1/flows/{fid(w)}", OWNER_ONLY),
    Row(
        "api-flow-retrieve",
        "POST",
        lambda w: f"/api/v1/flows/{fid(w)}/retrieve",
        (401, 409, 404, 401, 401, 401, 401),
        note="the owner is told the flow has nothing to retrieve yet",
    ),
    # --- reviewer API: session or reviewer token; agents' keys open nothing here ---
    Row("api-review-queues", "GET", lambda w: "/api/v1/review/queues", (401, 401, 401, 200, 200, 200, 200)),
    Row("api-review-queue", "GET", lambda w: "/api/v1/review/queues/payments/requests", REVIEWERS),
    Row("api-claim-next", "POST", lambda w: "/api/v1/review/queues/payments/claim-next", REVIEWERS),
    Row("api-review", "GET", lambda w: f"/api/v1/review/requests/{rid(w)}", REVIEWERS),
    Row("api-claim", "POST", lambda w: f"/api/v1/review/requests/{rid(w)}/claim", REVIEWERS),
    Row(
        "api-release",
        "POST",
        lambda w: f"/api/v1/review/requests/{rid(w)}/release",
        (401, 401, 401, 200, 403, 409, 409),
        setup=claimed_by_in,
        note="only the holder releases; a supervisor takes over instead",
    ),
    Row(
        "api-heartbeat",
        "POST",
        lambda w: f"/api/v1/review/requests/{rid(w)}/heartbeat",
        (401, 401, 401, 200, 403, 409, 409),
        setup=claimed_by_in,
    ),
    Row(
        "api-takeover",
        "POST",
        lambda w: f"/api/v1/review/requests/{rid(w)}/takeover",
        (401, 401, 401, 403, 403, 200, 200),
        setup=claimed_by_in,
    ),
    Row(
        "api-draft",
        "POST",
        lambda w: f"/api/v1/review/requests/{rid(w)}/drafts",
        (401, 401, 401, 200, 403, 409, 409),
        {"question": "approve", "value": True},
        setup=claimed_by_in,
    ),
    Row(
        "api-respond",
        "POST",
        lambda w: f"/api/v1/review/requests/{rid(w)}/respond",
        (401, 401, 401, 200, 403, 409, 409),
        ANSWER,
        setup=claimed_by_in,
    ),
    # --- decision policies: reviewers of the queue read its rules, supervisors change them ---
    Row("api-queue-rules", "GET", lambda w: "/api/v1/queues/payments/rules", REVIEWERS),
    Row(
        "api-queue-rules",
        "POST",
        lambda w: "/api/v1/queues/payments/rules",
        (401, 401, 401, 403, 403, 201, 201),
        {"name": "no", "action": "decline"},
    ),
    Row(
        "api-queue-rule",
        "GET",
        lambda w: f"/api/v1/queues/payments/rules/{rule_id(w)}",
        REVIEWERS,
        setup=with_rule,
    ),
    Row(
        "api-queue-rule-revoke",
        "POST",
        lambda w: f"/api/v1/queues/payments/rules/{rule_id(w)}/revoke",
        (401, 401, 401, 403, 403, 200, 200),
        setup=with_rule,
    ),
    Row(
        "api-queue-remembered",
        "GET",
        lambda w: "/api/v1/queues/payments/remembered",
        (401, 401, 401, 403, 403, 200, 200),
    ),
    Row("request-decision", "GET", lambda w: f"/requests/{rid(w)}/decision", PAGE),
    Row(
        "request-undo",
        "POST",
        lambda w: f"/requests/{rid(w)}/undo",
        (LOGIN, LOGIN, LOGIN, REDIRECT, 403, REDIRECT, REDIRECT),
        note="with nothing held, a reviewer of the queue is told so on the request's page",
    ),
    Row(
        "request-remember",
        "GET",
        lambda w: f"/requests/{rid(w)}/remember",
        (LOGIN, LOGIN, LOGIN, 403, 403, 200, 200),
        setup=answered_by_in,
        note="remembering needs the remember_decision permission or a supervisor",
    ),
    Row(
        "remembered",
        "GET",
        lambda w: "/queues/payments/remembered",
        (LOGIN, LOGIN, LOGIN, 403, 403, 200, 200),
    ),
    Row(
        "remembered-revoke",
        "POST",
        lambda w: f"/queues/payments/remembered/{rule_id(w)}/revoke",
        (LOGIN, LOGIN, LOGIN, 403, 403, REDIRECT, REDIRECT),
        setup=with_remembered_rule,
    ),
    # --- public by design: the OpenAPI document, its viewer, liveness ---
    Row("api-schema", "GET", lambda w: "/api/schema/", (200,) * 7),
    Row("api-docs", "GET", lambda w: "/api/docs/", (200,) * 7),
    Row("healthz", "GET", lambda w: "/healthz", (200,) * 7),
    # The public keys receipts are verified with (docs/approvals.md).
    Row("receipt-jwks", "GET", lambda w: "/.well-known/reviewhub-receipts.json", (200,) * 7),
    # --- pages: session only ---
    Row("dashboard", "GET", lambda w: "/", (LOGIN, LOGIN, LOGIN, 200, 200, 200, 200)),
    Row(
        "login", "GET", lambda w: "/accounts/login/", (200, 200, 200, REDIRECT, REDIRECT, REDIRECT, REDIRECT)
    ),
    Row("logout", "POST", lambda w: "/accounts/logout/", (LOGIN,) * 7),
    # Company sign-in's two legs (elicitation/reviewer/company_sign_in/): absent while OIDC_ISSUER is unset, as here;
    # tests/security/test_oidc_*.py cover them turned on.
    Row("oidc_authentication_init", "GET", lambda w: "/oidc/authenticate/", (404,) * 7),
    Row("oidc_authentication_callback", "GET", lambda w: "/oidc/callback/", (404,) * 7),
    Row("queue", "GET", lambda w: "/queues/payments/", PAGE),
    Row("queue-counts", "GET", lambda w: "/queues/payments/counts", PAGE),
    Row(
        "queue-next",
        "POST",
        lambda w: "/queues/payments/next",
        (LOGIN, LOGIN, LOGIN, REDIRECT, 403, REDIRECT, REDIRECT),
    ),
    Row("request", "GET", lambda w: f"/requests/{rid(w)}/", PAGE),
    Row("history", "GET", lambda w: "/history/", (LOGIN, LOGIN, LOGIN, 200, 200, 200, 200)),
    Row("reach-waiting", "GET", lambda w: "/reach/waiting", (LOGIN, LOGIN, LOGIN, 200, 200, 200, 200)),
    Row("reach-shown", "POST", lambda w: f"/reach/shown/{rid(w)}", (LOGIN, LOGIN, LOGIN, 200, 403, 200, 200)),
    # Everyone signed in has preferences of their own (only theirs); a form post without fields is refused.
    Row("preferences", "GET", lambda w: "/preferences/", (LOGIN, LOGIN, LOGIN, 200, 200, 200, 200)),
    Row("preferences", "POST", lambda w: "/preferences/", (LOGIN, LOGIN, LOGIN, 400, 400, 400, 400)),
    # Web Push: the service worker is public; subscriptions are each reviewer's own (503 without VAPID keys, as
    # here); an action's token is its credential, so no session or key answers without one.
    Row("service-worker", "GET", lambda w: "/service-worker.js", (200,) * 7),
    Row("push-subscriptions", "GET", lambda w: "/push/subscriptions", (LOGIN,) * 3 + (200,) * 4),
    Row("push-subscriptions", "POST", lambda w: "/push/subscriptions", (LOGIN,) * 3 + (503,) * 4),
    Row(
        "push-unsubscribe-endpoint",
        "POST",
        lambda w: "/push/subscriptions/remove",
        (LOGIN, LOGIN, LOGIN, 404, 404, 404, 404),
    ),
    Row(
        "push-unsubscribe",
        "POST",
        lambda w: "/push/subscriptions/1/remove",
        (LOGIN, LOGIN, LOGIN, REDIRECT, REDIRECT, REDIRECT, REDIRECT),
    ),
    Row("push-answer", "POST", lambda w: f"/requests/{rid(w)}/push-answer", (403,) * 7),
    # Passkeys: each reviewer's own; a step-up challenge only for a request they review (this one needs none: 400).
    Row("passkey-options", "POST", lambda w: "/passkeys/options", (LOGIN,) * 3 + (200,) * 4),
    Row("passkey-register", "POST", lambda w: "/passkeys/register", (LOGIN,) * 3 + (400,) * 4),
    Row("passkey-remove", "POST", lambda w: "/passkeys/1/remove", (LOGIN,) * 3 + (REDIRECT,) * 4),
    Row(
        "request-step-up",
        "POST",
        lambda w: f"/requests/{rid(w)}/step-up",
        (LOGIN, LOGIN, LOGIN, 400, 403, 400, 400),
    ),
    # Slack signs its interactions; no session or key opens this door, and without a signing secret it is absent.
    Row("api-slack-interactions", "POST", lambda w: "/api/v1/slack/interactions", (404,) * 7),
    Row("queue-row", "GET", lambda w: f"/queues/payments/rows/{rid(w)}", PAGE),
    Row(
        "request-leave",
        "POST",
        lambda w: f"/requests/{rid(w)}/leave",
        (LOGIN, LOGIN, LOGIN, 409, 403, 409, 409),
    ),
    Row(
        "flow-page",
        "GET",
        lambda w: f"/flows/{fid(w)}/",
        PAGE,
        note="the URL carries no credential: a member of the queue must sign in, and opening it claims it",
    ),
    Row("metrics-dashboard", "GET", lambda w: "/dashboard/", (LOGIN, LOGIN, LOGIN, 403, 403, 200, 200)),
    Row(
        "metrics",
        "GET",
        lambda w: "/metrics",
        (401, 401, 401, 403, 403, 403, 200),
        note="agent keys are not METRICS_TOKEN: 401",
    ),
    # OAuth for MCP hosts: discovery is public; the authorization page wants a signed-in user (400 without a
    # client); token, revocation and registration judge the client's request, not a session.
    Row(
        "oauth2_provider:oauth-server-metadata",
        "GET",
        lambda w: "/.well-known/oauth-authorization-server",
        (200,) * 7,
    ),
    Row(
        "oauth2_provider:oauth-resource-metadata",
        "GET",
        lambda w: "/.well-known/oauth-protected-resource",
        (200,) * 7,
    ),
    Row(
        "oauth2_provider:oauth-resource-metadata-mcp",
        "GET",
        lambda w: "/.well-known/oauth-protected-resource/mcp",
        (200,) * 7,
    ),
    Row(
        "oauth2_provider:authorize",
        "GET",
        lambda w: "/oauth/authorize/",
        (LOGIN, LOGIN, LOGIN, 400, 400, 400, 400),
    ),
    Row("oauth2_provider:token", "POST", lambda w: "/oauth/token/", (400,) * 7),
    Row("oauth2_provider:revoke-token", "POST", lambda w: "/oauth/revoke/", (400,) * 7),
    Row("oauth2_provider:dcr-register", "POST", lambda w: "/oauth/register/", (400,) * 7),
    Row(
        "oauth2_provider:dcr-register-management",
        "GET",
        lambda w: "/oauth/register/unknown-client/",
        (401,) * 7,
    ),
]

# Agents connect without an Origin header (as agent libraries do): the reviewer sockets' origin check refuses the
# handshake itself (1000) before any session is looked at.
ORIGIN_REFUSED = 1000
WS_ROWS = [
    Row("ws/agent/", "WS", lambda w: "/ws/agent/", (4401, ACCEPT, ACCEPT, 4401, 4401, 4401, 4401)),
    Row(
        "ws/queues/<slug:slug>/",
        "WS",
        lambda w: "/ws/queues/payments/",
        (4403, ORIGIN_REFUSED, ORIGIN_REFUSED, ACCEPT, 4403, ACCEPT, ACCEPT),
    ),
    Row(
        "ws/requests/<uuid:request_id>/",
        "WS",
        lambda w: f"/ws/requests/{rid(w)}/",
        (4403, ORIGIN_REFUSED, ORIGIN_REFUSED, ACCEPT, 4403, ACCEPT, ACCEPT),
    ),
]


def client_for(world: World, actor: str) -> Client:
    if actor in world.keys:
        return Client(HTTP_AUTHORIZATION=f"Bearer {world.keys[actor]}")
    client = Client()
    if actor in world.users:
        client.force_login(world.users[actor])
    return client


def observed(response: Any) -> Cell:
    if response.status_code != 302:
        return int(response.status_code)
    location = response["Location"]
    if location.startswith(reverse("login")):
        return LOGIN
    if location.startswith(reverse("admin:login")):
        return ADMIN_LOGIN
    return REDIRECT


def call(client: Client, row: Row, world: World) -> Any:
    path = row.path(world)
    if row.method == "GET":
        return client.get(path)
    return client.post(path, row.body or {}, content_type="application/json")


@contextmanager
def rolled_back() -> Iterator[None]:
    """A savepoint undone on the way out: what one caller's call changed, the next caller never sees."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


@pytest.mark.django_db
@pytest.mark.parametrize("row", HTTP_ROWS, ids=lambda row: f"{row.method} {row.name}")
def test_each_endpoint_answers_each_caller_exactly(
    row: Row, settings: Any, subtests: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.METRICS_TOKEN = "metrics-scrape-token-0123456789"
    world = build_world()
    if row.setup is not None:
        row.setup(world)

    namespace = throttling.KEY_NAMESPACE
    for actor in ACTORS:
        with subtests.test(actor=actor):
            # Each caller counts its rates afresh, as it would in a world of its own.
            monkeypatch.setattr(throttling, "KEY_NAMESPACE", f"{namespace}-{actor}")
            with rolled_back():
                response = call(client_for(world, actor), row, world)
            assert observed(response) == row.expected[actor], (row.name, actor, response.content[:300])


async def ws_outcome(path: str, headers: list[tuple[bytes, bytes]]) -> Cell:
    from reviewhub.asgi import application

    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, code = await communicator.connect(timeout=5)
    if not connected:
        return int(code)
    # Some consumers accept, then close with a reason code (a refused handshake tells a browser nothing).
    outcome: Cell = ACCEPT
    if not await communicator.receive_nothing(timeout=0.3):
        message = await communicator.receive_output(timeout=1)
        if message["type"] == "websocket.close":
            outcome = int(message.get("code", 1000))
    await communicator.disconnect()
    return outcome


def ws_headers(world: World, actor: str) -> list[tuple[bytes, bytes]]:
    headers = [(b"host", b"testserver"), (b"origin", b"http://testserver")]
    if actor in world.keys:
        return [*headers[:1], (b"authorization", f"Bearer {world.keys[actor]}".encode())]
    if actor in world.users:
        client = Client()
        client.force_login(world.users[actor])
        headers.append((b"cookie", f"sessionid={client.cookies['sessionid'].value}".encode()))
    return headers


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("row", WS_ROWS, ids=lambda row: row.name)
def test_each_socket_admits_each_caller_exactly(row: Row, actor: str) -> None:
    world = build_world()

    outcome = async_to_sync(ws_outcome)(row.path(world), ws_headers(world, actor))

    assert outcome == row.expected[actor], (row.name, actor, outcome)


# --- the admin: one family of rows -------------------------------------------------------------------------------


def walk(patterns: list[Any], prefix: str = "", namespace: str = "") -> list[tuple[str, str]]:
    """(route, name) for every URL pattern, namespaces joined as reverse() expects."""
    found: list[tuple[str, str]] = []
    for pattern in patterns:
        if isinstance(pattern, URLResolver):
            inner = f"{namespace}{pattern.namespace}:" if pattern.namespace else namespace
            found += walk(pattern.url_patterns, prefix + str(pattern.pattern), inner)
        elif isinstance(pattern, URLPattern):
            found.append((prefix + str(pattern.pattern), f"{namespace}{pattern.name or ''}"))
    return found


ADMIN_ROUTES = [
    (route, name) for route, name in walk(get_resolver().url_patterns) if route.startswith("admin/")
]
ADMIN_PUBLIC = {"admin:login": (200, 200, 200, 200, 200, 200, REDIRECT)}


def admin_path(route: str, world: World) -> str | None:
    """A concrete path for an admin route, or None when it needs an object this world has no use for."""
    path = route.replace("^", "").replace("$", "").replace("<path:object_id>/", f"{world.queue.pk}/")
    path = path.replace("<app_label>", "elicitation").replace("(?P<app_label>elicitation)/", "elicitation/")
    path = path.replace("(?P<app_label>elicitation|auth)/", "elicitation/")
    if "<" in path or "(" in path:
        return None
    return "/" + path


@pytest.mark.django_db
@pytest.mark.parametrize("actor", ACTORS)
def test_the_admin_lets_only_staff_in(actor: str) -> None:
    world = build_world()
    client = client_for(world, actor)
    checked = 0
    for route, name in ADMIN_ROUTES:
        path = admin_path(route, world)
        if path is None or name in {"admin:logout", "admin:view_on_site"}:
            continue
        if name in ADMIN_PUBLIC:
            assert observed(client.get(path)) == dict(zip(ACTORS, ADMIN_PUBLIC[name], strict=True))[actor]
            continue
        outcome = observed(client.get(path))
        if actor == "staff":
            # In, whatever the page then says (an object this world lacks redirects to the index).
            assert outcome == REDIRECT or (isinstance(outcome, int) and outcome < 500), (name, path, outcome)
        else:
            assert outcome == ADMIN_LOGIN, (name, path, outcome)
        checked += 1
    assert checked >= 10


# --- completeness -------------------------------------------------------------------------------------------------


def test_every_endpoint_has_a_row() -> None:
    from reviewhub.routing import websocket_urlpatterns

    routes = walk(get_resolver().url_patterns)
    with_rows = {row.name for row in HTTP_ROWS}
    missing = [
        (route, name)
        for route, name in routes
        if not route.startswith("admin/") and name not in with_rows and not route.startswith("static/")
    ]
    assert missing == [], f"endpoints without a row in the authorization matrix: {missing}"
    ws_with_rows = {row.name for row in WS_ROWS}
    ws_missing = [str(p.pattern) for p in websocket_urlpatterns if str(p.pattern) not in ws_with_rows]
    assert ws_missing == [], f"WebSocket routes without a row: {ws_missing}"
    assert all(name.startswith("admin:") for route, name in routes if route.startswith("admin/"))
