"""ReviewHub agent client: ask a human (create an elicitation), wait for the answer, read the event feed.

Waiting uses one WebSocket per client, shared by every concurrent wait. It resumes from its last cursor after any
reconnect and re-subscribes to what it waits for, so an answer given while it was disconnected still arrives. While
the socket is down, each wait long-polls the REST API instead. Creates are retried with the same Idempotency-Key
after a connection error or a 429/502/503/504, so a retry never queues a second request.

Needs httpx and websockets; never Django.
"""

import asyncio
import contextlib
import json
import logging
import math
import os
import random
import threading
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus, WebSocketException

from reviewhub_client.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    RequestWithdrawn,
    ReviewHubError,
    ValidationError,
    WaitTimeout,
)
from reviewhub_client.models import OPEN_STATUSES, AgentEvent, ElicitationRequest, ElicitResult, EventPage

logger = logging.getLogger("reviewhub_client")

T = TypeVar("T")
DEFAULT_URL = "http://127.0.0.1:8000"
RETRY_STATUSES = frozenset({429, 502, 503, 504})
CLOSE_UNAUTHORIZED = 4401
# The server closed a socket that could not keep up with its frames: reconnect and resume from the cursor.
CLOSE_RESUME = 4008
# The server is busy with a reconnect storm and refused the handshake before any work: spread, then return. Its
# code is 4013, RFC 6455's 1013 in the application range (daphne cannot send 1013); other servers may send 1013.
CLOSE_TRY_AGAIN_LATER = 4013
TRY_AGAIN_LATER_CODES = frozenset({CLOSE_TRY_AGAIN_LATER, 1013})
Payload = dict[str, Any]


def backoff_delay(attempt: int, base: float = 0.25, cap: float = 5.0) -> float:
    """Exponential backoff with jitter: attempt 0 waits about `base`, doubling up to `cap`."""
    ceiling = min(cap, base * 2**attempt)
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not cryptography


def spread_delay(window: float) -> float:
    """Full jitter over `window`: the first reconnect after a server drops its sockets. Every client that process
    held saw the drop at the same instant; spread uniformly, they come back at a steady rate, not all at once."""
    return random.uniform(0, window)  # noqa: S311 - jitter, not cryptography


def error_for(response: httpx.Response) -> ReviewHubError:
    """The exception for an error response's `{code, detail, fields}` body."""
    try:
        body = response.json()
    except ValueError:
        body = {}
    if not isinstance(body, dict):
        body = {}
    detail = str(body.get("detail") or response.reason_phrase or "error")
    kwargs: dict[str, Any] = {
        "status": response.status_code,
        "code": body.get("code"),
        "fields": body.get("fields"),
        "body": body,
    }
    status = response.status_code
    if status in (401, 403):
        return AuthenticationError(detail, **kwargs)
    if status in (404, 410):
        return NotFoundError(detail, **kwargs)
    if status == 409:
        return ConflictError(detail, **kwargs)
    if status in (400, 413, 422):
        return ValidationError(detail, **kwargs)
    return ReviewHubError(detail, **kwargs)


