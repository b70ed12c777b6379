"""ReviewHub as an MCP server: any MCP host can route a question to a human reviewer without custom code.

Streamable HTTP at `/mcp/`, built with the official SDK (`mcp`, the optional `reviewhub[mcp]` extra). Two ways in,
both through the SDK's own bearer-token stack, so the tools see the caller as the request's access token:

- an agent key (`Authorization: Bearer rh_…`), for scripts and hosts configured with a static header;
- an OAuth 2.1 access token (elicitation/mcp/oauth.py): a remote host discovers the authorization server from the
  401's `WWW-Authenticate: Bearer resource_metadata=…`, registers, sends a person through ReviewHub's consent page
  and acts as the agent and queues that person chose. Tokens bound to another resource, expired or revoked are
  refused with the same 401.

Tools:

- `list_queues` — the queues the caller may post to, with open counts.
- `ask_reviewer` — queue a form question (MCP `message` + `requestedSchema`) or a URL-mode request, and wait (up to
  the request's deadline if asked) for the answer, sending progress notifications every
  `MCP_PROGRESS_INTERVAL_SECONDS` so hosts that reset their timeout on progress keep waiting.
- `collect_secret` — open a hosted secret flow; returns only whether it was accepted and the flow id the agent's
  backend redeems with its key (`POST /api/v1/flows/{id}/retrieve`). The secret never crosses MCP.
- `get_request` — a request's status and result, with a suggested retry interval while open.
- `list_open_requests`, `cancel_request`.

On 2026-07-28 requests that declare the Tasks extension (`io.modelcontextprotocol/tasks`, SEP-2663),
`ask_reviewer` and `collect_secret` return a task at once instead of waiting; `tasks/get` polls it and
`tasks/cancel` withdraws the request (elicitation/mcp/tasks.py; `RequestTasks` below reads tasks from request rows).

Every write goes through `elicitation.queue.transitions` (or `flows.hosted_flows`), exactly as the REST API does;
input is checked by the REST API's own serializers, so limits, URL checks and error codes are the same on both
doors. Errors are MCP tool errors whose text is the REST error body `{code, detail, fields?}`.

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
from datetime import datetime
from typing import Annotated, Any, Literal, NotRequired
from urllib.parse import urlsplit

import anyio
import pydantic_core
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import AnyHttpUrl, Field
from typing_extensions import TypedDict

from elicitation.api import serializers as s
from elicitation.api.flow_views import CreateFlowSerializer
from elicitation.delivery import waiter_threads
from elicitation.delivery.long_poll import wait_for_request
from elicitation.flows import hosted_flows
from elicitation.mcp import tasks
from elicitation.mcp.oauth import principal_for_token
from elicitation.models import OPEN_STATUSES, Agent, ElicitationRequest, HostedFlow, Queue, Status
from elicitation.queue import access, clock, selectors, transitions
from elicitation.queue.errors import DomainError, InvalidInput, NotFoundError
from elicitation.queue.keys import agent_for_key

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MCP_PATH = "/mcp"
SERVER_NAME = "reviewhub"
QUEUE_SCOPE_PREFIX = "queue:"
OAUTH_SCOPE = "oauth"
INSTRUCTIONS = (
    "ReviewHub routes a question to a human reviewer. Call list_queues to see where you may ask. Call "
    "ask_reviewer with a message and an MCP elicitation requestedSchema (a flat object of "
    "string/number/integer/boolean/enum fields), or mode 'url' with a URL the reviewer should open. The reviewer "
    "answers with accept (content matches the schema), decline or cancel. Humans take minutes or hours: pass "
    "waitSeconds to wait (progress notifications keep the call alive), or keep the request id and call "
    "get_request later, after its retryAfterSeconds. Never ask for secrets (passwords, API keys) in a form: use "
    "collect_secret, whose values only your backend can fetch with its agent key."
)
TERMINAL = ("completed", "expired", "withdrawn")


def database_call(func: Callable[..., Any]) -> Callable[..., Awaitable[Any]]:
    """ORM code off the event loop, on the loop's default executor (tool calls are few; waits are not)."""
    return waiter_threads.database_call(func, executor=None)


# --- what the tools return (also published as each tool's outputSchema) -------------------------------------------


