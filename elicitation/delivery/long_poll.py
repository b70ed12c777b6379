"""Long-poll without pinning a thread: the wait is an asyncio wait on the channel layer, rechecking the database
every few seconds so that a lost push (Redis restarting) delays an answer but never strands it.

Under an ASGI server the wait happens in `LongPollMiddleware`, before Django sees the request: Django runs every
request in a ThreadSensitiveContext that keeps a thread of its own until the response, so a wait inside a view
would hold one (idle) thread per waiting agent. The middleware waits on the event loop, then hands Django the
request without `wait`, which Django answers at once. This is the only long-poll: tests go through it too (a live
server, or the ASGI application called directly). The waits themselves belong to the process's hub
(waiters.py): one layer membership per agent shard however many long-polls wait, and one batched recheck per
interval for all of them, on a few shared threads.
"""

import asyncio
import hashlib
import logging
import math
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlencode
from uuid import UUID

from django.conf import settings
from django.urls import Resolver404, resolve

from elicitation.delivery import waiters
from elicitation.delivery.waiter_threads import database_call
from elicitation.queue import selectors
from elicitation.queue.keys import agent_for_key, scope_bearer_token

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DB_RETRY_PAUSE_SECONDS = 0.5


async def wait_until(
    group: str,
    seconds: float,
    is_done: Callable[[], Awaitable[bool]],
    settles: Callable[[Message], bool] = lambda message: False,
) -> None:
    """Return when `is_done()` holds or `seconds` pass; look again on any push to `group`. A push for which
    `settles(message)` holds ends the wait at once: the database read that follows would only confirm it.

    The general form, one database read per look; the agent API's waits (`wait_for_request`, `wait_for_feed`) are
    rechecked together by the process's hub instead. Listening goes through the hub too: one membership of
    `group` per process. A channel layer that is down is not an error here: the wait just polls the database."""
    hub = waiters.hub()
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + seconds
    settled = asyncio.Event()
    pushed = asyncio.Event()

    def listener(message: Message) -> None:
        (settled if settles(message) else pushed).set()

    await hub.listen(group, listener)
    try:
        while not settled.is_set() and not await check_tolerating_blips(is_done):
            remaining = give_up_at - loop.time()
            if remaining <= 0:
                return
            pushed.clear()
            woken = asyncio.ensure_future(pushed.wait())
            ended = asyncio.ensure_future(settled.wait())
            try:
                await asyncio.wait(
                    {woken, ended},
                    timeout=min(remaining, settings.LONG_POLL_RECHECK_SECONDS),
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                woken.cancel()
                ended.cancel()
    finally:
        hub.unlisten(group, listener)


async def check_tolerating_blips(is_done: Callable[[], Awaitable[bool]]) -> bool:
    """`is_done()`, retried once after a short pause if the database fails. A waiter that gives up on the first
    error answers its agent early with a still-open request (the agent then polls again); a database that is
    really down still fails the second check, and Django's answer reports it (503)."""
    try:
        return await is_done()
    except Exception as exc:
        logger.warning("long-poll database check failed (%s); retrying once", type(exc).__name__)
        await asyncio.sleep(DB_RETRY_PAUSE_SECONDS)
        return await is_done()


closes_the_request = waiters.closes_the_request


async def wait_for_request(
    agent_id: int, request_id: Any, seconds: float, key_prefix: str = ""
) -> waiters.LongPollWait | None:
    """Until the agent's request closes (or is not the agent's: Django's answer then says 404). The wait, which
    says how it ended; None for an id that is no request's. Its first look is one of the hub's spaced reads."""
    try:
        canonical = str(UUID(str(request_id)))  # as events name the request
    except ValueError:
        return None  # no such request: Django's answer says 404
    hub = waiters.hub()
    wait = waiters.LongPollWait(agent_id, request_id=canonical, key_prefix=key_prefix)
    await hub.wait(wait, seconds, lambda: check_tolerating_blips(lambda: hub.first_look_at_request(wait)))
    return wait


async def wait_for_feed(agent_id: int, cursor: int, seconds: float) -> None:
    hub = waiters.hub()
    wait = waiters.LongPollWait(agent_id, cursor=cursor)
    await hub.wait(wait, seconds, lambda: check_tolerating_blips(lambda: hub.first_look_at_feed(wait)))


def parse_wait(raw: str | None) -> int:
    """Seconds to wait (capped); 0 for absent or malformed values, which the DRF view then answers with 400."""
    try:
        return selectors.long_poll_cap(int(raw or 0))
    except ValueError:
        return 0


def parse_cursor(raw: str | None) -> int | None:
    try:
        cursor = int(raw or 0)
    except ValueError:
        return None
    return cursor if cursor >= 0 else None


# --- the ASGI middleware: wait on the event loop, then let Django answer ---------------------------------------


@dataclass(frozen=True)
class Caller:
    """The agent a long-poll's key belongs to; `digest` (the key's sha256) names the key in the hub's trust."""

    digest: bytes
    agent_id: int
    key_prefix: str


async def caller_of(scope: Scope) -> Caller | None:
    """The agent whose key the request bears, read from the database unless the hub trusts the key already (an agent
    re-polling every minute costs no key read: waiters.KEY_TRUST_SECONDS)."""
    token = scope_bearer_token(scope)
    if not token or not token.startswith("rh_"):
        return None
    digest = hashlib.sha256(token.encode()).digest()
    hub = waiters.hub()
    trusted = hub.trusted_key(digest)
    if trusted is not None:
        return Caller(digest, trusted.agent_id, trusted.key_prefix)
    agent = await database_call(agent_for_key)(token)
    if agent is None:
        return None
    hub.trust_key(digest, agent.pk, agent.key_prefix)
    return Caller(digest, agent.pk, agent.key_prefix)


# (agent id, key prefix, request id) for each wait → the JSON body to answer it with, or None to let Django answer.
AnswerAfterWait = Callable[[list[tuple[int, str, str]]], list[bytes | None]]


class CountedCall(Protocol):
    """One agent call counted against its rate (api/throttling.Charge)."""

    @property
    def retry_after(self) -> int | None: ...  # over the rate: seconds until the window ends

    @property
    def left(self) -> float | None: ...  # calls the window still allows; None when it could not be counted

    @property
    def seconds_left(self) -> int: ...


CountAgentCall = Callable[[int], CountedCall]


class RateRoom:
    """How many more calls each agent may make in its rate window, as this process last counted them: while an agent
    has room, a pushed answer leaves first and is counted just after, instead of waiting for the count's round trip.
    Half of what the count left is used, so that other processes answering the same agent meanwhile still fit."""

    def __init__(self) -> None:
        self.room: dict[int, tuple[float, float]] = {}  # agent id → (calls, loop time the window ends)

    def take(self, agent_id: int) -> bool:
        calls, until = self.room.get(agent_id, (0.0, 0.0))
        if calls < 1 or asyncio.get_running_loop().time() >= until:
            self.room.pop(agent_id, None)
            return False
        self.room[agent_id] = (calls - 1, until)
        return True

    def learn(self, agent_id: int, counted: CountedCall) -> None:
        if counted.retry_after is not None or counted.left is None:
            self.room.pop(agent_id, None)
            return
        # Without a rate (AGENT_RATE unset) the room is endless and never runs out.
        until = (
            math.inf if counted.left == math.inf else asyncio.get_running_loop().time() + counted.seconds_left
        )
        self.room[agent_id] = (counted.left // 2, until)


# Waits that ran out are answered together, at most one read per this many seconds (the answer of a wait that a
# push or a recheck ended is read at once).
TIMED_OUT_ANSWER_SPACING = 0.25


class LongPollMiddleware:
    """Wraps Django's ASGI app. For `GET /api/v1/requests/<id>?wait=N` and `GET /api/v1/events?wait=N` by a
    valid agent key, waits here, then passes the request on without `wait`. Anything else passes straight on.
    The two routes are named by their URL names, so this module never imports the API's views.

    A wait on a request is answered here too, without Django, when `answer_after_wait` (see `AnswerAfterWait`) is
    given: the API layer's `long_poll_answers.request_bodies_after_wait`, wired in reviewhub/asgi.py. The response
    carries the headers Django gave the route's last answer (security headers, Allow, Content-Type), learned from
    Django itself, so the two can never differ; until Django has answered the route once, every wait goes through
    it."""

    def __init__(
        self,
        app: Any,
        request_route: str = "api-request",
        feed_route: str = "api-events",
        answer_after_wait: AnswerAfterWait | None = None,
        count_agent_call: CountAgentCall | None = None,
    ) -> None:
        self.app: ASGIApp = app
        self.routes = {request_route: "request", feed_route: "feed"}
        self.answer_after_wait = answer_after_wait
        self.count_agent_call = count_agent_call
        self.rate_room = RateRoom()
        self.counting: set[asyncio.Task[Any]] = set()  # counts of answers already sent
        self.route_headers: list[tuple[bytes, bytes]] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "GET":
            await self.app(scope, receive, send)
            return
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        params = dict(query)
        seconds = parse_wait(params.get("wait"))
        target = self.target(scope) if seconds else None
        if target is None:
            await self.app(scope, receive, send)
            return
        caller = await caller_of(scope)
        if caller is not None:
            kind, request_id = target
            if kind == "request":
                waiting = wait_for_request(caller.agent_id, request_id, seconds, caller.key_prefix)
            else:
                cursor = parse_cursor(params.get("after"))
                if cursor is None:
                    await self.app(scope, receive, send)  # Django answers the bad cursor with 400
                    return
                waiting = wait_for_feed(caller.agent_id, cursor, seconds)
            receive, disconnected, ended = await self.wait_unless_disconnected(waiting, receive)
            if disconnected:
                return  # the agent gave up: nobody to answer
            if isinstance(ended, waiters.LongPollWait) and self.may_answer(ended, scope, query):
                body = await self.body_after(ended, caller)
                hub = waiters.hub()
                if body is not None:
                    hub.trust_key(caller.digest, caller.agent_id, caller.key_prefix)  # the row confirmed it
                    await self.answer(send, body)
                    return
                hub.distrust(caller.digest)  # revoked, rotated, over its rate or gone: Django says which
            stripped = urlencode([(key, value) for key, value in query if key != "wait"])
            scope = {**scope, "query_string": stripped.encode("latin-1")}
            if target[0] == "request" and self.answer_after_wait is not None:
                send = self.learning_headers(send)
        await self.app(scope, receive, send)

    def may_answer(self, wait: waiters.LongPollWait, scope: Scope, query: list[tuple[str, str]]) -> bool:
        """Whether Django's answer would be the plain JSON read: no key change was pushed during the wait, nothing
        but `wait` is asked (DRF reads `format`), and JSON is acceptable without options (`indent`)."""
        if self.answer_after_wait is None or self.route_headers is None:
            return False
        if wait.key_changed or any(key != "wait" for key, _ in query):
            return False
        accept = dict(scope.get("headers", [])).get(b"accept", b"").decode("latin-1").lower()
        return not accept or (
            "indent" not in accept
            and any(kind in accept for kind in ("application/json", "*/*", "application/*"))
        )

    async def body_after(self, wait: waiters.LongPollWait, caller: Caller) -> bytes | None:
        """The answer's body: the one the closing push carried, for the key the wait was asked with; else read at
        once for a wait that was answered, with the other run-out waits otherwise."""
        pushed = wait.pushed_answer
        if (
            pushed is not None
            and self.count_agent_call is not None
            and pushed.get("key_prefix") == caller.key_prefix
            and isinstance(pushed.get("body"), bytes)
        ):
            return pushed["body"] if await self.counted(caller.agent_id) else None
        if wait.done.is_set():
            return (await database_call(self.read_answers)([wait]))[wait]
        return await waiters.hub().spaced(self.read_answers, TIMED_OUT_ANSWER_SPACING).look_up(wait)

    async def counted(self, agent_id: int) -> bool:
        """Count the answer against the agent's rate: after it is sent while the agent has room (RateRoom), else
        before, and True if it is within the rate (otherwise Django answers, with its 429)."""
        if self.rate_room.take(agent_id):
            counting = asyncio.ensure_future(self.count(agent_id))
            self.counting.add(counting)
            counting.add_done_callback(self.counting.discard)
            return True
        return await self.count(agent_id)

    async def count(self, agent_id: int) -> bool:
        assert self.count_agent_call is not None
        counted = await database_call(self.count_agent_call)(agent_id)
        self.rate_room.learn(agent_id, counted)
        return counted.retry_after is None

    def read_answers(self, waits: list[waiters.LongPollWait]) -> dict[waiters.LongPollWait, bytes | None]:
        assert self.answer_after_wait is not None
        asked = [(wait.agent_id, wait.key_prefix, str(wait.request_id)) for wait in waits]
        return dict(zip(waits, self.answer_after_wait(asked), strict=True))

    def learning_headers(self, send: Send) -> Send:
        """`send`, noting the headers of each 200 Django gives on the request route (never one that sets a cookie)."""

        async def noting(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 200:
                headers = [(name, value) for name, value in message.get("headers", [])]
                if not any(name.lower() == b"set-cookie" for name, _ in headers):
                    self.route_headers = [(n, v) for n, v in headers if n.lower() != b"content-length"]
            await send(message)

        return noting

    async def answer(self, send: Send, body: bytes) -> None:
        assert self.route_headers is not None
        length = (b"Content-Length", str(len(body)).encode("ascii"))
        await send({"type": "http.response.start", "status": 200, "headers": [*self.route_headers, length]})
        await send({"type": "http.response.body", "body": body})

    def target(self, scope: Scope) -> tuple[str, Any] | None:
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        try:
            match = resolve(path)
        except Resolver404:
            return None
        kind = self.routes.get(match.url_name or "")
        if kind is None:
            return None
        return kind, match.kwargs.get("request_id")

    @staticmethod
    async def wait_unless_disconnected(
        waiting: Awaitable[Any], receive: Receive
    ) -> tuple[Receive, bool, Any]:
        """Run the wait while listening for the client hanging up. Returns a `receive` that replays what was
        read meanwhile (the empty GET body), whether the client left, and what the wait returned (None if it
        failed)."""
        buffered: list[Message] = []
        wait_task = asyncio.ensure_future(waiting)
        listen_task: asyncio.Future[Message] = asyncio.ensure_future(receive())
        try:
            while not wait_task.done():
                racing: set[asyncio.Future[Any]] = {wait_task, listen_task}
                done, _ = await asyncio.wait(racing, return_when=asyncio.FIRST_COMPLETED)
                if listen_task in done:
                    message = listen_task.result()
                    if message["type"] == "http.disconnect":
                        return receive, True, None
                    buffered.append(message)  # the (empty) body: Django reads it later
                    listen_task = asyncio.ensure_future(receive())
            if wait_task.exception() is not None:
                # The database failed mid-wait; Django's answer to the plain read reports it (503).
                logger.warning("long-poll wait failed: %r", wait_task.exception())
        finally:
            wait_task.cancel()
        pending: list[asyncio.Future[Message]] = [listen_task]

        async def replay() -> Message:
            if buffered:
                return buffered.pop(0)
            if pending:
                return await pending.pop()
            return await receive()

        return replay, False, None if wait_task.exception() is not None else wait_task.result()
