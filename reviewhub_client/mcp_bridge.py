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
answer can be had — ReviewHub unreachable or refusing the request, the request expired without an outcome or
was withdrawn, or `timeout` ran out — the callback answers `cancel` ("dismissed without a choice"): it never
hangs the MCP session and never raises into it. A wait abandoned early (the timeout, or the MCP call being
cancelled) withdraws the ReviewHub request so no reviewer answers a question nobody will read.

Importable without Django; needs `mcp` only when imported.
"""

from __future__ import annotations

import contextlib
import contextvars
import inspect
import itertools
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.types.version import MODERN_PROTOCOL_VERSIONS

from reviewhub_client.errors import RequestWithdrawn, ReviewHubError, WaitTimeout

logger = logging.getLogger(__name__)


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

    async def list_requests(self, status: str) -> list[dict[str, Any]]:
        """The agent's requests in the API's JSON shape (`open`, `closed` or `all`)."""
        return [row.to_dict() for row in await self._call("list_requests", status)]


def to_mcp(result: Any) -> types.ElicitResult:
    """The client's ElicitResult as the MCP type: content only on accept (ReviewHub sends none for URL mode)."""
    if result.action == "accept":
        return types.ElicitResult(action="accept", content=result.content)
    return types.ElicitResult(action=result.action)


async def withdraw_quietly(hub: Hub, request_id: str) -> None:
    """Best effort, and never cancelled halfway: the request may have closed meanwhile, or ReviewHub be down."""
    with anyio.CancelScope(shield=True):
        try:
            await hub.cancel(request_id)
        except Exception as exc:
            logger.info("could not withdraw ReviewHub request %s: %r", request_id, exc)


async def ask_and_wait(
    hub: Hub, body: Mapping[str, Any], *, idempotency_key: str, timeout: float | None
) -> types.ElicitResult:
    """Post one request and wait for its outcome, as an `ElicitResult` (see the module's policy)."""
    try:
        request_id = await hub.create(body, idempotency_key)
    except ReviewHubError as exc:
        logger.warning("ReviewHub refused or could not take the elicitation; answering cancel: %s", exc)
        return types.ElicitResult(action="cancel")
    return await wait_for_outcome(hub, request_id, timeout)


async def wait_for_outcome(
    hub: Hub, request_id: str, timeout: float | None, *, withdraw_on_cancel: bool = True
) -> types.ElicitResult:
    """Wait for a posted request. Cancel (and withdraw) when no human answer can be had. A cancelled wait
    withdraws too, unless the caller keeps the request for a later resume (`withdraw_on_cancel=False`)."""
    try:
        return to_mcp(await hub.wait(request_id, timeout))
    except anyio.get_cancelled_exc_class():
        if withdraw_on_cancel:
            await withdraw_quietly(hub, request_id)
        raise
    except RequestWithdrawn:
        return types.ElicitResult(action="cancel")
    except WaitTimeout:
        logger.info("no answer to ReviewHub request %s within %s s; answering cancel", request_id, timeout)
    except ReviewHubError as exc:
        logger.warning("lost ReviewHub request %s; answering cancel: %s", request_id, exc)
    await withdraw_quietly(hub, request_id)
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
    ) -> None:
        self.hub = Hub.of(client)
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
            return await ask_and_wait(
                self.hub, body, idempotency_key=f"mcp-elicit:{uuid.uuid4()}", timeout=self.timeout
            )
        except anyio.get_cancelled_exc_class():
            raise
        except Exception:
            # A bug here must not become an error inside the MCP session: as if the human never answered.
            logger.exception("ReviewHub elicitation bridge failed; answering cancel")
            return types.ElicitResult(action="cancel")

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
        call = self.current_call()
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