class ElicitOutcome(TypedDict):
    """MCP `ElicitResult`: `content` only on accept of a form."""

    action: Literal["accept", "decline", "cancel"]
    content: NotRequired[dict[str, Any]]


class ReviewRequest(TypedDict):
    """The same representation as `GET /api/v1/requests/{id}`, plus a retry hint while the request is open."""

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
    overdue: bool
    result: ElicitOutcome | None
    retryAfterSeconds: NotRequired[int]


class QueueInfo(TypedDict):
    slug: str
    name: str
    description: str
    pending: int
    claimed: int
    defaultDeadlineSeconds: int


class SecretOutcome(TypedDict):
    """What the MCP channel may carry about a hosted secret flow: never the values."""

    flowId: str
    requestId: str
    status: Literal["pending", "claimed", "completed", "expired", "withdrawn"]
    action: Literal["accept", "decline", "cancel"] | None
    redeem: str
    retryAfterSeconds: NotRequired[int]


def retry_after(request: ElicitationRequest) -> int:
    """How long a polling agent should wait before asking again: a tenth of the time left, 5 s to 60 s."""
    left = (request.deadline - clock.now()).total_seconds()
    return int(max(5, min(60, left / 10)))


def represent(request: ElicitationRequest) -> ReviewRequest:
    data: Any = json.loads(json.dumps(s.RequestSerializer(request).data, default=str))
    if request.status in OPEN_STATUSES:
        data["retryAfterSeconds"] = retry_after(request)
    return data  # type: ignore[no-any-return]


# --- authentication: an agent key or an OAuth access token ---------------------------------------------------------


