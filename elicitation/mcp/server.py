"""ReviewHub as an MCP server: any MCP host can route a question to a human reviewer without custom code.

Streamable HTTP at `/mcp/`, built with the official SDK (`mcp`, the optional `reviewhub[mcp]` extra). Agents
authenticate with their ReviewHub key (`Authorization: Bearer rh_…`) through the SDK's own bearer-token stack, so
the tools see the calling agent as the request's access token. Tools:

- `ask_reviewer` — queue a form question (MCP `message` + `requestedSchema`) and, for up to `waitSeconds`, wait
  for the answer; returns the request with its MCP `ElicitResult`, or the open request's id to check later.
- `get_request` — a request's status and result (optionally waiting `waitSeconds` for it to close).
- `list_open_requests` — the agent's open requests, newest first.
- `cancel_request` — withdraw an open request.

Every write goes through `elicitation.queue.transitions`, exactly as the REST API does; input is checked by the REST API's
own serializer, so limits and error messages are the same on both doors.

Why the session manager is started here: the SDK's `StreamableHTTPSessionManager.run()` must be running (it owns
the task group requests are served in) before the first request. Starlette would start it from the ASGI lifespan,
but daphne sends no lifespan events and `with_periodic_sweeps` answers them for uvicorn, so `MCPEndpoint` starts
it on the first `/mcp` request, on the server's own event loop, and keeps it for the process's life. Stateless
HTTP: no MCP session lives in one process, so several ASGI processes behind a load balancer all serve `/mcp/`.
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Literal, NotRequired
from urllib.parse import urlsplit

import anyio
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from typing_extensions import TypedDict

from elicitation.api import serializers as s
from elicitation.delivery import waiter_threads
from elicitation.delivery.long_poll import wait_for_request
from elicitation.models import Agent, ElicitationRequest, Mode
from elicitation.queue import access, selectors, transitions
from elicitation.queue.errors import DomainError, NotFoundError
from elicitation.queue.keys import agent_for_key

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MCP_PATH = "/mcp"
SERVER_NAME = "reviewhub"
INSTRUCTIONS = (
    "ReviewHub routes a question to a human reviewer. Call ask_reviewer with a message and an MCP elicitation "
    "requestedSchema (a flat object of string/number/integer/boolean/enum fields). The reviewer answers with "
    "accept (content matches the schema), decline or cancel. Humans can take minutes or hours: if the answer is "
    "not there within waitSeconds you get the request id; call get_request with it later. Never ask for secrets "
    "(passwords, API keys) in a form."
)


def database_call(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """ORM code off the event loop, on the loop's default executor (tool calls are few; waits are not)."""
    return waiter_threads.database_call(func, executor=None)


# --- what the tools return (also published as each tool's outputSchema) -------------------------------------------


class ElicitOutcome(TypedDict):
    """MCP `ElicitResult`: `content` only on accept of a form."""

    action: Literal["accept", "decline", "cancel"]
    content: NotRequired[dict[str, Any]]


class ReviewRequest(TypedDict):
    """The same representation as `GET /api/v1/requests/{id}`."""

    id: str
    status: Literal["pending", "claimed", "completed", "expired", "withdrawn"]
    queue: str
    mode: Literal["form", "url"]
    message: str
    requestedSchema: dict[str, Any] | None
    url: str
    elicitationId: str
    priority: int
    context: dict[str, Any]
    createdAt: str
    deadline: str
    closedAt: str | None
    result: ElicitOutcome | None


def represent(request: ElicitationRequest) -> ReviewRequest:
    data: Any = json.loads(json.dumps(s.RequestSerializer(request).data, default=str))
    return data  # type: ignore[no-any-return]


# --- authentication: the agent key is the bearer token ------------------------------------------------------------


