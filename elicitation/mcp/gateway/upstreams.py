"""One long-lived MCP client per upstream and event loop, built on the official SDK's `Client` (stdio: the gateway
starts the command as a child process; streamable HTTP: one httpx2 client with the configured headers).

Held open between calls, so a proxied call costs one upstream round trip, not a process start or a handshake. A
link whose upstream went away (the process exited, the HTTP server refused) is dropped when a call finds it dead,
and the next call opens a new one. Every failure reaches the caller as an `MCPError` whose message names the
upstream and what went wrong, never the command line, environment or headers."""

import asyncio
import logging
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CONNECTION_CLOSED, INTERNAL_ERROR, Implementation

from elicitation.mcp.gateway.config import Upstream

logger = logging.getLogger(__name__)

T = TypeVar("T")

# JSON-RPC server-error codes (the -32000..-32099 range the spec leaves to implementations).
UPSTREAM_UNAVAILABLE = -32010
UPSTREAM_TIMEOUT = -32011
GATEWAY_INFO = Implementation(name="reviewhub-gateway", version="1")


class UpstreamUnavailable(MCPError):
    def __init__(self, upstream: Upstream, what: str) -> None:
        super().__init__(
            UPSTREAM_UNAVAILABLE, f"Upstream MCP server {upstream.name!r} is unavailable: {what}"
        )


def _transport(upstream: Upstream) -> Any:
    if upstream.command:
        params = StdioServerParameters(
            command=upstream.command[0],
            args=list(upstream.command[1:]),
            env=upstream.env or None,
            cwd=upstream.cwd,
        )
        return stdio_client(params, errlog=_errlog())
    http = httpx2.AsyncClient(
        headers=upstream.headers, timeout=httpx2.Timeout(30, read=upstream.timeout + 30)
    )
    return streamable_http_client(upstream.url, http_client=http), http


def _errlog() -> Any:
    # The child's stderr goes where ours goes (operators read it), unless ours is no real file (a test's capture).
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return open(os.devnull, "w")  # lives as long as the child
    return sys.stderr


class UpstreamLink:
    """An open SDK client to one upstream, owned by a task of its own (anyio scopes must close where they opened)."""

    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.client: Client | None = None
        self.failure: BaseException | None = None
        self._ready = asyncio.Event()
        self._close = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._hold(), name=f"mcp-gateway-{upstream.name}")

    async def _hold(self) -> None:
        http: httpx2.AsyncClient | None = None
        try:
            transport = _transport(self.upstream)
            if isinstance(transport, tuple):
                transport, http = transport
            async with Client(transport, cache=None, client_info=GATEWAY_INFO) as client:
                self.client = client
                self._ready.set()
                await self._close.wait()
        except Exception as exc:  # reported to the caller, in words that carry no configuration
            self.failure = exc
        finally:
            self.client = None
            self._ready.set()
            if http is not None:
                await http.aclose()

    @property
    def alive(self) -> bool:
        return not self._task.done() and self.failure is None and not self._close.is_set()

    async def ready(self) -> Client:
        await self._ready.wait()
        if self.client is None:
            what = type(self.failure).__name__ if self.failure is not None else "closed"
            logger.warning("MCP gateway upstream %r could not be reached: %s", self.upstream.name, what)
            raise UpstreamUnavailable(self.upstream, f"could not connect ({what})")
        return self.client

    async def close(self) -> None:
        self._close.set()
        await asyncio.gather(self._task, return_exceptions=True)


class Upstreams:
    """The links of one event loop, opened on first use and reopened after their upstream went away."""

    def __init__(self, upstreams: dict[str, Upstream]) -> None:
        self.config = upstreams
        self.loop = asyncio.get_running_loop()
        self._links: dict[str, UpstreamLink] = {}
        self._lock = asyncio.Lock()

    async def link(self, name: str) -> UpstreamLink:
        link = self._links.get(name)
        if link is not None and link.alive:
            return link
        async with self._lock:
            link = self._links.get(name)
            if link is None or not link.alive:
                link = self._links[name] = UpstreamLink(self.config[name])
        return link

    async def call(self, name: str, request: Callable[[Client], Awaitable[T]]) -> T:
        """`request` against the upstream, bounded by its timeout; a dead link is dropped for the next call."""
        upstream = self.config[name]
        link = await self.link(name)
        client = await link.ready()
        try:
            # In this task: wait_for would start another task per call.
            async with asyncio.timeout(upstream.timeout):
                return await request(client)
        except TimeoutError:
            raise MCPError(
                UPSTREAM_TIMEOUT, f"Upstream MCP server {name!r} did not answer within {upstream.timeout:g} s"
            ) from None
        except MCPError as exc:
            if exc.code == CONNECTION_CLOSED:
                await link.close()
                raise UpstreamUnavailable(upstream, "the connection closed") from None
            raise  # the upstream's own JSON-RPC error, passed on as it sent it
        except Exception as exc:
            await link.close()
            logger.warning("MCP gateway upstream %r failed: %s", name, type(exc).__name__)
            raise MCPError(
                INTERNAL_ERROR, f"Upstream MCP server {name!r} failed ({type(exc).__name__})"
            ) from None

    async def close(self) -> None:
        for link in list(self._links.values()):
            await link.close()