class AgentKeyVerifier:
    """The SDK's `TokenVerifier` over ReviewHub agent keys and OAuth access tokens. Checked on every HTTP request,
    so revocation (of a key, an agent or a consent) is immediate. `client_id` carries the agent's id: the tools,
    and the SDK's request-state principal binding, read it from the request's access token. An OAuth token's
    scopes name its queues (`queue:<slug>`)."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token.startswith("rh_"):
            agent: Agent | None = await database_call(agent_for_key)(token)
            if agent is None:
                return None
            return AccessToken(token=token, client_id=str(agent.pk), scopes=list(agent.scopes or []))
        principal = await database_call(principal_for_token)(token)
        if principal is None:
            return None
        scopes = [
            *principal.capabilities,
            OAUTH_SCOPE,
            *(QUEUE_SCOPE_PREFIX + q for q in sorted(principal.queues)),
        ]
        return AccessToken(
            token=token,
            client_id=str(principal.agent_id),
            scopes=scopes,
            expires_at=principal.expires_at,
            resource=settings.MCP_RESOURCE_URL,
            subject=f"grant:{principal.grant_id}",
        )


class Caller:
    """The agent behind this call and, for an OAuth token, the queues its consent covers (None: all the agent's)."""

    def __init__(self, agent_id: int, queues: frozenset[str] | None) -> None:
        self.agent_id = agent_id
        self.queues = queues

    def check_queue(self, slug: str) -> None:
        if self.queues is not None and slug not in self.queues:
            # The REST API's words for a queue the key may not post to.
            raise InvalidInput("Unknown queue.", {"queue": "unknown queue, or not one this key may post to"})

    def sees(self, request: ElicitationRequest) -> bool:
        return self.queues is None or request.queue.slug in self.queues


def current_caller() -> Caller:
    token = get_access_token()
    if token is None:  # RequireAuthMiddleware answers 401 before any tool runs; this is a guard, not a path
        raise ToolError("Not authenticated.")
    queues: frozenset[str] | None = None
    if OAUTH_SCOPE in token.scopes:
        queues = frozenset(
            x[len(QUEUE_SCOPE_PREFIX) :] for x in token.scopes if x.startswith(QUEUE_SCOPE_PREFIX)
        )
    return Caller(int(token.client_id), queues)


def current_agent_id() -> int:
    return current_caller().agent_id


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


def _invalid(serializer: Any) -> DomainError:
    fields = {name: " ".join(str(e) for e in errors) for name, errors in serializer.errors.items()}
    return InvalidInput("Invalid arguments.", fields)


# --- the synchronous halves (ORM, services) ----------------------------------------------------------------------


def _queues(caller: Caller) -> list[QueueInfo]:
    queues = Queue.objects.filter(agents__pk=caller.agent_id, agents__revoked_at__isnull=True)
    if caller.queues is not None:
        queues = queues.filter(slug__in=caller.queues)
    rows: list[QueueInfo] = []
    for summary in selectors.open_counts(queues):
        queue = summary.queue
        minutes = max(1, queue.default_deadline_seconds // 60)
        rows.append(
            {
                "slug": queue.slug,
                "name": queue.name,
                "description": (
                    f"{queue.name}: reviewers answer within {minutes} min by default; unanswered requests "
                    f"close with '{queue.expiry_outcome}'."
                ),
                "pending": summary.pending,
                "claimed": summary.claimed,
                "defaultDeadlineSeconds": queue.default_deadline_seconds,
            }
        )
    return rows


def _create(caller: Caller, body: dict[str, Any]) -> ReviewRequest:
    envelope = s.CreateRequestSerializer(data=body)
    if not envelope.is_valid():
        raise _invalid(envelope)
    data = envelope.validated_data
    caller.check_queue(data["queue"])
    request, _ = transitions.create_request(
        agent=_load_agent(caller.agent_id),
        queue_slug=data["queue"],
        message=data["message"],
        mode=data["mode"],
        requested_schema=data.get("requestedSchema"),
        url=data.get("url", ""),
        elicitation_id=data.get("elicitationId", ""),
        context=data.get("context"),
        priority=data["priority"],
        expires_in=data.get("expiresIn"),
    )
    return represent(request)


def _open_flow(caller: Caller, body: dict[str, Any]) -> tuple[str, ReviewRequest]:
    envelope = CreateFlowSerializer(data=body)
    if not envelope.is_valid():
        raise _invalid(envelope)
    data = envelope.validated_data
    caller.check_queue(data["queue"])
    flow, _ = hosted_flows.create_hosted_flow(
        agent=_load_agent(caller.agent_id),
        queue_slug=data["queue"],
        message=data["message"],
        requested_schema=data["requestedSchema"],
        context=data.get("context"),
        priority=data["priority"],
        expires_in=data.get("expiresIn"),
        elicitation_id=data.get("elicitationId", ""),
    )
    return str(flow.pk), represent(flow.request)


def _owned(caller: Caller, request_id: str) -> ElicitationRequest:
    try:
        request = access.owned_request(caller.agent_id, request_id)
    except NotFoundError:
        request = None
    if request is None or not caller.sees(request):
        raise NotFoundError("No such request.", {"id": "not one of this agent's requests"})
    return request


def _read(caller: Caller, request_id: str) -> ReviewRequest:
    return represent(_owned(caller, request_id))


def _list_open(caller: Caller, queue: str | None) -> list[ReviewRequest]:
    rows = selectors.agent_requests(caller.agent_id, "open")
    return [represent(row) for row in rows if caller.sees(row) and (queue is None or row.queue.slug == queue)]


def _withdraw(caller: Caller, request_id: str) -> ReviewRequest:
    _owned(caller, request_id)
    agent = _load_agent(caller.agent_id)
    return represent(transitions.withdraw_request(request_id, agent=agent))  # type: ignore[arg-type]


async def _call(func: Callable[..., Any], *args: Any) -> Any:
    try:
        return await database_call(func)(*args)
    except DomainError as exc:
        raise tool_error(exc) from None


def progress_interval() -> float:
    return float(settings.MCP_PROGRESS_INTERVAL_SECONDS)


async def wait_with_progress(
    ctx: Context | None, caller: Caller, request_id: str, seconds: int
) -> ReviewRequest:
    """Wait up to `seconds` (never past the request's deadline, plus the sweeper's grace) for the request to close.

    Waits in slices of `MCP_PROGRESS_INTERVAL_SECONDS`, each a long-poll on the request's push group, and sends a
    progress notification after every slice that ends with the request still open: a host that resets its timeout
    on progress (as the MCP spec suggests) keeps waiting for as long as the human needs."""
    loop = asyncio.get_running_loop()
    current: ReviewRequest = await _call(_read, caller, request_id)
    deadline_left = (datetime.fromisoformat(current["deadline"]) - clock.now()).total_seconds()
    end = loop.time() + max(0.0, min(float(seconds), deadline_left + 2 * progress_interval()))
    beat = 0
    while current["status"] not in TERMINAL:
        remaining = end - loop.time()
        if remaining <= 0:
            break
        await wait_for_request(caller.agent_id, request_id, min(progress_interval(), remaining, wait_cap(60)))
        current = await _call(_read, caller, request_id)
        if current["status"] in TERMINAL:
            break
        beat += 1
        if ctx is not None:
            await ctx.report_progress(beat, None, f"Waiting for a human reviewer ({current['status']}).")
    return current


async def _withdraw_unread(caller: Caller, request_id: str) -> None:
    # The host cancelled the call (or hung up) before learning the id: nobody will read the answer,
    # so the question leaves the reviewers' queue instead of costing someone's time.
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(DomainError):  # answered in the meantime
            await database_call(_withdraw)(caller, request_id)


# --- tasks (SEP-2663): a task is a request row seen through the task vocabulary -----------------------------------

TASK_TOOLS = frozenset({"ask_reviewer", "collect_secret"})


def tool_result(value: Any) -> CallToolResult:
    """A tool's return value as the SDK sends it: JSON text plus the same value as structured content."""
    text = pydantic_core.to_json(value, fallback=str, indent=2).decode()
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=value)


def _task_state(caller: Caller, request_id: str, task_id: str) -> tasks.TaskState:
    try:
        request = _owned(caller, request_id)
    except NotFoundError:
        raise tasks.TaskNotFound from None
    view = represent(request)
    # The task's tool is read from the row too: a hosted secret flow's request has a flow.
    flow_id = HostedFlow.objects.filter(request=request).values_list("pk", flat=True).first()

    def state(status: tasks.TaskStatus, message: str, **extra: Any) -> tasks.TaskState:
        return tasks.TaskState(
            task_id=task_id,
            status=status,
            status_message=message,
            created_at=request.created_at,
            last_updated_at=request.updated_at,
            **extra,
        )

    if request.status in OPEN_STATUSES:
        claimed = request.status == Status.CLAIMED
        waiting = "A reviewer is answering." if claimed else "Waiting for a reviewer."
        return state("working", waiting, poll_interval_seconds=retry_after(request))
    if request.status == Status.WITHDRAWN:
        return state("cancelled", "The request was withdrawn.")
    # Answered or expired: the tool would have returned the closed request (an expiry is a result, not a failure).
    value: Any = secret_outcome(str(flow_id), view) if flow_id is not None else view
    outcome = f" ({view['result']['action']})" if view["result"] else ""
    return state("completed", f"The request {request.status}{outcome}.", result=tool_result(value))


def _cancel_task(caller: Caller, request_id: str) -> None:
    try:
        request = _owned(caller, request_id)
    except NotFoundError:
        raise tasks.TaskNotFound from None
    if request.status in OPEN_STATUSES:
        # Cancellation is cooperative: an answer that won the race stands, and the task ends completed.
        with contextlib.suppress(DomainError):
            transitions.withdraw_request(request.pk, agent=_load_agent(caller.agent_id))


class RequestTasks:
    """The TaskBackend: task ids are request ids signed for the calling agent; state comes from the row."""

    def task_id(self, request_id: str) -> str:
        return tasks.task_id_for(current_caller().agent_id, request_id)

    async def read(self, task_id: str) -> tasks.TaskState:
        caller = current_caller()
        request_id = tasks.request_id_from(caller.agent_id, task_id)
        state: tasks.TaskState = await database_call(_task_state)(caller, request_id, task_id)
        return state

    async def cancel(self, task_id: str) -> None:
        caller = current_caller()
        await database_call(_cancel_task)(caller, tasks.request_id_from(caller.agent_id, task_id))


# --- parameter types, each with the description hosts show to the model -----------------------------------------

QueueArg = Annotated[str, Field(description="Slug of the queue to ask in (see list_queues).")]
MessageArg = Annotated[str, Field(description="The question, as the reviewer will read it. Plain text.")]
SchemaArg = Annotated[
    dict[str, Any] | None,
    Field(
        description=(
            "Form mode: MCP elicitation requestedSchema, a flat JSON Schema object whose properties are "
            "string (optional format email/uri/date/date-time), number, integer, boolean, enum or array-of-enum "
            "fields; 'required' lists the fields the reviewer must fill. Omit in url mode."
        )
    ),
]
ModeArg = Annotated[
    Literal["form", "url"],
    Field(description="'form' (answer a form built from requestedSchema) or 'url' (open url and confirm)."),
]
UrlArg = Annotated[
    str | None,
    Field(
        description="URL mode: the http(s) page the reviewer must open. Checked as the REST API checks it."
    ),
]
ElicitationIdArg = Annotated[
    str | None,
    Field(description="URL mode: your MCP elicitationId, echoed back; defaults to the request id."),
]
WaitArg = Annotated[
    int,
    Field(
        ge=0,
        description=(
            "Seconds to wait for the answer (0 returns at once). The wait never outlasts the request's deadline; "
            "progress notifications are sent while waiting, so a host that resets its timeout on progress keeps "
            "waiting. A call answered with a task (Tasks extension) never waits."
        ),
    ),
]
PriorityArg = Annotated[
    int, Field(ge=-1000, le=1000, description="Higher is answered first within the queue; default 0.")
]
ExpiresArg = Annotated[
    int | None,
    Field(
        description="Seconds until the request expires; defaults to the queue's deadline (see list_queues)."
    ),
]
ContextArg = Annotated[
    dict[str, Any] | None,
    Field(description="Free JSON shown to the reviewer beside the question (ticket, diff summary, …)."),
]
RequestIdArg = Annotated[str, Field(description="The request id returned by ask_reviewer or collect_secret.")]
SecretSchemaArg = Annotated[
    dict[str, Any],
    Field(
        description=(
            'The fields to collect (MCP requestedSchema subset); text fields with "sensitive": true are '
            "masked and stored encrypted. Their values never come back over MCP."
        )
    ),
]


# --- the server ----------------------------------------------------------------------------------------------------


def build_server() -> MCPServer:
    server = MCPServer(
        SERVER_NAME,
        title="ReviewHub",
        instructions=INSTRUCTIONS,
        # The SDK's bearer stack, fed by agent keys and OAuth tokens. `resource_server_url` makes the 401 name the
        # protected resource metadata (`WWW-Authenticate: Bearer resource_metadata=…`); the verifier checks the
        # token's audience itself (OAuth tokens must be bound to MCP_RESOURCE_URL, agent keys have none).
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(settings.PUBLIC_URL),
            resource_server_url=AnyHttpUrl(settings.MCP_RESOURCE_URL),
            validate_token_resource=False,
        ),
        token_verifier=AgentKeyVerifier(),
        extensions=[tasks.TasksExtension(RequestTasks(), TASK_TOOLS)],
    )

    @server.tool(
        name="list_queues",
        title="List the queues you may ask in",
        description=(
            "The review queues this caller may post to, with a description, the number of pending and claimed "
            "requests, and the default deadline."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def list_queues() -> list[QueueInfo]:
        return await _call(_queues, current_caller())  # type: ignore[no-any-return]

    @server.tool(
        name="ask_reviewer",
        title="Ask a human reviewer",
        description=(
            "Queue a question for a human reviewer and wait up to waitSeconds for the answer. Form mode: "
            "requestedSchema is an MCP elicitation schema. URL mode: the reviewer opens url and confirms. Returns "
            "the request: when status is 'completed' or 'expired', result is the MCP ElicitResult (action "
            "accept/decline/cancel, content on accept of a form); otherwise keep the id and call get_request "
            "after retryAfterSeconds."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    )
    async def ask_reviewer(
        message: MessageArg,
        queue: QueueArg,
        ctx: Context,
        requestedSchema: SchemaArg = None,
        mode: ModeArg = "form",
        url: UrlArg = None,
        elicitationId: ElicitationIdArg = None,
        waitSeconds: WaitArg = 0,
        priority: PriorityArg = 0,
        expiresIn: ExpiresArg = None,
        context: ContextArg = None,
    ) -> ReviewRequest:
        caller = current_caller()
        body: dict[str, Any] = {"message": message, "mode": mode, "queue": queue, "priority": priority}
        optional = {
            "requestedSchema": requestedSchema,
            "url": url,
            "elicitationId": elicitationId,
            "expiresIn": expiresIn,
            "context": context,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        created: ReviewRequest = await _call(_create, caller, body)
        if tasks.deferred():  # a task-augmented call: the host polls tasks/get instead of waiting here
            tasks.started(created["id"])
            return created
        if waitSeconds <= 0:
            return created
        try:
            return await wait_with_progress(ctx, caller, created["id"], waitSeconds)
        except anyio.get_cancelled_exc_class():
            await _withdraw_unread(caller, created["id"])
            raise

    @server.tool(
        name="collect_secret",
        title="Collect a secret through a hosted page",
        description=(
            "Ask a reviewer to enter secrets (passwords, API keys) on ReviewHub's own hosted page. The values "
            "never travel over MCP: the result says only whether the reviewer accepted, and flowId, which your "
            "backend redeems once with its agent key (POST /api/v1/flows/{flowId}/retrieve). Needs the agent's "
            "flows:secrets capability."
        ),
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=True),
    )
    async def collect_secret(
        message: MessageArg,
        queue: QueueArg,
        requestedSchema: SecretSchemaArg,
        ctx: Context,
        waitSeconds: WaitArg = 0,
        priority: PriorityArg = 0,
        expiresIn: ExpiresArg = None,
        context: ContextArg = None,
    ) -> SecretOutcome:
        caller = current_caller()
        body: dict[str, Any] = {
            "message": message,
            "queue": queue,
            "requestedSchema": requestedSchema,
            "priority": priority,
        }
        if expiresIn is not None:
            body["expiresIn"] = expiresIn
        if context is not None:
            body["context"] = context
        flow_id, request = await _call(_open_flow, caller, body)
        if tasks.deferred():
            tasks.started(request["id"])
        elif waitSeconds > 0:
            try:
                request = await wait_with_progress(ctx, caller, request["id"], waitSeconds)
            except anyio.get_cancelled_exc_class():
                await _withdraw_unread(caller, request["id"])
                raise
        return secret_outcome(flow_id, request)

    @server.tool(
        name="get_request",
        title="Check a review request",
        description=(
            "A request's status and, once closed, its result (MCP ElicitResult). While it is open, "
            "retryAfterSeconds suggests when to ask again. waitSeconds > 0 waits up to that long (capped) for the "
            "request to close."
        ),
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def get_request(id: RequestIdArg, ctx: Context, waitSeconds: WaitArg = 0) -> ReviewRequest:
        caller = current_caller()
        if waitSeconds <= 0:
            return await _call(_read, caller, id)  # type: ignore[no-any-return]
        return await wait_with_progress(ctx, caller, id, wait_cap(waitSeconds))

    @server.tool(
        name="list_open_requests",
        title="List open review requests",
        description="This agent's open (pending or claimed) requests, newest first; optionally one queue's only.",
        annotations=ToolAnnotations(read_only_hint=True, open_world_hint=False),
    )
    async def list_open_requests(
        queue: Annotated[str | None, Field(description="Only this queue's requests (a slug).")] = None,
    ) -> list[ReviewRequest]:
        return await _call(_list_open, current_caller(), queue)  # type: ignore[no-any-return]

    @server.tool(
        name="cancel_request",
        title="Withdraw a review request",
        description="Withdraw an open request (the answer is no longer needed); reviewers see it vanish.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    async def cancel_request(id: RequestIdArg) -> ReviewRequest:
        return await _call(_withdraw, current_caller(), id)  # type: ignore[no-any-return]

    return server


def secret_outcome(flow_id: str, request: ReviewRequest) -> SecretOutcome:
    result = request.get("result")
    outcome: SecretOutcome = {
        "flowId": flow_id,
        "requestId": request["id"],
        "status": request["status"],
        "action": result["action"] if result else None,
        "redeem": f"POST /api/v1/flows/{flow_id}/retrieve with the agent key",
    }
    if "retryAfterSeconds" in request:
        outcome["retryAfterSeconds"] = request["retryAfterSeconds"]
    return outcome


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
