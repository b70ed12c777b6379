"""The gateway's MCP server: one SDK lowlevel `Server` per upstream, served at `/mcp/gateway/<name>/` behind the same
bearer stack as `/mcp/` (agent keys and OAuth tokens; `GatewayKeyVerifier` is `/mcp/`'s verifier with the queue check
read in the same trip), the same Host/Origin checks and the same `AGENT_RATE`, each request charged once.

Everything is proxied as the upstream answers it: `tools/list`, `resources/list`, `resources/templates/list`,
`resources/read`, `prompts/list`, `prompts/get`. A `tools/call` is forwarded at once only for the tools the
upstream's configuration names in `pass`; every other call becomes an approval request in the upstream's queue
(approvals.py), where rules, quorum, remembered decisions and scripted answers decide as for any request, and is
forwarded once, only if approved. Upstream failures are JSON-RPC errors naming the upstream (upstreams.py);
an unknown gateway name is a 404 before any MCP is spoken."""

import asyncio
import contextlib
import logging
from typing import Any

from django.conf import settings
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import ServerRequestContext
from mcp.server.extension import compose_tool_call_handler
from mcp.server.lowlevel import Server
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.exceptions import MCPError
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    ListResourcesResult,
    ListResourceTemplatesResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
)
from pydantic import AnyHttpUrl
from starlette.applications import Starlette

from elicitation.api.errors import domain_error_body, throttled_body
from elicitation.mcp import tasks
from elicitation.mcp.callers import (
    AgentKeyVerifier,
    Caller,
    caller_of,
    current_caller,
    key_access,
)
from elicitation.mcp.gateway import approvals
from elicitation.mcp.gateway.config import Upstream
from elicitation.mcp.gateway.tasks import GatewayTasks, HeldTools, version_gated
from elicitation.mcp.gateway.upstreams import Upstreams
from elicitation.mcp.results import ReviewRequest
from elicitation.mcp.service_calls import tool_error
from elicitation.mcp.tool_actions import TERMINAL
from elicitation.mcp.tools import charge_agent_rate, refused_arguments
from elicitation.queue import access
from elicitation.queue.errors import InvalidInput
from elicitation.queue.keys import agent_for_key_posting_to, is_agent_key

logger = logging.getLogger(__name__)

GATEWAY_PREFIX = "/mcp/gateway/"
# A refusal of the gateway itself (rate, queue) on a method that has no tool error to carry it.
GATEWAY_REFUSED = -32012
Ctx = ServerRequestContext[Any, Any]


# The token's claim, set by `GatewayKeyVerifier`, that its agent may post to this gateway's queue.
POSTS_TO_QUEUE = "reviewhub/postsToQueue"


def may_post(caller: Caller, upstream: Upstream) -> bool:
    """The caller may post to the upstream's queue: one of its key's queues; for an OAuth token, a consented one."""
    allowed = caller.queues is None or upstream.queue in caller.queues
    return allowed and access.agent_may_post(caller.agent_id, upstream.queue)


class GatewayKeyVerifier(AgentKeyVerifier):
    """`/mcp/`'s verifier, and in the same trip off the event loop the gateway's queue check, which the token then
    carries (claim POSTS_TO_QUEUE) to `admission`: one trip per request for the whole door, not two. For an agent
    key, the key's row and the queue check are one statement (`keys.agent_for_key_posting_to`)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream

    def resolve(self, token: str) -> AccessToken | None:
        if is_agent_key(token):
            agent, posts = agent_for_key_posting_to(token, self.upstream.queue)
            found = key_access(token, agent)
        else:
            found = super().resolve(token)
            posts = found is not None and may_post(caller_of(found), self.upstream)
        if found is None:
            return None
        return found.model_copy(update={"claims": {**(found.claims or {}), POSTS_TO_QUEUE: posts}})


async def admission() -> tuple[Caller, dict[str, Any] | None]:
    """REST's door rules for one gateway request: one call of the agent's AGENT_RATE, and the caller may post to
    the upstream's queue (as the verifier found it). The caller, and None or the refusal body."""
    token = get_access_token()
    caller = current_caller()
    retry_after = await charge_agent_rate(caller.agent_id)
    if retry_after is not None:
        return caller, throttled_body(retry_after)
    if token is None or not (token.claims or {}).get(POSTS_TO_QUEUE):
        refused = InvalidInput(
            "Unknown queue.", {"queue": "this gateway's queue is not one this caller may post to"}
        )
        return caller, domain_error_body(refused)
    return caller, None


