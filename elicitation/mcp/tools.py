"""The MCP tools ReviewHub offers, each registered with the description hosts show to the model:

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
`tasks/cancel` withdraws the request (elicitation/mcp/tasks.py; `RequestTasks` in request_tasks.py reads tasks
from request rows).

Every tool call is one call of the agent's `AGENT_RATE` budget, the one its REST calls draw on, whether the caller
holds the agent's key or an OAuth token acting for it. A refused call (over the rate, a domain error, arguments the
input schema refuses) is an MCP tool error (`isError: true`) whose text is exactly the body REST answers for the
same refusal, `{code, detail, fields?}` (`retryAfter` too when over the rate), and whose `structuredContent` is
that body (`ReviewHubMCPServer`, service_calls.py).
"""

import logging
from typing import Annotated, Any, Literal

import anyio
from django.conf import settings
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, ToolAnnotations
from pydantic import AnyHttpUrl, Field

from elicitation.api import throttling
from elicitation.api.errors import domain_error_body, invalid_input, throttled_body
from elicitation.mcp import tasks
from elicitation.mcp.callers import AgentKeyVerifier, current_caller
from elicitation.mcp.request_tasks import TASK_TOOLS, RequestTasks
from elicitation.mcp.results import QueueInfo, ReviewRequest, SecretOutcome, secret_outcome
from elicitation.mcp.service_calls import call_service, refusal_body, tool_error
from elicitation.mcp.tool_actions import (
    create_request,
    open_requests,
    open_secret_flow,
    queue_infos,
    read_request,
    wait_cap,
    wait_with_progress,
    withdraw_request,
    withdraw_unread,
)
from elicitation.queue import untrusted_json

logger = logging.getLogger(__name__)

SERVER_NAME = "reviewhub"
INSTRUCTIONS = (
    "ReviewHub routes a question to a human reviewer. Call list_queues to see where you may ask. Call "
    "ask_reviewer with a message and an MCP elicitation requestedSchema (a flat object of "
    "string/number/integer/boolean/enum fields), or mode 'url' with a URL the reviewer should open. The reviewer "
    "answers with accept (content matches the schema), decline or cancel. Humans take minutes or hours: pass "
    "waitSeconds to wait (progress notifications keep the call alive), or keep the request id and call "
    "get_request later, after its retryAfterSeconds. Never ask for secrets (passwords, API keys) in a form: use "
    "collect_secret, whose values only your backend can fetch with its agent key."
)

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


async def charge_agent_rate(agent_id: int) -> int | None:
    """One call against the agent's AGENT_RATE, counted exactly as REST's AgentRateThrottle counts it (same scope,
    same identity, same window), awaited on the event loop: None within the rate, else the seconds until the
    window ends."""
    rate = getattr(settings, throttling.AgentRateThrottle.rate_setting, None)
    return await throttling.acharge(throttling.AgentRateThrottle.scope, str(agent_id), rate)


def refused_arguments(arguments: dict[str, Any]) -> dict[str, Any] | None:
    """REST's body check (`api/parsers.UntrustedJSONParser`) on a tool's arguments, which the SDK's JSON-RPC parser
    lets through up to its own ~200 levels: the same `invalid` body naming the same path (`context.a.a…`), or None.
    The arguments object stands where REST's body does, so depths and paths count alike."""
    try:
        untrusted_json.check(arguments)
    except untrusted_json.JSONRefused as refused:
        return domain_error_body(invalid_input({refused.path: [refused.reason]}))
    return None


class ReviewHubMCPServer(MCPServer[Any]):
    """The SDK's server with REST's door rules around every tool call: the call is charged to the agent's rate
    first, its arguments pass REST's body check, and a refusal is answered with the REST body instead of the SDK's
    "Error executing tool <name>: …"."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        caller = current_caller()
        retry_after = await charge_agent_rate(caller.agent_id)
        if retry_after is not None:
            logger.info("Tool %r refused: agent %s is over AGENT_RATE", name, caller.agent_id)
            return tool_error(throttled_body(retry_after))
        refused = refused_arguments(arguments)
        if refused is not None:
            logger.info("Tool %r refused: %s", name, refused["code"])
            return tool_error(refused)
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            body = refusal_body(exc)
            if body is None:
                raise
            logger.info("Tool %r refused: %s", name, body["code"])
            return tool_error(body)


def build_server() -> MCPServer:
    server = ReviewHubMCPServer(
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
        return await call_service(queue_infos, current_caller())  # type: ignore[no-any-return]

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
        created: ReviewRequest = await call_service(create_request, caller, body)
        if tasks.deferred():  # a task-augmented call: the host polls tasks/get instead of waiting here
            tasks.started(created["id"])
            return created
        if waitSeconds <= 0:
            return created
        try:
            return await wait_with_progress(ctx, caller, created["id"], waitSeconds)
        except anyio.get_cancelled_exc_class():
            await withdraw_unread(caller, created["id"])
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
        flow_id, request = await call_service(open_secret_flow, caller, body)
        if tasks.deferred():
            tasks.started(request["id"])
        elif waitSeconds > 0:
            try:
                request = await wait_with_progress(ctx, caller, request["id"], waitSeconds)
            except anyio.get_cancelled_exc_class():
                await withdraw_unread(caller, request["id"])
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
            return await call_service(read_request, caller, id)  # type: ignore[no-any-return]
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
        return await call_service(open_requests, current_caller(), queue)  # type: ignore[no-any-return]

    @server.tool(
        name="cancel_request",
        title="Withdraw a review request",
        description="Withdraw an open request (the answer is no longer needed); reviewers see it vanish.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False),
    )
    async def cancel_request(id: RequestIdArg) -> ReviewRequest:
        return await call_service(withdraw_request, current_caller(), id)  # type: ignore[no-any-return]

    return server
