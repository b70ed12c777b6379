"""The waiting agent's WebSocket (`/ws/agent/`). The consumer authenticates, joins its agent's group and relays;
reads go through the core's selectors, and it never writes."""

import asyncio
import contextlib
import logging
import weakref
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from django.conf import settings

from elicitation.delivery import pushes, tickets, waiters
from elicitation.delivery.socket_base import (
    CLOSE_TRY_AGAIN_LATER,
    HardenedJsonConsumer,
    LayerWatch,
    jittered,
    membership_gate,
)
from elicitation.delivery.waiter_threads import database_call
from elicitation.models import OPEN_STATUSES, Agent
from elicitation.queue import selectors
from elicitation.queue.keys import agents_for_keys, scope_bearer_token

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAX_SUBSCRIBE_IDS = 500
REPLAY_BATCH = 1000
CLOSE_UNAUTHORIZED = 4401
LOOP_LAG_PROBE_SECONDS = 0.1
LOOP_LAG_LIMIT_SECONDS = 1.0  # well under a client's open timeout (websockets' default: 10 s)
# Layer subscribes waiting for a turn (socket_base.change_membership) past which handshakes are refused: a new
# agent's shard, if not joined yet, is joined there before its hello. Room for a busy layer (256 refused most of a
# storm of 2,500 when each agent had a group of its own: p99 64 s against 31 s).
MEMBERSHIP_BACKLOG_LIMIT = 2048
KEY_READ_SPACING = 0.05  # handshakes' key checks share one query at most this often (at once when quiet)
# Likewise the outbox reads of resumes and the reads of subscribes: a storm's thousands of sockets resume and
# re-subscribe within seconds.
RESUME_READ_SPACING = 0.05
SUBSCRIBE_READ_SPACING = 0.05


async def agent_from_scope(scope: dict[str, Any], gate: "HandshakeGate") -> Agent | None:
    """`Authorization: Bearer <key>` or, for clients that cannot set headers, a single-use `?ticket=`. Keys are
    read together with the other handshakes' (one query per KEY_READ_SPACING however many arrive); a ticket is
    spent on its own, through the gate's slots."""
    token = scope_bearer_token(scope)
    if token:
        return await waiters.hub().spaced(agents_for_keys, KEY_READ_SPACING).look_up(token)
    return await gate.read(tickets.agent_for_ticket, scope.get("query_string", b"").decode("latin-1"))


def subscription_replies(agent_id: int, request_ids: list[str]) -> list[dict[str, Any]]:
    """What `subscribe` answers for each id, in order: a closed request's closing event (the very message a live
    push carried), `state` for an open one, `not_found` for a missing id or another agent's (indistinguishable)."""
    asked = (agent_id, tuple(request_ids))
    return subscriptions_replies([asked])[asked]


def subscriptions_replies(
    subscribes: list[tuple[int, tuple[str, ...]]],
) -> dict[tuple[int, tuple[str, ...]], list[dict[str, Any]]]:
    """`subscription_replies` for many (agent id, ids) subscribes, read together: the subscribes of a reconnect
    storm cost two queries per SUBSCRIBE_READ_SPACING, not two per socket."""
    found = selectors.agents_requests_by_id([(agent_id, raw) for agent_id, ids in subscribes for raw in ids])
    closed = sorted({raw for (_, raw), request in found.items() if request.status not in OPEN_STATUSES})
    closing = selectors.closing_events(closed) if closed else {}
    answers: dict[tuple[int, tuple[str, ...]], list[dict[str, Any]]] = {}
    for agent_id, ids in subscribes:
        replies: list[dict[str, Any]] = []
        for raw in ids:
            request = found.get((agent_id, raw))
            if request is None:
                replies.append(
                    {"type": "error", "code": "not_found", "id": raw, "detail": "No such request."}
                )
            elif raw in closing:
                replies.append(closing[raw].payload)
            else:
                replies.append({"type": "state", "id": raw, "status": request.status})
        answers[(agent_id, ids)] = replies
    return answers


def closed_state(event: dict[str, Any]) -> dict[str, Any]:
    """A closed request's state without its cursor: an answer to a subscribe, not a second copy of the event."""
    state = {"type": "state", "id": event["id"], "status": event["status"]}
    if "result" in event:
        state["result"] = event["result"]
    return state


