"""Route an MCP client's elicitations to ReviewHub reviewers.

`ReviewHubElicitation` is an `elicitation_callback` for the official SDK (`mcp`, the `reviewhub[mcp]` extra):

    from mcp import Client
    from reviewhub_client import AsyncReviewHubClient
    from reviewhub_client.mcp_bridge import ReviewHubElicitation

    async with AsyncReviewHubClient("https://reviewhub.example", key) as reviewhub:
        bridge = ReviewHubElicitation(reviewhub, queue="deploys", server_name="deploy-bot")
        async with Client(server, elicitation_callback=bridge) as client:
            result = await bridge.call_tool(client, "deploy", {"version": "1.4"})

One callback serves every protocol version: a 2025-06-18/2025-11-25 server's mid-call `elicitation/create`,
and the input requests of a 2026-07-28 `InputRequiredResult` that `Client.call_tool` resolves for you.

- Form mode: a form request is posted to the queue with `context.mcp` = the MCP server's name, the tool and its
  arguments (when the call went through `bridge.call_tool`/`bridge.tool_call`), the JSON-RPC request id (2025) or
  the input key (2026); the reviewer's answer comes back as the `ElicitResult` (content only on accept).
- URL mode: a URL request is posted (keeping `elicitationId` when there is one); accept/decline/cancel come back
  without content.

The wait goes through `reviewhub_client`, which survives reconnects, so a human may take hours. When no human
answer can be had — ReviewHub unreachable or refusing the request, the wait lost, `timeout` run out, or a bug in
the bridge — the callback answers with a JSON-RPC error whose message says what failed (`-32001` for the timeout,
`-32603` otherwise): `cancel` is what a *person* says when dismissing a request, and a server must be able to tell
the two apart. `on_failure="cancel"` keeps the old behaviour (every failure answered `cancel`). A request the
agent withdrew answers `cancel`; an expired one answers the queue's expiry outcome. A wait abandoned early (the
timeout, or the MCP call being cancelled) withdraws the ReviewHub request so no reviewer answers a question
nobody will read.

`bridge.connect(server)` opens an `mcp.Client` with the bridge as its elicitation callback, a real `client_info`
(`reviewhub-bridge` and this package's version) and a message handler that forwards the server's
`notifications/elicitation/complete` (URL mode) to ReviewHub (`complete_url`), so the reviewer's page learns at
once that the out-of-band flow finished. Calls made with `bridge.call_tool` carry their tool name and arguments to
the reviewer; over streamable HTTP (`bridge.http_client()`), each `elicitation/create` is matched to its
`tools/call` by JSON-RPC request id on the wire, so concurrent calls on one session keep their own.

Importable without Django; needs `mcp` only when imported.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import json
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Literal

import anyio
import httpx2
import mcp.types as types
from mcp import Client
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from reviewhub_client.errors import RequestWithdrawn, ReviewHubError, WaitTimeout

logger = logging.getLogger(__name__)

try:
    VERSION = version("reviewhub")
except PackageNotFoundError:  # run from a checkout
    VERSION = "0.1.0"


@dataclass(frozen=True)
class ToolCall:
    """The tool call an elicitation belongs to, as far as the client knows it."""

    name: str
    arguments: Mapping[str, Any] | None


_current_call: contextvars.ContextVar[ToolCall | None] = contextvars.ContextVar(
    "reviewhub_tool_call", default=None
)


# --- the few ReviewHub calls the MCP integrations make ------------------------------------------------------------


class Hub:
    """The `reviewhub_client` calls the MCP integrations make, for an async or a sync client alike."""

    def __init__(self, client: Any) -> None:
        self.client = client

    @classmethod
    def of(cls, client: Any) -> Hub:
        return client if isinstance(client, Hub) else cls(client)

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        method: Callable[..., Any] = getattr(self.client, name)
        if inspect.iscoroutinefunction(method):
            return await method(*args, **kwargs)
        # The sync client blocks its caller: keep it off the MCP session's event loop, and let a cancelled
        # wait go (the withdrawal that follows ends the blocked call on ReviewHub's side).
        return await anyio.to_thread.run_sync(lambda: method(*args, **kwargs), abandon_on_cancel=True)

    async def create(self, body: Mapping[str, Any], idempotency_key: str) -> str:
        """Queue a request (`POST /api/v1/requests` fields); returns its id."""
        request = await self._call(
            "create",
            body["message"],
            body.get("requestedSchema"),
            queue=body["queue"],
            mode=body.get("mode"),
            url=body.get("url"),
            elicitation_id=body.get("elicitationId"),
            priority=body.get("priority"),
            expires_in=body.get("expiresIn"),
            context=body.get("context"),
            idempotency_key=idempotency_key,
        )
        return str(request.id)

    async def wait(self, request_id: str, timeout: float | None) -> Any:
        """The reviewer's `ElicitResult` (the client's); raises the client's WaitTimeout / RequestWithdrawn."""
        return await self._call("wait", request_id, timeout)

    async def cancel(self, request_id: str) -> None:
        await self._call("cancel", request_id)

    async def complete_url(self, elicitation_id: str) -> None:
        await self._call("complete_url", elicitation_id)

    async def list_requests(self, status: str) -> list[dict[str, Any]]:
        """The agent's requests in the API's JSON shape (`open`, `closed` or `all`)."""
        return [row.to_dict() for row in await self._call("list_requests", status)]