class AgentKeyVerifier:
    """The SDK's `TokenVerifier` over ReviewHub agent keys. Checked on every HTTP request, so revocation is
    immediate. `client_id` carries the agent's id: the tools, and the SDK's request-state principal binding,
    read it from the request's access token."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if not token.startswith("rh_"):
            return None
        agent: Agent | None = await database_call(agent_for_key)(token)
        if agent is None:
            return None
        return AccessToken(token=token, client_id=str(agent.pk), scopes=list(agent.scopes or []))


def current_agent_id() -> int:
    token = get_access_token()
    if token is None:  # RequireAuthMiddleware answers 401 before any tool runs; this is a guard, not a path
        raise ToolError("Not authenticated.")
    return int(token.client_id)


def _load_agent(agent_id: int) -> Agent:
    agent = Agent.objects.filter(pk=agent_id, revoked_at__isnull=True).first()
    if agent is None:
        raise DomainError("Invalid or revoked agent key.")
    return agent


def tool_error(exc: DomainError) -> ToolError:
    """The REST error body `{code, detail, fields?}` as the tool error text, so hosts parse one shape."""
    body: dict[str, Any] = {"code": exc.code, "detail": exc.detail}
    if exc.fields:
        body["fields"] = exc.fields
    return ToolError(json.dumps(body))


def wait_cap(seconds: int) -> int:
    return selectors.long_poll_cap(seconds)


# --- the synchronous halves (ORM, services) ----------------------------------------------------------------------


def _create(agent_id: int, body: dict[str, Any]) -> ReviewRequest:
    envelope = s.CreateRequestSerializer(data=body)
    if not envelope.is_valid():
        fields = {name: " ".join(str(e) for e in errors) for name, errors in envelope.errors.items()}
        raise DomainError("Invalid arguments.", fields)
    data = envelope.validated_data
    request, _ = transitions.create_request(
        agent=_load_agent(agent_id),
        queue_slug=data["queue"],
        message=data["message"],
        mode=Mode.FORM,
        requested_schema=data["requestedSchema"],
        context=data.get("context"),
        priority=data["priority"],
        expires_in=data.get("expiresIn"),
    )
    return represent(request)


def _read(agent_id: int, request_id: str) -> ReviewRequest:
    try:
        return represent(access.owned_request(agent_id, request_id))
    except NotFoundError:
        raise NotFoundError("No such request.", {"id": "not one of this agent's requests"}) from None


def _list_open(agent_id: int, queue: str | None) -> list[ReviewRequest]:
    rows = selectors.agent_requests(agent_id, "open")
    return [represent(row) for row in rows if queue is None or row.queue.slug == queue]


def _withdraw(agent_id: int, request_id: str) -> ReviewRequest:
    _read(agent_id, request_id)
    return represent(transitions.withdraw_request(request_id, agent=_load_agent(agent_id)))  # type: ignore[arg-type]


async def _call(func: Callable[..., Any], *args: Any) -> Any:
    try:
        return await database_call(func)(*args)
    except DomainError as exc:
        raise tool_error(exc) from None


async def _wait_then_read(agent_id: int, request_id: str, seconds: int) -> ReviewRequest:
    if seconds > 0:
        await wait_for_request(agent_id, request_id, wait_cap(seconds))
    return await _call(_read, agent_id, request_id)  # type: ignore[no-any-return]


# --- the server ----------------------------------------------------------------------------------------------------


def build_server() -> MCPServer:
    server = MCPServer(
        SERVER_NAME,
        title="ReviewHub",
        instructions=INSTRUCTIONS,
        # The SDK's bearer stack, fed by agent keys. ReviewHub issues those keys, so it is the issuer; no OAuth
        # endpoints are mounted (no auth_server_provider) and no resource metadata (no resource_server_url).
        auth=AuthSettings(issuer_url=settings.PUBLIC_URL, resource_server_url=None),  # type: ignore[arg-type]
        token_verifier=AgentKeyVerifier(),
    )

    @server.tool(
        name="ask_reviewer",
        title="Ask a human reviewer",
        description=(
            "Queue a question for a human reviewer and wait up to waitSeconds for the answer. requestedSchema is "
            "an MCP elicitation schema (flat object of primitive fields). Returns the request: when status is "
            "'completed' or 'expired', result is the MCP ElicitResult (action accept/decline/cancel, content on "
            "accept); otherwise keep the id and call get_request later."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    )
    async def ask_reviewer(
        message: str,
        requestedSchema: dict[str, Any],
        queue: str,
        waitSeconds: int = 0,
        priority: int = 0,
        expiresIn: int | None = None,
        context: dict[str, Any] | None = None,
    ) -> ReviewRequest:
        agent_id = current_agent_id()
        body: dict[str, Any] = {
            "message": message,
            "mode": "form",
            "requestedSchema": requestedSchema,
            "queue": queue,
            "priority": priority,
        }
        if expiresIn is not None:
            body["expiresIn"] = expiresIn
        if context is not None:
            body["context"] = context
        created: ReviewRequest = await _call(_create, agent_id, body)
        if waitSeconds <= 0:
            return created
        try:
            return await _wait_then_read(agent_id, created["id"], waitSeconds)
        except anyio.get_cancelled_exc_class():
            # The host cancelled the call (or hung up) before learning the id: nobody will read the answer,
            # so the question leaves the reviewers' queue instead of costing someone's time.
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(DomainError):  # answered in the meantime
                    await database_call(_withdraw)(agent_id, created["id"])
            raise

    @server.tool(
        name="get_request",
        title="Check a review request",
        description=(
            "A request's status and, once closed, its result (MCP ElicitResult). waitSeconds > 0 waits up to "
            "that long (capped) for the request to close."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def get_request(id: str, waitSeconds: int = 0) -> ReviewRequest:
        return await _wait_then_read(current_agent_id(), id, waitSeconds)

    @server.tool(
        name="list_open_requests",
        title="List open review requests",
        description="This agent's open (pending or claimed) requests, newest first; optionally one queue's only.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def list_open_requests(queue: str | None = None) -> list[ReviewRequest]:
        return await _call(_list_open, current_agent_id(), queue)  # type: ignore[no-any-return]

    @server.tool(
        name="cancel_request",
        title="Withdraw a review request",
        description="Withdraw an open request (the answer is no longer needed); reviewers see it vanish.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    async def cancel_request(id: str) -> ReviewRequest:
        return await _call(_withdraw, current_agent_id(), id)  # type: ignore[no-any-return]

    return server


# --- mounting in front of Django -----------------------------------------------------------------------------------


class _Runtime:
    """One MCP server, its Starlette app and its running session manager, bound to one event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.server = build_server()
        self.app = self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            # Host and Origin are checked by MCPEndpoint against Django's own settings instead.
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=settings.MAX_BODY_BYTES,
        )
        self.ready = asyncio.Event()
        self.failed: BaseException | None = None
        self.task = self.loop.create_task(self._serve(), name="reviewhub-mcp-sessions")

    async def _serve(self) -> None:
        try:
            async with self.server.session_manager.run():
                self.ready.set()
                await asyncio.Event().wait()  # until the loop shuts down
        except BaseException as exc:
            self.failed = exc
            self.ready.set()
            raise

    @property
    def alive(self) -> bool:
        return not self.task.done() and self.loop is asyncio.get_running_loop()


