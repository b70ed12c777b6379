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
import json
import logging
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode
from uuid import UUID

from django.conf import settings
from django.urls import Resolver404, resolve

from elicitation.delivery import waiters
from elicitation.delivery.waiter_threads import database_call
from elicitation.queue import selectors
from elicitation.queue.keys import agent_for_key, is_agent_key, scope_bearer_token

logger = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

DB_RETRY_PAUSE_SECONDS = 0.5

# Django answers at most as many ended waits at once per process as the database pool has connections (this many
# without a pool). Each answer holds a thread and a connection; waits that end together (the timeouts of agents that
# all reconnected after a restart) each took a thread, more than the pool had, and the herd waited out the pool's
# timeout (503). The rest queue on the event loop, holding neither (BENCHMARKS.md, #10 failures). Half the pool
# was tried: on a saturated core it queued answers behind the bound (findings log, 2026-11-27 night).
ANSWERS_AT_ONCE_WITHOUT_POOL = 20


def answers_at_once() -> int:
    return getattr(settings, "DB_POOL_MAX_SIZE", 0) or ANSWERS_AT_ONCE_WITHOUT_POOL


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


async def wait_for_request(agent_id: int, request_id: Any, seconds: float) -> None:
    """Until the agent's request closes (or is not the agent's: Django's answer then says 404); at once for an id
    that is no request's. Its first look is one of the hub's spaced reads."""
    try:
        canonical = str(UUID(str(request_id)))  # as events name the request
    except ValueError:
        return  # no such request: Django's answer says 404
    hub = waiters.hub()
    wait = waiters.LongPollWait(agent_id, request_id=canonical)
    await hub.wait(wait, seconds, lambda: check_tolerating_blips(lambda: hub.first_look_at_request(wait)))


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


async def caller_of(scope: Scope) -> Caller | None:
    """The agent whose key the request bears, read from the database unless the hub trusts the key already (an agent
    re-polling every minute costs no key read: waiters.KEY_TRUST_SECONDS)."""
    token = scope_bearer_token(scope)
    if not token or not is_agent_key(token):
        return None
    digest = hashlib.sha256(token.encode()).digest()
    hub = waiters.hub()
    trusted = hub.trusted_key(digest)
    if trusted is not None:
        return Caller(digest, trusted.agent_id)
    agent = await database_call(agent_for_key)(token)
    if agent is None:
        return None
    hub.trust_key(digest, agent.pk)
    return Caller(digest, agent.pk)


def trusting_as_django_answers(send: Send, caller: Caller) -> Send:
    """`send`, keeping the hub's trust in the caller's key in step with Django's answer: a 200 confirmed the key just
    now; anything else (a key revoked or rotated during the wait, a rate exceeded, a request gone) ends the trust,
    so the agent's next long-poll reads its key again."""

    async def noting(message: Message) -> None:
        if message["type"] == "http.response.start":
            hub = waiters.hub()
            if message["status"] == 200:
                hub.trust_key(caller.digest, caller.agent_id)
            else:
                hub.distrust(caller.digest)
        await send(message)

    return noting


STOPPING_BODY = json.dumps(
    {"code": "unavailable", "detail": "This server is restarting; poll again."}
).encode()


async def answer_stopping(send: Send) -> None:
    headers = [(b"content-type", b"application/json"), (b"retry-after", b"1")]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": STOPPING_BODY})


class LongPollMiddleware:
    """Wraps Django's ASGI app. For `GET /api/v1/requests/<id>?wait=N` and `GET /api/v1/events?wait=N` by a
    valid agent key, waits here, then passes the request on without `wait`: Django authenticates it again, counts
    it against the agent's rate and answers it as any GET, a pool's worth of ended waits at a time
    (`answers_at_once`). Anything else passes straight on. The two routes are named by their URL names, so this
    module never imports the API's views."""

    def __init__(self, app: Any, request_route: str = "api-request", feed_route: str = "api-events") -> None:
        self.app: ASGIApp = app
        self.routes = {request_route: "request", feed_route: "feed"}
        # One per event loop: a semaphore belongs to the loop it first waited on (tests run several loops).
        self.answer_turns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            weakref.WeakKeyDictionary()
        )

    def answer_turn(self) -> asyncio.Semaphore:
        loop = asyncio.get_running_loop()
        turns = self.answer_turns.get(loop)
        if turns is None:
            turns = self.answer_turns[loop] = asyncio.Semaphore(answers_at_once())
        return turns

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
                waiting = wait_for_request(caller.agent_id, request_id, seconds)
            else:
                cursor = parse_cursor(params.get("after"))
                if cursor is None:
                    await self.app(scope, receive, send)  # Django answers the bad cursor with 400
                    return
                waiting = wait_for_feed(caller.agent_id, cursor, seconds)
            try:
                receive, disconnected = await self.wait_unless_disconnected(waiting, receive)
            except asyncio.CancelledError:
                # The server is stopping and its graceful-stop bound cut the wait: the agent is told to poll again
                # (clients retry a 503 after Retry-After, reaching another process) instead of the server's 500.
                await answer_stopping(send)
                return
            if disconnected:
                return  # the agent gave up: nobody to answer
            stripped = urlencode([(key, value) for key, value in query if key != "wait"])
            scope = {**scope, "query_string": stripped.encode("latin-1")}
            async with self.answer_turn():
                await self.app(scope, receive, trusting_as_django_answers(send, caller))
            return
        await self.app(scope, receive, send)

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
    async def wait_unless_disconnected(waiting: Awaitable[None], receive: Receive) -> tuple[Receive, bool]:
        """Run the wait while listening for the client hanging up. Returns a `receive` that replays what was
        read meanwhile (the empty GET body), and whether the client left."""
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
                        return receive, True
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

        return replay, False