class AsyncReviewHubClient:
    """The agent API, asynchronously. Use as `async with AsyncReviewHubClient(...) as hub:`.

    `base_url` defaults to $REVIEWHUB_URL (else http://127.0.0.1:8000), `api_key` to $REVIEWHUB_AGENT_KEY.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        max_retries: int = 5,
        use_websocket: bool = True,
        long_poll_seconds: int = 25,
    ) -> None:
        self.base_url = (base_url or os.environ.get("REVIEWHUB_URL") or DEFAULT_URL).rstrip("/")
        key = api_key or os.environ.get("REVIEWHUB_AGENT_KEY") or ""
        if not key:
            raise AuthenticationError("No agent key: pass api_key or set REVIEWHUB_AGENT_KEY.")
        self.api_key = key
        self.timeout = timeout
        self.max_retries = max_retries
        self.long_poll_seconds = long_poll_seconds
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={"Authorization": f"Bearer {key}", "User-Agent": "reviewhub-client/1"},
            timeout=timeout,
        )
        self._socket = AgentSocket(self) if use_websocket else None

    async def __aenter__(self) -> "AsyncReviewHubClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._socket is not None:
            await self._socket.aclose()
        await self._http.aclose()

    # --- REST ----------------------------------------------------------------------------------------------

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json_body: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        retry: bool = True,
    ) -> Any:
        """One API call; retried (same request, same headers) after connection errors and 429/502/503/504."""
        attempts = self.max_retries + 1 if retry else 1
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = await self._http.request(
                    method,
                    path,
                    json=json_body,
                    params=params,
                    headers=headers,
                    timeout=timeout if timeout is not None else self.timeout,
                )
            except httpx.TransportError as exc:
                if last:
                    raise ReviewHubError(f"Cannot reach ReviewHub at {self.base_url}: {exc!r}") from exc
                await asyncio.sleep(backoff_delay(attempt))
                continue
            if response.status_code in RETRY_STATUSES and not last:
                retry_after = response.headers.get("Retry-After", "")
                delay = float(retry_after) if retry_after.isdigit() else backoff_delay(attempt)
                await asyncio.sleep(min(delay, 30.0))
                continue
            if response.is_success:
                return response.json() if response.content else None
            raise error_for(response)
        raise AssertionError("unreachable")

    async def create(
        self,
        message: str,
        requested_schema: dict[str, Any] | None = None,
        *,
        queue: str = "default",
        mode: str | None = None,
        url: str | None = None,
        elicitation_id: str | None = None,
        priority: int | None = None,
        expires_in: int | None = None,
        context: dict[str, Any] | None = None,
        callback_url: str | None = None,
        idempotency_key: str | None = None,
    ) -> ElicitationRequest:
        """Queue an MCP elicitation for a human. Form mode takes `requested_schema`; URL mode takes `url`."""
        body: dict[str, Any] = {
            "message": message,
            "queue": queue,
            "mode": mode or ("url" if url else "form"),
        }
        optional = {
            "requestedSchema": requested_schema,
            "url": url,
            "elicitationId": elicitation_id,
            "priority": priority,
            "expiresIn": expires_in,
            "context": context,
            "callbackUrl": callback_url,
        }
        body.update({name: value for name, value in optional.items() if value is not None})
        # One key per create call, reused by every retry of it: the server returns the first request.
        key = idempotency_key or uuid.uuid4().hex
        data = await self._send("POST", "/api/v1/requests", json_body=body, headers={"Idempotency-Key": key})
        return ElicitationRequest.from_json(data)

    async def get(self, request_id: str, *, wait: int = 0) -> ElicitationRequest:
        """The request's status and, once closed, its result. `wait` long-polls up to that many seconds."""
        params = {"wait": wait} if wait else None
        data = await self._send(
            "GET", f"/api/v1/requests/{request_id}", params=params, timeout=wait + self.timeout
        )
        return ElicitationRequest.from_json(data)

    async def cancel(self, request_id: str) -> ElicitationRequest:
        """Withdraw an open request (the agent's turn ended). ConflictError if it was already answered."""
        try:
            data = await self._send("POST", f"/api/v1/requests/{request_id}/cancel")
        except ConflictError as exc:
            if exc.body and exc.body.get("status") == "withdrawn":
                return await self.get(request_id)  # our own earlier attempt got through before a retry
            raise
        return ElicitationRequest.from_json(data)

    async def complete_url(self, elicitation_id: str | None = None, *, request_id: str | None = None) -> None:
        """Report that an out-of-band URL flow finished (what MCP's `notifications/elicitation/complete` says):
        the reviewer's page learns it at once. Name the flow by its MCP `elicitationId` or by the request id."""
        if bool(elicitation_id) == bool(request_id):
            raise ValueError("give exactly one of elicitation_id and request_id")
        body = {"elicitationId": elicitation_id} if elicitation_id else {"requestId": request_id}
        await self._send("POST", "/api/v1/requests/url-complete", json_body=body)

    async def events(self, after: int = 0, *, wait: int = 0) -> EventPage:
        """The durable feed: events with a cursor above `after`, oldest first (long-polls with `wait`)."""
        params: dict[str, Any] = {"after": after}
        if wait:
            params["wait"] = wait
        data = await self._send("GET", "/api/v1/events", params=params, timeout=wait + self.timeout)
        return EventPage(
            events=[AgentEvent.from_json(event) for event in data["events"]], cursor=int(data["cursor"])
        )

    async def list_requests(self, status: str = "open") -> list[ElicitationRequest]:
        """The agent's requests, newest first: `open` (default), `closed` or `all`."""
        data = await self._send("GET", "/api/v1/requests", params={"status": status})
        return [ElicitationRequest.from_json(row) for row in data]

    # --- waiting -------------------------------------------------------------------------------------------

    async def wait(self, request_id: str, timeout: float | None = None) -> ElicitResult:
        """The human's answer, as an MCP ElicitResult (an expired request gives its queue's outcome).

        Raises WaitTimeout after `timeout` seconds (None: wait indefinitely), RequestWithdrawn if the request was
        withdrawn, NotFoundError for an unknown id."""
        request_id = str(request_id)
        loop = asyncio.get_running_loop()
        deadline = math.inf if timeout is None else loop.time() + timeout
        socket = self._socket if self._socket is not None and not self._socket.unusable else None
        answer: asyncio.Future[Payload] = socket.watch(request_id) if socket else loop.create_future()
        try:
            while not answer.done():
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise WaitTimeout(f"No answer to {request_id} within {timeout} s.", request_id=request_id)
                bound = None if math.isinf(remaining) else remaining
                if socket is not None and socket.connected:
                    watching: set[asyncio.Future[Any]] = {answer, socket.state_changed()}
                    await asyncio.wait(watching, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
                    continue
                coming_back = socket.back_within() if socket is not None else 0.0
                if socket is not None and coming_back > 0:
                    # Dropped by the server and reconnecting at its spread moment: the resume brings whatever
                    # is answered meanwhile. Long-polling now would bring the whole herd back at once anyway.
                    pausing: set[asyncio.Future[Any]] = {answer, socket.state_changed()}
                    await asyncio.wait(
                        pausing, timeout=min(remaining, coming_back), return_when=asyncio.FIRST_COMPLETED
                    )
                    continue
                # No socket right now: long-poll, while the socket (if any) tries to come back.
                poll = asyncio.ensure_future(
                    self._poll_closed(request_id, min(remaining, self.long_poll_seconds))
                )
                racing: set[asyncio.Future[Any]] = {answer, poll}
                if socket is not None and not socket.unusable:
                    racing.add(socket.state_changed())
                await asyncio.wait(racing, timeout=bound, return_when=asyncio.FIRST_COMPLETED)
                if poll.done():
                    closed = poll.result()  # raises NotFoundError / AuthenticationError
                    if closed is not None and not answer.done():
                        answer.set_result(closed)
                else:
                    poll.cancel()
            return result_of(request_id, answer.result())
        finally:
            if socket is not None:
                socket.unwatch(request_id, answer)

    async def _poll_closed(self, request_id: str, seconds: float) -> Payload | None:
        """One long-poll round: the closed request's result, or None (still open, or the server unreachable)."""
        wait = max(1, int(seconds))
        try:
            data = await self._send(
                "GET",
                f"/api/v1/requests/{request_id}",
                params={"wait": wait},
                timeout=wait + self.timeout,
                retry=False,
            )
        except ReviewHubError as exc:
            if exc.status is not None and exc.status not in RETRY_STATUSES:
                raise
            await asyncio.sleep(min(1.0, seconds))  # down or restarting: the caller's loop tries again
            return None
        if data["status"] in OPEN_STATUSES:
            return None
        return {"id": request_id, "status": data["status"], "result": data.get("result")}

    async def elicit(
        self,
        message: str,
        requested_schema: dict[str, Any] | None = None,
        *,
        timeout: float | None = None,
        cancel_on_timeout: bool = True,
        **options: Any,
    ) -> ElicitResult:
        """Create and wait. On timeout the request is withdrawn (unless `cancel_on_timeout=False`) and
        WaitTimeout raised; an answer that lands while withdrawing wins and is returned."""
        request = await self.create(message, requested_schema, **options)
        try:
            return await self.wait(request.id, timeout)
        except WaitTimeout:
            if not cancel_on_timeout:
                raise
            try:
                await self.cancel(request.id)
            except ConflictError:
                late = await self.get(request.id)
                if late.result is not None:
                    return late.result
            raise


def result_of(request_id: str, payload: Payload) -> ElicitResult:
    if payload.get("status") == "withdrawn" or not payload.get("result"):
        raise RequestWithdrawn(
            f"Request {request_id} was withdrawn before it was answered.", code="withdrawn"
        )
    return ElicitResult.from_json(payload["result"])


# A refused socket upgrade is retried after at most this long (5xx, 429, network errors), or this long for other
# statuses (a server without the route, say): long-polls carry the waits meanwhile.
SOCKET_RETRY_CAP_SECONDS = 5.0
SOCKET_RETRY_SLOW_CAP_SECONDS = 60.0
# After the server drops an established socket (a restart, a crash, 1001/1006/1011/1012, or CLOSE_RESUME), or
# refuses a handshake with CLOSE_TRY_AGAIN_LATER, the first reconnect waits a uniform random time in [0, this):
# 5,000 agents of a dead process return over 5 s.
RECONNECT_SPREAD_SECONDS = 5.0


def spread_window(spread: float, refusals: int) -> float:
    """The window a reconnect is spread over after `refusals` busy refusals in a row: doubled by each, up to
    SOCKET_RETRY_SLOW_CAP_SECONDS, so the retries of a storm thin out instead of keeping the server busy."""
    doubling: int = 2 ** min(max(refusals - 1, 0), 16)
    return min(spread * doubling, max(spread, SOCKET_RETRY_SLOW_CAP_SECONDS))


class AgentSocket:
    """One WebSocket (`/ws/agent/`) shared by every wait of a client.

    On each (re)connect it resumes the feed from its last cursor and subscribes to every id still awaited, so
    completions made while it was away arrive (once each: the server never repeats an event on one socket).
    The cursor only advances over a gap-free run of cursors, never past an event it has not seen.
    """

    def __init__(self, client: AsyncReviewHubClient) -> None:
        self.client = client
        self.watchers: dict[str, set[asyncio.Future[Payload]]] = {}
        self.cursor: int | None = None
        self.ahead: set[int] = set()
        self.connected = False
        self.unusable = False  # kept for callers that read it; the socket is never given up
        self._ws: ClientConnection | None = None
        self._task: asyncio.Task[None] | None = None
        self._changed: asyncio.Future[None] | None = None
        self._wake: asyncio.Event | None = None
        self._closing = False
        self._sends: set[asyncio.Future[None]] = set()
        self.spread_seconds = RECONNECT_SPREAD_SECONDS
        # Loop time by which a reconnect after a server drop should have said hello; None otherwise.
        self._back_by: float | None = None
        self.last_close_code: int | None = None

    def back_within(self) -> float:
        """Seconds until the spread reconnect after a server drop is due to be connected (0: not reconnecting so)."""
        if self._back_by is None:
            return 0.0
        return max(0.0, self._back_by - asyncio.get_running_loop().time())

    @property
    def url(self) -> str:
        scheme, rest = self.client.base_url.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}/ws/agent/"

    def watch(self, request_id: str) -> "asyncio.Future[Payload]":
        future: asyncio.Future[Payload] = asyncio.get_running_loop().create_future()
        self.watchers.setdefault(request_id, set()).add(future)
        if self._wake is None:
            self._wake = asyncio.Event()
        self._wake.set()
        if self._task is None or self._task.done():
            self._task = asyncio.ensure_future(self._run())
        elif self.connected:
            sending = asyncio.ensure_future(self._send({"type": "subscribe", "ids": [request_id]}))
            self._sends.add(sending)  # keep a reference until it is sent
            sending.add_done_callback(self._sends.discard)
        return future

    def unwatch(self, request_id: str, future: "asyncio.Future[Payload]") -> None:
        waiting = self.watchers.get(request_id)
        if waiting is not None:
            waiting.discard(future)
            if not waiting:
                del self.watchers[request_id]

    def state_changed(self) -> "asyncio.Future[None]":
        """Resolves when the socket next connects or drops."""
        if self._changed is None or self._changed.done():
            self._changed = asyncio.get_running_loop().create_future()
        return self._changed

    def _set_connected(self, connected: bool) -> None:
        self.connected = connected
        if self._changed is not None and not self._changed.done():
            self._changed.set_result(None)

    async def aclose(self) -> None:
        self._closing = True
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.close()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _send(self, message: Payload) -> None:
        if self._ws is not None:
            with contextlib.suppress(ConnectionClosed):
                await self._ws.send(json.dumps(message))

    async def _run(self) -> None:
        failures = 0
        refusals = 0  # busy refusals (4013 or 1013) in a row: the server is still busy with a storm, so come back later each time
        slow_retry = False
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while not self._closing:
            if not self.watchers:
                self._wake.clear()
                await self._wake.wait()  # idle and disconnected: reconnect only when someone waits
                continue
            dropped = False
            try:
                async with connect(
                    self.url,
                    additional_headers={"Authorization": f"Bearer {self.client.api_key}"},
                    open_timeout=self.client.timeout,
                    proxy=None,
                ) as ws:
                    self._ws = ws
                    self._back_by = None
                    await self._session(ws)
                    failures = 0
                    self.last_close_code = ws.close_code
                    dropped = self.connected and ws.close_code != CLOSE_UNAUTHORIZED
            except InvalidStatus as exc:
                # Any other refused upgrade (a 5xx, a proxy's 502/503, a 404 while a deployment rolls) is
                # temporary for all the client knows: waits long-poll meanwhile and the socket is retried with
                # backoff for the client's whole life, never given up.
                status = exc.response.status_code
                # A bad key is accepted and then closed with 4401. A 403 refusal is the ASGI server giving up on a
                # handshake the app did not accept in time (daphne, in a reconnect storm): retried, not an error.
                if status == 401:
                    self._fail_all(AuthenticationError("The agent key was refused.", status=status))
                else:
                    logger.info(
                        "agent socket upgrade refused (HTTP %s); long-polling, retrying later", status
                    )
                    if status < 500 and status != 429:
                        slow_retry = True
            except ConnectionClosed as exc:
                # Any other close (1001, 1006, 1011, 1012, CLOSE_RESUME "too slow") of a greeted socket is a drop:
                # reconnect and resume from the cursor, never an error for the waits.
                self.last_close_code = exc.rcvd.code if exc.rcvd is not None else None
                dropped = self.connected or self.last_close_code in TRY_AGAIN_LATER_CODES
                if exc.rcvd is not None and exc.rcvd.code == CLOSE_UNAUTHORIZED:
                    self._fail_all(AuthenticationError("The agent key was refused, revoked or rotated."))
                    dropped = False
            except (OSError, TimeoutError, WebSocketException) as exc:
                logger.info("agent socket unavailable (%r); retrying", exc)
            finally:
                self._ws = None
                self._set_connected(False)
            if self._closing:
                break
            if dropped:
                # The server dropped a live socket, and with it every other socket it held: spread the first
                # reconnect over the whole window (full jitter); later failures back off exponentially. Each
                # refusal in a row doubles the window, so a storm's retries thin out instead of keeping it busy.
                failures = 0
                refusals = refusals + 1 if self.last_close_code in TRY_AGAIN_LATER_CODES else 0
                delay = spread_delay(spread_window(self.spread_seconds, refusals))
                self._back_by = loop.time() + delay + self.client.timeout
            else:
                failures += 1
                self._back_by = None
                cap = SOCKET_RETRY_SLOW_CAP_SECONDS if slow_retry else SOCKET_RETRY_CAP_SECONDS
                delay = backoff_delay(min(failures, 8), base=0.2, cap=cap)
            slow_retry = False
            await asyncio.sleep(delay)

    async def _session(self, ws: ClientConnection) -> None:
        hello = json.loads(await ws.recv())
        if self.cursor is None:
            # First connection: the feed starts now; earlier completions come from the subscription.
            self.cursor = int(hello.get("cursor", 0))
        self._set_connected(True)  # from here watch() subscribes new ids by itself
        await ws.send(json.dumps({"type": "resume", "after": self.cursor}))
        if self.watchers:
            await ws.send(json.dumps({"type": "subscribe", "ids": sorted(self.watchers)}))
        async for raw in ws:
            self._handle(json.loads(raw))
        if ws.close_code == CLOSE_UNAUTHORIZED:
            self._fail_all(AuthenticationError("The agent key was revoked or rotated."))

    def _handle(self, message: Payload) -> None:
        kind = message.get("type")
        if kind == "resumed":
            self._advance_to(int(message["cursor"]))
        elif kind == "error":
            if message.get("code") == "not_found" and "id" in message:
                self._fail(
                    str(message["id"]), NotFoundError("No such request.", status=404, code="not_found")
                )
        elif kind == "state":
            if message.get("status") not in OPEN_STATUSES:  # a subscribe answered with a closed request
                self._resolve(message)
        elif "cursor" in message and "id" in message:
            self._record(int(message["cursor"]))
            if message.get("status") not in OPEN_STATUSES:
                self._resolve(message)

    def _resolve(self, message: Payload) -> None:
        for future in self.watchers.get(str(message["id"]), set()):
            if not future.done():
                future.set_result(message)

    def _record(self, cursor: int) -> None:
        """Advance over gap-free cursors only; a cursor further on waits in `ahead` until the gap fills."""
        if self.cursor is None or cursor <= self.cursor:
            return
        self.ahead.add(cursor)
        self._absorb_ahead()

    def _advance_to(self, cursor: int) -> None:
        # `resumed`: the server has sent every event up to here.
        if self.cursor is None or cursor > self.cursor:
            self.cursor = cursor
        self.ahead = {c for c in self.ahead if c > self.cursor}
        self._absorb_ahead()

    def _absorb_ahead(self) -> None:
        assert self.cursor is not None
        while self.cursor + 1 in self.ahead:
            self.cursor += 1
            self.ahead.discard(self.cursor)

    def _fail(self, request_id: str, error: Exception) -> None:
        for future in self.watchers.get(request_id, set()):
            if not future.done():
                future.set_exception(error)

    def _fail_all(self, error: Exception) -> None:
        for request_id in list(self.watchers):
            self._fail(request_id, error)