class MCPEndpoint:
    """ASGI: `/mcp` and `/mcp/` go to the MCP server, everything else to `app` (Django)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._runtime: _Runtime | None = None
        self._lock: asyncio.Lock | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_path(scope)
        if scope["type"] != "http" or route not in (MCP_PATH, MCP_PATH + "/"):
            await self.app(scope, receive, send)
            return
        refusal = origin_refusal(scope)
        if refusal is not None:
            await plain_response(send, *refusal)
            return
        runtime = await self.runtime()
        # The SDK route is `/mcp`; `/mcp/` is the documented spelling, so both are served without a redirect.
        await runtime.app({**scope, "path": scope.get("root_path", "") + MCP_PATH}, receive, send)

    async def runtime(self) -> _Runtime:
        if self._runtime is not None and self._runtime.alive:
            return self._runtime
        if self._lock is None or self._lock._loop is not asyncio.get_running_loop():  # type: ignore[attr-defined]
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._runtime is None or not self._runtime.alive:
                self._runtime = _Runtime()
                logger.info("MCP endpoint started at %s/", MCP_PATH)
        runtime = self._runtime
        await runtime.ready.wait()
        if runtime.failed is not None:
            raise RuntimeError("the MCP session manager failed to start") from runtime.failed
        return runtime


def route_path(scope: Scope) -> str:
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return str(value.decode("latin-1"))
    return None


def origin_refusal(scope: Scope) -> tuple[int, str] | None:
    """Django's ALLOWED_HOSTS for Host; a browser Origin must be this host or a CSRF-trusted origin (DNS
    rebinding). Agents send no Origin header."""
    host = _header(scope, b"host") or ""
    domain, _ = split_domain_port(host)
    if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
        return 400, "Invalid Host header"
    origin = _header(scope, b"origin")
    if origin and urlsplit(origin).netloc != host and origin not in settings.CSRF_TRUSTED_ORIGINS:
        return 403, "Cross-origin MCP requests are not allowed"
    return None


async def plain_response(send: Send, status: int, text: str) -> None:
    body = text.encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"text/plain; charset=utf-8"),
                (b"content-length", b"%d" % len(body)),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def with_mcp_endpoint(app: Any) -> Any:
    """Typed loosely on purpose: Django's ASGIHandler and channels' apps disagree with each other's ASGI types."""
    return MCPEndpoint(app)


__all__ = ["MCPEndpoint", "build_server", "with_mcp_endpoint"]