def to_mcp(result: Any) -> types.ElicitResult:
    """The client's ElicitResult as the MCP type: content only on accept (ReviewHub sends none for URL mode), and
    `_meta` as ReviewHub gave it, so the MCP server sees the decision's digest and the signed receipt."""
    meta = getattr(result, "meta", None)
    if result.action == "accept":
        return types.ElicitResult(action="accept", content=result.content, _meta=meta)
    return types.ElicitResult(action=result.action, _meta=meta)


async def withdraw_quietly(hub: Hub, request_id: str) -> None:
    """Best effort, and never cancelled halfway: the request may have closed meanwhile, or ReviewHub be down."""
    with anyio.CancelScope(shield=True):
        try:
            await hub.cancel(request_id)
        except Exception as exc:
            logger.info("could not withdraw ReviewHub request %s: %r", request_id, exc)


class BridgeFailure(Exception):
    """No human answer can be had; `error` is what the MCP server is told (see the module's policy)."""

    def __init__(self, error: types.ErrorData) -> None:
        super().__init__(error.message)
        self.error = error


async def ask(
    hub: Hub, body: Mapping[str, Any], *, idempotency_key: str, timeout: float | None
) -> types.ElicitResult:
    """Post one request and wait for the human's outcome; raises BridgeFailure when there will be none."""
    try:
        request_id = await hub.create(body, idempotency_key)
    except ReviewHubError as exc:
        raise BridgeFailure(
            types.ErrorData(
                code=types.INTERNAL_ERROR, message=f"ReviewHub could not take the question: {exc}"
            )
        ) from exc
    return await wait_for_answer(hub, request_id, timeout)


async def wait_for_answer(
    hub: Hub, request_id: str, timeout: float | None, *, withdraw_on_cancel: bool = True
) -> types.ElicitResult:
    """Wait for a posted request; raises BridgeFailure (after withdrawing it) when no human answer can be had.
    A cancelled wait withdraws too, unless the caller keeps the request for a later resume
    (`withdraw_on_cancel=False`)."""
    try:
        return to_mcp(await hub.wait(request_id, timeout))
    except anyio.get_cancelled_exc_class():
        if withdraw_on_cancel:
            await withdraw_quietly(hub, request_id)
        raise
    except RequestWithdrawn:
        return types.ElicitResult(action="cancel")
    except WaitTimeout:
        error = types.ErrorData(
            code=types.REQUEST_TIMEOUT,
            message=f"No ReviewHub reviewer answered within {timeout} s; the request was withdrawn.",
        )
    except ReviewHubError as exc:
        error = types.ErrorData(code=types.INTERNAL_ERROR, message=f"ReviewHub lost the request: {exc}")
    await withdraw_quietly(hub, request_id)
    raise BridgeFailure(error)


async def wait_for_outcome(
    hub: Hub, request_id: str, timeout: float | None, *, withdraw_on_cancel: bool = True
) -> types.ElicitResult:
    """`wait_for_answer`, with every failure answered `cancel` (input-required rounds keep that policy)."""
    try:
        return await wait_for_answer(hub, request_id, timeout, withdraw_on_cancel=withdraw_on_cancel)
    except BridgeFailure as failure:
        logger.warning("ReviewHub request %s: %s; answering cancel", request_id, failure)
        return types.ElicitResult(action="cancel")