class ReviewHubClient:
    """The same API, blocking: `with ReviewHubClient() as hub: result = hub.elicit("Deploy?", schema)`.

    Runs an AsyncReviewHubClient on a private event loop in a background thread, so it works in any program,
    including one that runs its own event loop elsewhere."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="reviewhub-client", daemon=True)
        self._thread.start()

        async def build() -> AsyncReviewHubClient:
            return AsyncReviewHubClient(base_url, api_key, **options)

        try:
            self._client = self._run(build())
        except BaseException:
            self._stop_loop()
            raise

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __enter__(self) -> "ReviewHubClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.aclose())
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()

    @property
    def base_url(self) -> str:
        return self._client.base_url

    def create(
        self, message: str, requested_schema: dict[str, Any] | None = None, **options: Any
    ) -> ElicitationRequest:
        return self._run(self._client.create(message, requested_schema, **options))

    def get(self, request_id: str, *, wait: int = 0) -> ElicitationRequest:
        return self._run(self._client.get(request_id, wait=wait))

    def cancel(self, request_id: str) -> ElicitationRequest:
        return self._run(self._client.cancel(request_id))

    def complete_url(self, elicitation_id: str | None = None, *, request_id: str | None = None) -> None:
        self._run(self._client.complete_url(elicitation_id, request_id=request_id))

    def events(self, after: int = 0, *, wait: int = 0) -> EventPage:
        return self._run(self._client.events(after, wait=wait))

    def list_requests(self, status: str = "open") -> list[ElicitationRequest]:
        return self._run(self._client.list_requests(status))

    def wait(self, request_id: str, timeout: float | None = None) -> ElicitResult:
        return self._run(self._client.wait(request_id, timeout))

    def elicit(
        self, message: str, requested_schema: dict[str, Any] | None = None, **options: Any
    ) -> ElicitResult:
        return self._run(self._client.elicit(message, requested_schema, **options))
