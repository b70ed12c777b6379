"""ReviewHub as an MCP server: any MCP host can route a question to a human reviewer without custom code.

Streamable HTTP at `/mcp/`, built with the official SDK (`mcp`, the optional `reviewhub[mcp]` extra). This module
mounts it in front of Django; the rest lives beside it:

- `tools.py`: the tools and their parameters, registered on `ReviewHubMCPServer` (`build_server`), the SDK's
  server with REST's door rules around every call: the agent's AGENT_RATE, and refusals as REST's error body;
- `tool_actions.py`: what each tool does, through the same transitions and serializers as the REST API;
- `results.py`: what the tools return; `callers.py`: who is calling (agent key or OAuth token);
- `service_calls.py`: the hop off the event loop, and refusals as MCP tool errors carrying REST's error body;
- `request_tasks.py`: the Tasks extension's backend over request rows.

Why the session manager is started here: the SDK's `StreamableHTTPSessionManager.run()` must be running (it owns
the task group requests are served in) before the first request. Starlette would start it from the ASGI lifespan,
but `with_periodic_sweeps` answers those, and daphne (`runserver`'s server) sends none, so `MCPEndpoint` starts
it on the first `/mcp` request, on the server's own event loop, and keeps it for the process's life. Stateless
HTTP: no MCP session lives in one process, so several ASGI processes behind a load balancer all serve `/mcp/`.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.http.request import split_domain_port, validate_host
from mcp.server.transport_security import TransportSecuritySettings

from elicitation.mcp.tools import build_server

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

MCP_PATH = "/mcp"


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