def request_body(
    params: types.ElicitRequestParams,
    *,
    queue: str,
    context: Mapping[str, Any],
    priority: int,
    expires_in: int | None,
) -> dict[str, Any]:
    """The `POST /api/v1/requests` fields for one MCP elicitation."""
    body: dict[str, Any] = {"queue": queue, "message": params.message, "context": dict(context)}
    if isinstance(params, types.ElicitRequestURLParams):
        body["mode"] = "url"
        body["url"] = params.url
        if params.elicitation_id:
            body["elicitationId"] = params.elicitation_id
    else:
        body["mode"] = "form"
        body["requestedSchema"] = params.requested_schema
    if priority:
        body["priority"] = priority
    if expires_in is not None:
        body["expiresIn"] = expires_in
    return body


# --- which tools/call an elicitation belongs to, read off the wire ------------------------------------------------


class RequestLinks:
    """What the streamable HTTP wire says: each `tools/call` (id → name, arguments) and each server request that
    arrived on a call's response stream (its id → the call's id). Entries go when their call's stream ends."""

    def __init__(self) -> None:
        self.calls: dict[Any, ToolCall] = {}
        self.related: dict[Any, Any] = {}

    def call_for(self, server_request_id: Any) -> ToolCall | None:
        call_id = self.related.get(server_request_id)
        return self.calls.get(call_id) if call_id is not None else None

    def sent(self, body: bytes) -> Any:
        """Note a POSTed `tools/call`; returns its id (None for anything else)."""
        try:
            message = json.loads(body)
        except ValueError:
            return None
        if isinstance(message, dict) and message.get("method") == "tools/call" and "id" in message:
            params = message.get("params") or {}
            self.calls[message["id"]] = ToolCall(str(params.get("name")), dict(params.get("arguments") or {}))
            return message["id"]
        return None

    def received(self, call_id: Any, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        try:
            message = json.loads(line[5:])
        except ValueError:
            return
        if isinstance(message, dict) and "method" in message and "id" in message:
            self.related[message["id"]] = call_id

    def done(self, call_id: Any) -> None:
        self.calls.pop(call_id, None)
        for key in [key for key, value in self.related.items() if value == call_id]:
            del self.related[key]


class _LinkingStream(httpx2.AsyncByteStream):
    """A response stream passed through unchanged while its SSE `data:` lines are read for server requests."""

    def __init__(self, inner: Any, links: RequestLinks, call_id: Any) -> None:
        self.inner = inner
        self.links = links
        self.call_id = call_id

    async def __aiter__(self) -> AsyncIterator[bytes]:
        pending = b""
        async for chunk in self.inner:
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self.links.received(self.call_id, line.rstrip(b"\r"))
            yield chunk

    async def aclose(self) -> None:
        self.links.done(self.call_id)
        await self.inner.aclose()


class LinkingTransport(httpx2.AsyncBaseTransport):
    def __init__(self, inner: httpx2.AsyncBaseTransport, links: RequestLinks) -> None:
        self.inner = inner
        self.links = links

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        call_id = self.links.sent(request.content) if request.method == "POST" else None
        response = await self.inner.handle_async_request(request)
        if call_id is None:
            return response
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=_LinkingStream(response.stream, self.links, call_id),
            request=request,
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


# --- the elicitation callback ---------------------------------------------------------------------------------------


class ReviewHubElicitation:
    """An `elicitation_callback` (SDK `ElicitationFnT`) that asks a ReviewHub queue.

    Args:
        client: a `reviewhub_client` client (`AsyncReviewHubClient`, or the sync `ReviewHubClient`).
        queue: the ReviewHub queue the questions go to.
        server_name: the MCP server's name shown to reviewers; defaults to the name the server announced.
        timeout: seconds to wait for a human before answering `cancel` and withdrawing; None waits until the
            request closes (its deadline ends it with the queue's expiry outcome).
        priority, expires_in, context: passed through to every request (`context` is merged under `mcp`).
        on_failure: "error" (default) answers a failure with a JSON-RPC error; "cancel" answers it `cancel`, as
            bridges before 0.2 did.
    """

    def __init__(
        self,
        client: Any,
        *,
        queue: str,
        server_name: str | None = None,
        timeout: float | None = None,
        priority: int = 0,
        expires_in: int | None = None,
        context: Mapping[str, Any] | None = None,
        on_failure: Literal["error", "cancel"] = "error",
    ) -> None:
        if on_failure not in ("error", "cancel"):
            raise ValueError("on_failure is 'error' or 'cancel'")
        self.hub = Hub.of(client)
        self.on_failure = on_failure
        self.wire = RequestLinks()
        self.queue = queue
        self.server_name = server_name
        self.timeout = timeout
        self.priority = priority
        self.expires_in = expires_in
        self.context = dict(context or {})
        self._in_flight: dict[int, ToolCall] = {}
        self._ids = itertools.count()

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult | types.ErrorData:
        body = request_body(
            params,
            queue=self.queue,
            context={**self.context, "mcp": self.mcp_context(context)},
            priority=self.priority,
            expires_in=self.expires_in,
        )
        try:
            return await ask(
                self.hub, body, idempotency_key=f"mcp-elicit:{uuid.uuid4()}", timeout=self.timeout
            )
        except anyio.get_cancelled_exc_class():
            raise
        except BridgeFailure as failure:
            logger.warning("ReviewHub elicitation failed: %s", failure)
            return self.failed(failure.error)
        except Exception as exc:
            # A bug here must not tear down the MCP session: the server hears an error it can report.
            logger.exception("ReviewHub elicitation bridge failed")
            return self.failed(
                types.ErrorData(code=types.INTERNAL_ERROR, message=f"The ReviewHub bridge failed: {exc!r}")
            )

    def failed(self, error: types.ErrorData) -> types.ElicitResult | types.ErrorData:
        return types.ElicitResult(action="cancel") if self.on_failure == "cancel" else error

    @property
    def client_info(self) -> types.Implementation:
        return types.Implementation(
            name="reviewhub-bridge", title="ReviewHub elicitation bridge", version=VERSION
        )

    def connect(self, server: Any, **kwargs: Any) -> Client:
        """An `mcp.Client` for `server` with this bridge as its elicitation callback and message handler."""
        kwargs.setdefault("client_info", self.client_info)
        return Client(server, elicitation_callback=self, message_handler=self.message_handler, **kwargs)

    async def message_handler(self, message: Any) -> None:
        """Forward `notifications/elicitation/complete` (URL mode) to ReviewHub; everything else is ignored."""
        if isinstance(message, types.ElicitCompleteNotification):
            try:
                await self.hub.complete_url(message.params.elicitation_id)
            except Exception as exc:  # a notification: nobody to report to but the log
                logger.warning("could not forward elicitation/complete to ReviewHub: %r", exc)

    def http_client(self, **kwargs: Any) -> httpx2.AsyncClient:
        """An `httpx2.AsyncClient` for `streamable_http_client(url, http_client=...)` that matches every
        `elicitation/create` to the `tools/call` whose response stream carried it, by JSON-RPC id."""
        inner = kwargs.pop("transport", None) or httpx2.AsyncHTTPTransport()
        return httpx2.AsyncClient(transport=LinkingTransport(inner, self.wire), **kwargs)

    def mcp_context(self, context: ClientRequestContext) -> dict[str, Any]:
        session: ClientSession = context.session
        version = session.protocol_version
        info = session.server_info
        mcp: dict[str, Any] = {
            "server": self.server_name or (info.name if info is not None else None),
            "protocolVersion": version,
        }
        if version in MODERN_PROTOCOL_VERSIONS:
            # 2026-07-28: the question arrived inside an InputRequiredResult, under this key.
            mcp["inputKey"] = str(context.request_id)
        else:
            mcp["requestId"] = context.request_id
        call = self.wire.call_for(context.request_id) or self.current_call()
        if call is not None:
            mcp["tool"] = call.name
            mcp["arguments"] = dict(call.arguments or {})
        return mcp

    def current_call(self) -> ToolCall | None:
        """The tool call this elicitation belongs to: the caller's own (2026 rounds run in the calling task), else
        the only call in flight (2025 requests arrive on the session's reader task); unknown when ambiguous."""
        call = _current_call.get()
        if call is not None:
            return call
        calls = list(self._in_flight.values())
        return calls[0] if len(calls) == 1 else None

    @contextlib.contextmanager
    def tool_call(self, name: str, arguments: Mapping[str, Any] | None = None) -> Iterator[None]:
        """Tell the bridge which tool call the elicitations inside this block belong to."""
        call = ToolCall(name, dict(arguments or {}))
        key = next(self._ids)
        token = _current_call.set(call)
        self._in_flight[key] = call
        try:
            yield
        finally:
            del self._in_flight[key]
            _current_call.reset(token)

    async def call_tool(
        self, client: Any, name: str, arguments: dict[str, Any] | None = None, **kwargs: Any
    ) -> types.CallToolResult:
        """`client.call_tool(...)` (an `mcp.Client`) with the tool named in every request it causes."""
        with self.tool_call(name, arguments):
            result: types.CallToolResult = await client.call_tool(name, arguments, **kwargs)
            return result