class GatewayServer:
    """The handlers of one upstream's gateway, over the event loop's `Upstreams`."""

    def __init__(self, upstream: Upstream, upstreams: Upstreams) -> None:
        self.upstream = upstream
        self.upstreams = upstreams
        self.input_schemas: dict[str, dict[str, Any]] = {}

    async def _admit(self) -> Caller:
        caller, refused = await admission()
        if refused is not None:
            raise MCPError(GATEWAY_REFUSED, refused["detail"], refused)
        return caller

    def _cursor(self, params: PaginatedRequestParams | None) -> str | None:
        return params.cursor if params is not None else None

    async def list_tools(self, ctx: Ctx, params: PaginatedRequestParams | None) -> ListToolsResult:
        await self._admit()
        cursor = self._cursor(params)
        listed: ListToolsResult = await self.upstreams.call(
            self.upstream.name, lambda c: c.list_tools(cursor=cursor)
        )
        self.input_schemas.update((tool.name, tool.input_schema) for tool in listed.tools)
        return listed

    def tool_input_schema(self, name: str) -> dict[str, Any] | None:
        """The SDK's `Mcp-Param-*` header check of a 2026-07-28 `tools/call` reads the tool's schema here: as the
        upstream last listed it through this gateway, or None (not listed in this process: the call is served
        unchecked, and the upstream checks the headers the gateway's own client sends it). Without it the SDK runs
        `list_tools` for every call with arguments: an upstream round trip and a second AGENT_RATE charge."""
        return self.input_schemas.get(name)

    async def list_resources(self, ctx: Ctx, params: PaginatedRequestParams | None) -> ListResourcesResult:
        await self._admit()
        cursor = self._cursor(params)
        return await self.upstreams.call(self.upstream.name, lambda c: c.list_resources(cursor=cursor))

    async def list_resource_templates(
        self, ctx: Ctx, params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        await self._admit()
        cursor = self._cursor(params)
        return await self.upstreams.call(
            self.upstream.name, lambda c: c.list_resource_templates(cursor=cursor)
        )

    async def read_resource(self, ctx: Ctx, params: ReadResourceRequestParams) -> ReadResourceResult:
        await self._admit()
        return await self.upstreams.call(self.upstream.name, lambda c: c.read_resource(params.uri))

    async def list_prompts(self, ctx: Ctx, params: PaginatedRequestParams | None) -> ListPromptsResult:
        await self._admit()
        cursor = self._cursor(params)
        return await self.upstreams.call(self.upstream.name, lambda c: c.list_prompts(cursor=cursor))

    async def get_prompt(self, ctx: Ctx, params: GetPromptRequestParams) -> GetPromptResult:
        await self._admit()
        return await self.upstreams.call(
            self.upstream.name, lambda c: c.get_prompt(params.name, params.arguments)
        )

    async def call_tool(self, ctx: Ctx, params: CallToolRequestParams) -> CallToolResult:
        caller, refused = await admission()
        arguments: dict[str, Any] = dict(params.arguments or {})
        refused = refused or refused_arguments(arguments)
        if refused is not None:
            return tool_error(refused)
        tool = params.name
        if tool in self.upstream.passed_tools:
            return await self.forward(tool, arguments, None)
        request = await approvals.open_approval(caller, self.upstream, tool, arguments)
        if tasks.deferred():  # a Tasks client: the task answers now, tasks/get forwards once approved
            tasks.started(request["id"])
            return CallToolResult(content=[])  # not sent: the extension answers with the task
        if request["status"] not in TERMINAL:
            request = await approvals.hold(ctx, caller, request["id"])
        if not approvals.approved(request):
            logger.info(
                "Gateway %r: call to %r not forwarded (%s)", self.upstream.name, tool, request["status"]
            )
            return approvals.refusal(request, self.upstream, tool)
        return await self.forward(tool, arguments, request)

    async def forward(
        self, tool: str, arguments: dict[str, Any], request: ReviewRequest | None
    ) -> CallToolResult:
        result = await self.upstreams.call(self.upstream.name, lambda c: c.call_tool(tool, arguments))
        if request is None:
            return result
        # Which approval let the call through, so the client (and its logs) can point at the decision.
        held = {"requestId": request["id"], "digest": request["context"]["mcp"]["digest"]}
        return result.model_copy(update={"meta": {**(result.meta or {}), "reviewhub/gateway": held}})


def build_gateway_server(upstream: Upstream, upstreams: Upstreams) -> Server[Any]:
    handlers = GatewayServer(upstream, upstreams)
    server: Server[Any] = Server(
        f"reviewhub-gateway-{upstream.name}",
        title=f"ReviewHub gateway to {upstream.name}",
        instructions=(
            f"Tools of the MCP server {upstream.name!r}, through ReviewHub: a call that needs a person's approval "
            "waits for it (progress notifications while it waits), then runs; a refused, expired or withdrawn "
            "approval is a tool error saying so."
        ),
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_resource_templates,
        on_read_resource=handlers.read_resource,
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
        get_tool_input_schema=handlers.tool_input_schema,
    )
    # The Tasks extension /mcp/ serves, over this upstream's approval requests (gateway/tasks.py), wired into the
    # lowlevel server as MCPServer wires an extension: its methods, its advertisement, its tools/call interceptor.
    extension = tasks.TasksExtension(
        GatewayTasks(upstream, handlers.forward), HeldTools(upstream.passed_tools)
    )
    for method in extension.methods():
        server.add_request_handler(method.method, method.params_type, version_gated(method))
    server.extensions[extension.identifier] = extension.settings()
    server.add_request_handler(
        "tools/call", CallToolRequestParams, compose_tool_call_handler([extension], handlers.call_tool)
    )
    return server


def may_hold(message: Any, upstream: Upstream) -> bool:
    """Whether this JSON-RPC message may wait for a person: a `tools/call` of a tool not passed straight through
    (or a batch, which older protocol versions allow, that might hold one). Anything else is answered at once."""
    if isinstance(message, list):
        return True
    params = message.get("params") if isinstance(message, dict) else None
    if not isinstance(params, dict) or message.get("method") != "tools/call":
        return False
    return params.get("name") not in upstream.passed_tools


class GatewayRuntime:
    """One upstream's server, its two Starlette apps and their running session managers, bound to the loop that made
    them (as elicitation/mcp/server.py's `_Runtime`, for the same reason: started on the first request, not at
    lifespan).

    The two apps differ only in how they answer: `streaming_app` may answer with an SSE stream, so a held call's
    progress notifications reach the client and its disconnect reaches the wait; `json_app` answers plain JSON,
    without the SDK's per-request task group and disconnect watcher (a share of the proxy overhead measured in
    bench/findings.md, 2026-11-28 afternoon). Streamable HTTP lets the server choose per request; `may_hold` says
    which a request needs."""

    def __init__(self, upstream: Upstream, upstreams: Upstreams) -> None:
        self.loop = asyncio.get_running_loop()
        self.upstream = upstream
        self.path = GATEWAY_PREFIX + upstream.name
        self.server = build_gateway_server(upstream, upstreams)
        verifier = GatewayKeyVerifier(upstream)
        self.streaming_app, streaming = self._app(verifier, json_response=False)
        self.json_app, plain = self._app(verifier, json_response=True)
        self._managers = (streaming, plain)
        self.ready = asyncio.Event()
        self.failed: BaseException | None = None
        self.task = self.loop.create_task(self._serve(), name=f"reviewhub-mcp-gateway-{upstream.name}")

    def _app(self, verifier: GatewayKeyVerifier, *, json_response: bool) -> tuple[Starlette, Any]:
        app = self.server.streamable_http_app(
            streamable_http_path=self.path,
            json_response=json_response,
            stateless_http=True,
            transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=settings.MAX_BODY_BYTES,
            auth=AuthSettings(
                issuer_url=AnyHttpUrl(settings.PUBLIC_URL),
                resource_server_url=AnyHttpUrl(settings.MCP_RESOURCE_URL),
                validate_token_resource=False,
            ),
            token_verifier=verifier,
        )
        return app, self.server.session_manager  # the manager the call just made

    async def _serve(self) -> None:
        try:
            async with contextlib.AsyncExitStack() as stack:
                for manager in self._managers:
                    await stack.enter_async_context(manager.run())
                self.ready.set()
                await asyncio.Event().wait()
        except BaseException as exc:
            self.failed = exc
            self.ready.set()
            raise

    @property
    def alive(self) -> bool:
        return not self.task.done() and self.loop is asyncio.get_running_loop()
