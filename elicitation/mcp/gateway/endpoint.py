"""ASGI: `/mcp/gateway/<name>` and `/mcp/gateway/<name>/` go to that upstream's gateway, everything else on to
`app`. Host and Origin are checked as `/mcp/` checks them; a name no upstream has is a plain 404 (the name is not
echoed back). Each gateway's server starts on its first request, on the server's own event loop. A POST's body is
read first to choose the app that answers it (`server.may_hold`), then handed on as it came."""

import asyncio
import json
import logging
from typing import Any

from django.conf import settings

from elicitation.mcp.gateway.config import Upstream, parse_upstreams
from elicitation.mcp.gateway.server import GATEWAY_PREFIX, GatewayRuntime, may_hold
from elicitation.mcp.gateway.upstreams import Upstreams
from elicitation.mcp.server import (
    ASGIApp,
    Message,
    Receive,
    Scope,
    Send,
    origin_refusal,
    plain_response,
    route_path,
)

logger = logging.getLogger(__name__)


class GatewayEndpoint:
    def __init__(self, app: ASGIApp, upstreams: dict[str, Upstream]) -> None:
        self.app = app
        self.config = upstreams
        self._runtimes: dict[str, GatewayRuntime] = {}
        self._upstreams: Upstreams | None = None
        self._lock: asyncio.Lock | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        route = route_path(scope)
        if scope["type"] != "http" or not route.startswith(GATEWAY_PREFIX):
            await self.app(scope, receive, send)
            return
        name = route[len(GATEWAY_PREFIX) :].removesuffix("/")
        if name not in self.config:
            await plain_response(send, 404, "No MCP gateway by that name.")
            return
        refusal = origin_refusal(scope)
        if refusal is not None:
            await plain_response(send, *refusal)
            return
        runtime = await self.runtime(name)
        scope = {**scope, "path": scope.get("root_path", "") + runtime.path}
        if scope.get("method") != "POST":
            await runtime.streaming_app(scope, receive, send)
            return
        message, receive = await read_message(receive, settings.MAX_BODY_BYTES)
        app = runtime.streaming_app if may_hold(message, runtime.upstream) else runtime.json_app
        await app(scope, receive, send)

    async def runtime(self, name: str) -> GatewayRuntime:
        runtime = self._runtimes.get(name)
        if runtime is None or not runtime.alive:
            loop = asyncio.get_running_loop()
            if self._lock is None or self._lock._loop is not loop:  # type: ignore[attr-defined]
                self._lock = asyncio.Lock()
            async with self._lock:
                runtime = self._runtimes.get(name)
                if runtime is None or not runtime.alive:
                    if self._upstreams is None or self._upstreams.loop is not loop:
                        self._upstreams = Upstreams(self.config)
                    runtime = self._runtimes[name] = GatewayRuntime(self.config[name], self._upstreams)
                    logger.info("MCP gateway %r started at %s%s/", name, GATEWAY_PREFIX, name)
        await runtime.ready.wait()
        if runtime.failed is not None:
            raise RuntimeError("the MCP gateway's session manager failed to start") from runtime.failed
        return runtime


async def read_message(receive: Receive, limit: int) -> tuple[Any, Receive]:
    """The POST body's JSON (None if it is no JSON or longer than `limit`), and a `receive` that hands the app the
    same body again. Past `limit` it stops reading, so the SDK's own body limit answers 413 as it would anyway."""
    messages: list[Message] = []
    size, more = 0, True
    while more and size <= limit:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        more = message.get("more_body", False)

    async def replay() -> Message:
        return messages.pop(0) if messages else await receive()

    if more or size > limit:
        return None, replay
    body = b"".join(m.get("body", b"") for m in messages if m["type"] == "http.request")
    try:
        return json.loads(body), replay
    except (ValueError, RecursionError):
        return None, replay


def with_mcp_gateway(app: Any) -> Any:
    """Typed loosely, as `with_mcp_endpoint`. Reads MCP_GATEWAY_UPSTREAMS now, so a bad entry stops the start."""
    return GatewayEndpoint(app, parse_upstreams(getattr(settings, "MCP_GATEWAY_UPSTREAMS", "")))