def events_after(cursors: list[tuple[int, int]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    """The next REPLAY_BATCH outbox events past each (agent id, cursor): the catch-ups of a storm's resumes read
    together (one query per RESUME_READ_SPACING, at once when the process is quiet)."""
    found = selectors.agent_events_after_many(cursors, limit=REPLAY_BATCH)
    return {pair: [event.payload for event in events] for pair, events in found.items()}


class HandshakeGate:
    """The handshakes of one process (event loop): at most AGENT_SOCKET_HANDSHAKE_QUEUE between accept and hello, and
    at most AGENT_SOCKET_HANDSHAKE_CONCURRENCY spending a ticket at once.

    After a process dies its thousands of agents reconnect here at once. Each is accepted first (so a client's open
    timeout cannot expire after its database work was done); its key and its head cursor are read together with
    every other handshake's (the waiter hub's spaced reads), so a storm costs a few queries, not two per agent
    queued behind each other. A handshake is instead closed at once with 4013 (try
    again later), before any work, when the queue is full, when the layer's subscribes queue up, or when the event
    loop runs more than LOOP_LAG_LIMIT_SECONDS late: the server's own handshake work (HTTP, WebSocket upgrade) then
    queues on the loop ahead of this code, and handshakes that wait there past their client's open timeout are
    dropped with nothing to show for the work. The refused clients back off (each refusal in a row doubles their
    spread window), so the arrivals fall to what the process can greet."""

    def __init__(self, slots: int, queue_bound: int) -> None:
        self.slot_count = slots
        self.slots = asyncio.Semaphore(slots)
        self.queue_bound = queue_bound
        self.queued = 0
        self.loop_lag = 0.0
        self.stopped = False
        loop = asyncio.get_running_loop()
        loop.call_later(LOOP_LAG_PROBE_SECONDS, self.probe_lag, loop, loop.time() + LOOP_LAG_PROBE_SECONDS)

    def probe_lag(self, loop: asyncio.AbstractEventLoop, due: float) -> None:
        """How late the loop ran this callback: the wait of everything queued on it, handshakes included."""
        self.loop_lag = max(0.0, loop.time() - due)
        if not self.stopped:
            loop.call_later(
                LOOP_LAG_PROBE_SECONDS, self.probe_lag, loop, loop.time() + LOOP_LAG_PROBE_SECONDS
            )

    @property
    def full(self) -> bool:
        return (
            self.queued >= self.queue_bound
            or self.loop_lag > LOOP_LAG_LIMIT_SECONDS
            or membership_gate().waiting > MEMBERSHIP_BACKLOG_LIMIT
        )

    @contextlib.contextmanager
    def handshaking(self) -> Iterator[None]:
        self.queued += 1
        try:
            yield
        finally:
            self.queued -= 1

    async def read(self, read: Callable[..., T], *args: Any) -> T:
        async with self.slots:
            return await database_call(read)(*args)


_handshake_gates: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, HandshakeGate]" = (
    weakref.WeakKeyDictionary()
)


def handshake_gate() -> HandshakeGate:
    loop = asyncio.get_running_loop()
    gate = _handshake_gates.get(loop)
    wanted = (settings.AGENT_SOCKET_HANDSHAKE_CONCURRENCY, settings.AGENT_SOCKET_HANDSHAKE_QUEUE)
    if gate is None or (gate.slot_count, gate.queue_bound) != wanted:
        if gate is not None:
            gate.stopped = True
        gate = _handshake_gates[loop] = HandshakeGate(
            settings.AGENT_SOCKET_HANDSHAKE_CONCURRENCY, settings.AGENT_SOCKET_HANDSHAKE_QUEUE
        )
    return gate


class AgentWaitConsumer(HardenedJsonConsumer):
    """One socket, many waits (`/ws/agent/`).

    - On connect: `{"type": "hello", "cursor": N}`, N being the agent's latest cursor.
    - `subscribe {ids}`: answered at once, once per id: the closing event if the request is closed (or, if this
      socket already sent that event, `state` with the result), else `state`; then the closing event when it
      happens.
    - `resume {after}`: every event above `after` in cursor order, then `{"type": "resumed", "cursor": N}`, then
      live events, gap-free: a push that arrives ahead of a missing one makes the socket read the outbox.
    - A socket never sends the same event twice, whichever path (push, replay, subscribe, recheck) found it.
    - Every AGENT_SOCKET_RECHECK_SECONDS (jittered) it re-reads the outbox for what it waits on (a push lost
      while Redis restarted) and checks the key: a revoked or rotated-away key closes the socket with 4401.
    - With the channel layer (Redis) down or hung the socket is still accepted and served from the database,
      rechecking every LONG_POLL_RECHECK_SECONDS; when the layer answers again every socket rechecks at once.
    - Frames that are binary, not JSON, too deep or hold invalid text get an error frame (socket_base.py).
    - A replay reads the outbox REPLAY_BATCH events at a time without holding the socket's lock, yields to other
      sockets between pages, and waits for room in the send buffer; pushes arriving meanwhile are read from the
      outbox after it, in cursor order.
    - A client that does not read: once more than SOCKET_SEND_BUFFER_FRAMES frames (or _BYTES bytes) wait for it,
      the socket is closed with 4008 (CLOSE_TOO_SLOW, "too slow: resume from your cursor"; a peer that cannot take
      even the close frame sees 1006). The client reconnects, `resume`s from the last cursor it received (and
      re-`subscribe`s what it waits on) and misses nothing: the frames it never got are in the outbox.
    - Handshakes are accepted at once; their keys and head cursors are read in batches with every other
      handshake's (HandshakeGate), so a reconnect storm costs a few queries and does not starve the process's
      other waiters. Past AGENT_SOCKET_HANDSHAKE_QUEUE handshakes between accept and hello, or while the layer's
      subscribes or the event loop run behind, a new one is closed at once with 4013 (CLOSE_TRY_AGAIN_LATER),
      before any work.
    """

    agent_id: int | None = None
    recheck_task: "asyncio.Task[None] | None" = None
    # The agent's group is heard through the waiter hub: one membership per agent shard per process, and no channel
    # subscribed and unsubscribed per socket, which in a reconnect storm queued behind the layer's one lock.
    own_channel = False

    def refusal(self) -> int | None:
        return CLOSE_TRY_AGAIN_LATER if handshake_gate().full else None

    async def connect(self) -> None:
        gate = handshake_gate()
        # Accepted before any waiting: the client's open timeout then cannot expire while the handshake queues, and
        # the client simply waits for its hello. A refusal is a close code, never a bare 403.
        await self.accept()
        if gate.full:
            await self.close(code=CLOSE_TRY_AGAIN_LATER)
            return
        with gate.handshaking():
            await self.greet(gate)

    async def greet(self, gate: HandshakeGate) -> None:
        agent = await agent_from_scope(self.scope, gate)
        if agent is None:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.key_prefix = agent.key_prefix
        self.watching: set[str] = set()
        self.resumed = False
        self.last_cursor = 0
        self.sent_ahead: set[int] = set()  # cursors sent out of order (subscribe), not to be sent again
        self.stream_floor = 0  # the first resume's `after`: the stream has sent (stream_floor, last_cursor]
        self.catch_up_task: asyncio.Task[None] | None = None
        self.replay_wanted = False  # the outbox may hold more than the running catch-up has read
        self.resumes_owed = 0  # `resumed` frames to send once the catch-up is done
        self.lock = asyncio.Lock()
        # With the layer away: served from the database. Joined first, so whatever commits after the head read
        # below is pushed here.
        self.heard_from_hello = await self.join_group(pushes.agent_group(agent.pk))
        # The highest cursor pushed before the resume (not sent then: the stream starts at the resume).
        self.heard_ahead = 0
        self.agent_id = agent.pk
        # A revocation committed between the key check and joining the group was pushed to no one: look again.
        # (A second read, not one with the key lookup: the group must be joined between the two.)
        head = await waiters.hub().agent_head(agent.pk, agent.key_prefix)
        if head is None:
            await self.close(code=CLOSE_UNAUTHORIZED)
            return
        self.checked_head = head  # what the recheck has seen: it reads the outbox only once this moves
        await self.send_json({"type": "hello", "cursor": head})
        self.recheck_task = asyncio.ensure_future(self.recheck_forever())

    @property
    def layer_joined(self) -> bool:
        waiter_hub = waiters.hub()
        return not waiter_hub.layer_resting() and all(waiter_hub.is_joined(g) for g in self.groups_wanted)

    async def join_group(self, group: str) -> bool:
        """Listen to `group` through the hub, or be rechecked as often as a long-poll until it is joined. True if
        joined now."""
        self.groups_wanted.add(group)
        if self.channel_layer is None:
            return False
        LayerWatch.for_layer(self.channel_layer).register(self)  # woken when the layer comes back
        waiter_hub = waiters.hub()
        await waiter_hub.listen(group, self.hear)
        return waiter_hub.is_joined(group)

    async def leave_groups(self) -> None:
        # The hub leaves a group some time after its last listener: the agent is likely back soon.
        for group in self.groups_wanted:
            waiters.hub().unlisten(group, self.hear)
        self.groups_wanted = set()

    async def disconnect(self, code: int) -> None:
        if self.recheck_task is not None:
            self.recheck_task.cancel()
        await self.leave_groups()

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        kind = content.get("type") if isinstance(content, dict) else None
        if kind == "ping":
            await self.send_json({"type": "pong"})
        elif kind == "subscribe":
            await self.subscribe(content.get("ids"))
        elif kind == "resume":
            await self.resume(content.get("after"))
        else:
            await self.send_json(
                {"type": "error", "code": "unknown_type", "detail": "type must be subscribe, resume or ping"}
            )

    async def subscribe(self, ids: Any) -> None:
        if not isinstance(ids, list) or not ids or len(ids) > MAX_SUBSCRIBE_IDS:
            await self.send_json(
                {
                    "type": "error",
                    "code": "invalid",
                    "detail": f"ids must be a list of 1 to {MAX_SUBSCRIBE_IDS} request ids",
                }
            )
            return
        assert self.agent_id is not None
        asked = (self.agent_id, tuple(str(i) for i in ids))
        replies = (
            await waiters.hub().spaced(subscriptions_replies, SUBSCRIBE_READ_SPACING).look_up(asked) or []
        )
        async with self.lock:
            for reply in replies:
                if reply["type"] == "state":
                    self.watching.add(reply["id"])
                    await self.send_json(reply)
                elif reply["type"] == "error":
                    await self.send_json(reply)
                elif not await self.send_out_of_order(reply):
                    # This socket already sent that event: answer the question without repeating the event.
                    await self.send_json(closed_state(reply))

    async def resume(self, after: Any) -> None:
        if not isinstance(after, int) or isinstance(after, bool) or after < 0:
            await self.send_json(
                {"type": "error", "code": "invalid", "detail": "after must be a non-negative cursor"}
            )
            return
        async with self.lock:
            # Never backwards on one socket: what it has sent stays sent.
            if not self.resumed:
                self.stream_floor = self.last_cursor = after
            self.last_cursor = max(self.last_cursor, after)
            self.resumed = True
            self.sent_ahead = {cursor for cursor in self.sent_ahead if cursor > self.last_cursor}
            if self.nothing_to_replay():
                await self.send_json({"type": "resumed", "cursor": self.last_cursor})
                return
            self.resumes_owed += 1  # answered by the catch-up, once it has read the outbox to its end
            await self.replay()

    def nothing_to_replay(self) -> bool:
        """The outbox holds nothing past the stream's cursor, known without reading it: the hello's head (or a
        later recheck's) is not past it, no push since said otherwise, and the agent's group has been heard since
        before that head was read. Most agents of a reconnect storm resume this way, with no read. A push lost
        meanwhile is the recheck's to find, as for any socket."""
        return (
            self.heard_from_hello
            and self.layer_joined
            and not self.catching_up
            and self.last_cursor >= max(self.checked_head, self.heard_ahead)
        )

    # --- sending; callers hold self.lock ---

    async def send_in_order(self, payload: dict[str, Any], text: str | None = None) -> None:
        """The resumed stream: each cursor once, ascending. `text`: the payload already encoded."""
        cursor = payload["cursor"]
        if cursor <= self.last_cursor:
            return
        self.last_cursor = cursor
        self.forget_if_closed(payload)
        if cursor in self.sent_ahead:
            self.sent_ahead.discard(cursor)
            return
        await self.send(text_data=text if text is not None else await self.encode_json(payload))

    async def send_out_of_order(self, payload: dict[str, Any]) -> bool:
        """Send an event found outside the stream, unless this socket sent it already. True if sent."""
        cursor = payload["cursor"]
        streamed = self.resumed and self.stream_floor < cursor <= self.last_cursor
        # At or below the resume point the client holds it already, but a subscribe asks outright: answer it.
        if streamed or cursor in self.sent_ahead:
            return False
        self.sent_ahead.add(cursor)
        self.forget_if_closed(payload)
        await self.send_json(payload)
        return True

    def forget_if_closed(self, payload: dict[str, Any]) -> None:
        if payload.get("status") not in OPEN_STATUSES:
            self.watching.discard(payload.get("id", ""))

    async def replay(self) -> None:
        """Bring the stream up to the outbox's end. Returns at once (callers may hold the lock): the catch-up runs
        on a task of its own, and a replay asked for while one runs makes it read once more before it stops."""
        if self.catch_up_task is not None and not self.catch_up_task.done():
            self.replay_wanted = True
            return
        self.catch_up_task = self.spawn(self.catch_up())

    @property
    def catching_up(self) -> bool:
        return self.catch_up_task is not None and not self.catch_up_task.done()

    async def catch_up(self) -> None:
        assert self.agent_id is not None
        delay = 0.5
        while not self.given_up:
            self.replay_wanted = False  # a push from here on makes the loop read again
            try:
                batch = (
                    await waiters.hub()
                    .spaced(events_after, RESUME_READ_SPACING)
                    .look_up((self.agent_id, self.last_cursor))
                    or []
                )
            except Exception:
                logger.warning("agent socket replay failed; trying again", exc_info=True)
                await asyncio.sleep(jittered(delay))
                delay = min(delay * 2, 10.0)
                continue
            for payload in batch:
                if payload["cursor"] <= self.last_cursor:
                    continue
                text = await self.encode_json(payload)
                await self.send_buffer.wait_for_room(len(text))
                await self.send_in_order(payload, text)  # checks the cursor again: a resume may have moved it
            if len(batch) < REPLAY_BATCH and not self.replay_wanted:
                break
            await asyncio.sleep(0)  # a long replay: the other sockets' pushes go out between its pages
        owed, self.resumes_owed = self.resumes_owed, 0
        for _ in range(owed):
            await self.send_json({"type": "resumed", "cursor": self.last_cursor})

    # --- channel-layer messages ---

    async def agent_event(self, message: dict[str, Any]) -> None:
        payload = message["event"]
        async with self.lock:
            if self.resumed:
                if self.catching_up:
                    # The running catch-up reads it from the outbox after what it is sending, in order.
                    self.replay_wanted = self.replay_wanted or payload["cursor"] > self.last_cursor
                elif payload["cursor"] > self.last_cursor + 1:
                    await self.replay()  # an earlier push is missing or late: the outbox has them in order
                else:
                    await self.send_in_order(payload)
            else:
                self.heard_ahead = max(self.heard_ahead, payload["cursor"])
                if payload.get("id") in self.watching:
                    await self.send_out_of_order(payload)

    async def agent_revoked(self, message: dict[str, Any]) -> None:
        # Key rotation sends this too: a socket opened with the new key stays open.
        assert self.agent_id is not None
        if await database_call(selectors.agent_event_head)(self.agent_id, self.key_prefix) is None:
            await self.close(code=CLOSE_UNAUTHORIZED)

    async def recheck_forever(self) -> None:
        """The safety net under pushes: a lost push or a lost revocation is caught within one interval.

        One look per interval at the agent's head cursor, which is None once the key is revoked or rotated away,
        made together with every other socket's of the process (waiters.py: one query per batch). Only when the
        head moved (an event was written since the last look) is the outbox read."""
        assert self.agent_id is not None
        follow_up = False
        while True:
            # Jittered, so sockets opened together (after a restart) do not all read at once. Without the layer,
            # or just after it came back (Redis resubscribes a moment after it accepts publishes), as often as a
            # long-poll; otherwise pushes do the work and this is only the net.
            fast = follow_up or not self.layer_joined
            interval = settings.LONG_POLL_RECHECK_SECONDS if fast else settings.AGENT_SOCKET_RECHECK_SECONDS
            woken = await self.wait_for_wake(interval)
            follow_up = woken
            if woken or not self.layer_joined:
                await self.rejoin_groups()
            try:
                head = await waiters.hub().agent_head(
                    self.agent_id, self.key_prefix
                )  # one query for the batch
                if head is None:
                    await self.close(code=CLOSE_UNAUTHORIZED)
                    return
                if head == self.checked_head:
                    continue
                async with self.lock:
                    if self.resumed:
                        if head > self.last_cursor:
                            await self.replay()
                    elif self.watching:
                        replies = await database_call(subscription_replies)(
                            self.agent_id, sorted(self.watching)
                        )
                        for reply in replies:
                            if reply["type"] not in {"state", "error"}:
                                await self.send_out_of_order(reply)
                self.checked_head = head
            except Exception:
                logger.warning("agent socket recheck failed; trying again next interval", exc_info=True)
