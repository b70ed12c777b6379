"""Every waiter of a process, waited on together: one hub per event loop, so that waiting costs the database and
the channel layer per process, not per waiting agent.

Batched rechecks (the safety net under pushes). A lost push (Redis restarting) must delay an answer, never strand
it, so waiters look at the database now and then; here they do it together:

- long-polls: every LONG_POLL_RECHECK_SECONDS (jittered) the hub reads, in ONE query per chunk of CHUNK ids, which
  awaited requests are still open (`requests_still_open`), and in one query per chunk every feed-waiting agent's
  head cursor (`agent_heads`); only the waits whose answer is now ready are woken.
- agent sockets keep their own (jittered) timers (agent_socket.py), but their head look-up joins a batch: the
  look-ups that arrive within HEAD_BATCH_SECONDS are answered by ONE query per chunk (`agent_event_heads`), which
  also says whether the socket's key was revoked or rotated away. A socket whose head moved then reads its outbox.

So the queries per interval stay flat however many agents wait (until a chunk fills): at most one long-poll round
per LONG_POLL_RECHECK_SECONDS and one head batch per HEAD_BATCH_SECONDS.

In-process fan-out. The hub owns one channel on the layer and joins each group once, however many waiters of the
process wait on it (ref-counted group_add / group_discard). Long-polls, on a request or on the feed, listen on
their agent's group: every transition that closes a request tells its agent through the outbox, and the
`agent.event` push names the agent, the request and its status. A push reaches the hub once and wakes every waiter
of its agent that it answers; a feed wait whose cursor the event passed ends without a database read. A message
that names no agent (from an older publisher) goes to every agent listener, and feed waits answer it with one
batched read. Publishing is unchanged: one group_send per event (pushes.py).

Fast answers. A push that closes the request ends a long-poll's wait at once, without a database read, and a
long-poll costs no subscribe/unsubscribe of its own on the layer, whose pub/sub connection serialises them (and
publishes) behind one lock: a join per long-poll queued there took seconds with 5,000 sockets open (bench #3).
The first waiter of an agent joins its group; the group is left GROUP_LINGER_SECONDS after the last one, in the
background, since an agent that waits once usually waits again.

A layer that is down is not an error: joins are retried with every round, and waits are then answered by the
rechecks alone.
"""

import asyncio
import contextlib
import functools
import logging
import weakref
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from channels.layers import get_channel_layer
from django.conf import settings

from elicitation.delivery import pushes
from elicitation.delivery.socket_base import change_membership, jittered, receive_forever
from elicitation.delivery.waiter_threads import database_call
from elicitation.models import OPEN_STATUSES
from elicitation.queue import selectors

logger = logging.getLogger(__name__)

Message = MutableMapping[str, Any]
Listener = Callable[[Message], None]
T = TypeVar("T")

CHUNK = 5000  # ids per recheck query
HEAD_BATCH_SECONDS = 0.5  # sockets' head look-ups arriving this close together share one query
# A group stays joined this long after its last waiter left: an agent that long-polls polls again, and each join
# and leave queues behind every other one on the pub/sub layer's connection lock.
GROUP_LINGER_SECONDS = 30.0


def chunks(items: list[T], size: int = CHUNK) -> Iterator[list[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- the database side of a round: plain functions, run on the waiter threads ----------------------------------


@dataclass
class LongPollRound:
    still_open: set[str]
    heads: dict[int, int]


def read_long_poll_round(request_ids: list[str], feed_agent_ids: list[int]) -> LongPollRound:
    """What every long-poll of the process waits on, one query per chunk of each kind."""
    still_open: set[str] = set()
    for chunk in chunks(request_ids):
        still_open |= selectors.requests_still_open(chunk)
    heads: dict[int, int] = {}
    for agents in chunks(feed_agent_ids):
        heads.update(selectors.agent_heads(agents))
    return LongPollRound(still_open, heads)


def read_socket_heads(keys: list[tuple[int, str]]) -> dict[tuple[int, str], int | None]:
    heads: dict[tuple[int, str], int | None] = {}
    for chunk in chunks(keys):
        heads.update(selectors.agent_event_heads(chunk))
    return heads


def read_feed_heads(agent_ids: list[int]) -> dict[int, int]:
    return read_long_poll_round([], agent_ids).heads


# --- what a push means ---------------------------------------------------------------------------------------


def closes_the_request(message: Message) -> bool:
    """A request-page push saying the request left the open statuses (the wait's answer is then ready)."""
    request = message.get("request") if message.get("type") == "request.update" else None
    return isinstance(request, dict) and request.get("status") not in (None, *OPEN_STATUSES)


def event_closes(message: Message, request_id: str) -> bool:
    """An `agent.event` push saying the request `request_id` left the open statuses. Every transition that closes a
    request tells its agent (outbox), so a long-poll can listen on its agent's group instead of the request's."""
    event = message.get("event") if message.get("type") == "agent.event" else None
    return (
        isinstance(event, dict)
        and event.get("id") == request_id
        and event.get("status") not in (None, *OPEN_STATUSES)
    )


def group_of(message: Message) -> str | None:
    """The group a message was sent to, when it says (group messages do not carry their group's name)."""
    request = message.get("request")
    if message.get("type") == "request.update" and isinstance(request, dict) and request.get("id"):
        return pushes.request_group(request["id"])
    if message.get("type") in ("agent.event", "agent.revoked") and isinstance(message.get("agent"), int):
        return pushes.agent_group(message["agent"])
    return None


def kind_of(group_or_type: str) -> str:
    """`request.<id>` / `request.update` → `request`; `agent.<id>` / `agent.event` → `agent`."""
    return group_or_type.split(".", 1)[0]


# --- the hub ------------------------------------------------------------------------------------------------------


@dataclass(eq=False)
class LongPollWait:
    """One long-poll: for `request_id` to close, or (request_id None) for the agent's feed to pass `cursor`."""

    agent_id: int
    request_id: str | None = None
    cursor: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)
    key_changed: bool = False  # the agent's key was revoked or rotated meanwhile: Django must answer (401)


class WaiterHub:
    """All waiters of one event loop (see the module docstring). Tasks run only while someone waits."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.channel: str | None = None
        self.opening = asyncio.Lock()
        self.listeners: dict[str, set[Listener]] = {}
        self.groups_by_kind: dict[str, set[str]] = {}
        self.joined: set[str] = set()
        self.group_locks: dict[str, asyncio.Lock] = {}
        self.request_waits: dict[str, set[LongPollWait]] = {}
        self.feed_waits: set[LongPollWait] = set()
        self.head_lookups: dict[tuple[int, str], list[asyncio.Future[int | None]]] = {}
        self.head_batch: asyncio.TimerHandle | None = None
        self.receiving: asyncio.Task[None] | None = None
        self.rounds: asyncio.Task[None] | None = None
        self.feed_check: asyncio.Task[None] | None = None
        self.feed_dirty = False
        self.background: set[asyncio.Task[Any]] = set()
        # Joined groups nobody listens to any more, each with the timer that leaves it (GROUP_LINGER_SECONDS).
        self.lingering: dict[str, asyncio.TimerHandle] = {}
        self.layer_rests_until = 0.0  # after a layer failure, waiters do not queue behind its timeouts

    # --- groups: one membership per group per process ---

    async def listen(self, group: str, listener: Listener) -> None:
        """Call `listener` with every message sent to `group` from now on (joined when this returns, if the
        layer answers)."""
        self.listeners.setdefault(group, set()).add(listener)
        self.groups_by_kind.setdefault(kind_of(group), set()).add(group)
        if group not in self.joined:
            await self.sync_group(group)

    def unlisten(self, group: str, listener: Listener) -> None:
        listening = self.listeners.get(group)
        if listening is None:
            return
        listening.discard(listener)
        if not listening:
            del self.listeners[group]
            self.groups_by_kind.get(kind_of(group), set()).discard(group)
            # Later and in the background: the answer is ready, the agent is likely to wait again soon, and the
            # pub/sub layer queues unsubscribes behind one lock per Redis connection.
            if group in self.lingering:
                self.lingering[group].cancel()
            self.lingering[group] = asyncio.get_running_loop().call_later(
                GROUP_LINGER_SECONDS, self.stop_lingering, group
            )

    def stop_lingering(self, group: str) -> None:
        self.lingering.pop(group, None)
        self.spawn(self.sync_group(group))

    async def sync_group(self, group: str) -> None:
        """Make the layer's membership of `group` match whether anyone listens; a failure is retried next round."""
        if self.layer is None:
            return
        lock = self.group_locks.setdefault(group, asyncio.Lock())
        try:
            async with lock:
                wanted = group in self.listeners
                if wanted == (group in self.joined) or self.layer_resting():
                    return  # in step, or to be retried by the next round
                channel = await self.open_channel()
                if channel is None:
                    return
                try:
                    if wanted:
                        await change_membership(functools.partial(self.layer.group_add, group, channel))
                        self.joined.add(group)
                    else:
                        self.joined.discard(group)
                        await change_membership(functools.partial(self.layer.group_discard, group, channel))
                except Exception as exc:
                    self.layer_failed()
                    logger.warning(
                        "channel layer unavailable for %s (%s); rechecks stand in", group, type(exc).__name__
                    )
        finally:
            if group not in self.listeners and not lock.locked():
                self.group_locks.pop(group, None)

    def layer_resting(self) -> bool:
        return asyncio.get_running_loop().time() < self.layer_rests_until

    def layer_failed(self) -> None:
        self.layer_rests_until = asyncio.get_running_loop().time() + settings.LONG_POLL_RECHECK_SECONDS

    async def open_channel(self) -> str | None:
        if self.channel is not None:
            return self.channel
        async with self.opening:
            if self.channel is None:
                if self.layer_resting():
                    return None
                try:
                    self.channel = str(await change_membership(self.layer.new_channel))
                except Exception as exc:
                    self.layer_failed()
                    logger.warning(
                        "channel layer unavailable (%s); waiters poll the database", type(exc).__name__
                    )
                    return None
                self.receiving = asyncio.ensure_future(self.receive_forever(self.channel))
        return self.channel

    async def receive_forever(self, channel: str) -> None:
        while True:
            message = await receive_forever(self.layer, channel)
            try:
                self.dispatch(message)
            except Exception:
                logger.exception("waiter hub could not dispatch a %s message", message.get("type"))

    def dispatch(self, message: Message) -> None:
        group = group_of(message)
        if group is not None:
            targets = [group]
        else:  # the message does not say its group: every listener of its kind hears it
            targets = list(self.groups_by_kind.get(kind_of(str(message.get("type", ""))), ()))
        for target in targets:
            for listener in list(self.listeners.get(target, ())):
                listener(message)

    # --- long-polls ---

    async def wait(
        self, wait: LongPollWait, seconds: float, first_look: Callable[[], Awaitable[bool]]
    ) -> None:
        """Return when `wait` is answered or `seconds` pass. The group is joined before `first_look()` (the
        database read that may find the answer already there), so a push in between is not missed."""
        group, listener = self.enter(wait)
        try:
            await self.listen(group, listener)
            if await first_look():
                return
            self.start_rounds()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait.done.wait(), seconds)
        finally:
            self.unlisten(group, listener)
            self.leave(wait)

    def enter(self, wait: LongPollWait) -> tuple[str, Listener]:
        """Register `wait` for the rounds; its group and what it makes of the group's pushes."""
        if wait.request_id is None:
            self.feed_waits.add(wait)

            def settle_feed(message: Message) -> None:
                event = message.get("event")
                if "agent" not in message:  # from a publisher that does not name the agent: look it up
                    self.check_feeds_soon()
                elif (
                    isinstance(event, dict)
                    and isinstance(event.get("cursor"), int)
                    and event["cursor"] > wait.cursor
                ):
                    wait.done.set()  # this agent's feed passed the cursor: the read would only confirm it

            return pushes.agent_group(wait.agent_id), settle_feed
        self.request_waits.setdefault(wait.request_id, set()).add(wait)
        request_id = wait.request_id

        def settle(message: Message) -> None:
            if message.get("type") == "agent.revoked":
                wait.key_changed = True
            elif event_closes(message, request_id):  # the read that would follow could only confirm it
                wait.done.set()

        # The agent's group, not the request's: one membership for all of an agent's waits (kept a while after,
        # see GROUP_LINGER_SECONDS) rather than a join and a leave per long-poll.
        return pushes.agent_group(wait.agent_id), settle

    def leave(self, wait: LongPollWait) -> None:
        if wait.request_id is None:
            self.feed_waits.discard(wait)
            return
        waits = self.request_waits.get(wait.request_id, set())
        waits.discard(wait)
        if not waits:
            self.request_waits.pop(wait.request_id, None)

    def start_rounds(self) -> None:
        if self.rounds is None or self.rounds.done():
            self.rounds = asyncio.ensure_future(self.run_rounds())

    async def run_rounds(self) -> None:
        while self.request_waits or self.feed_waits:
            await asyncio.sleep(jittered(settings.LONG_POLL_RECHECK_SECONDS))
            try:
                await self.long_poll_round()
            except Exception:
                logger.warning("long-poll recheck failed; trying again next round", exc_info=True)
            # The layer was away: join (or leave) now what could not be then.
            out_of_step = {g for g in self.listeners if g not in self.joined}
            out_of_step |= {g for g in self.joined if g not in self.listeners and g not in self.lingering}
            for group in out_of_step:
                self.spawn(self.sync_group(group))

    async def long_poll_round(self) -> None:
        """One look at the database for every long-poll of the process; wakes those whose answer is ready."""
        request_ids = list(self.request_waits)
        agent_ids = sorted({wait.agent_id for wait in self.feed_waits})
        if not request_ids and not agent_ids:
            return
        found = await database_call(read_long_poll_round)(request_ids, agent_ids)
        for request_id in request_ids:
            if request_id not in found.still_open:
                for wait in self.request_waits.get(request_id, ()):
                    wait.done.set()
        self.wake_feeds(found.heads)

    def wake_feeds(self, heads: dict[int, int]) -> None:
        for wait in self.feed_waits:
            if heads.get(wait.agent_id, 0) > wait.cursor:
                wait.done.set()

    def check_feeds_soon(self) -> None:
        """An agent event from a publisher that does not name its agent arrived: one read for every feed wait."""
        self.feed_dirty = True
        if self.feed_check is None or self.feed_check.done():
            self.feed_check = asyncio.ensure_future(self.check_feeds())

    async def check_feeds(self) -> None:
        while self.feed_dirty and self.feed_waits:
            self.feed_dirty = False
            agent_ids = sorted({wait.agent_id for wait in self.feed_waits})
            try:
                self.wake_feeds(await database_call(read_feed_heads)(agent_ids))
            except Exception:
                logger.warning("feed check failed; the next round looks again", exc_info=True)
                return

    # --- agent sockets: batched head look-ups ---

    async def agent_head(self, agent_id: int, key_prefix: str) -> int | None:
        """`selectors.agent_event_head`, answered with every other look-up made within HEAD_BATCH_SECONDS."""
        future: asyncio.Future[int | None] = asyncio.get_running_loop().create_future()
        self.head_lookups.setdefault((agent_id, key_prefix), []).append(future)
        if self.head_batch is None:
            self.head_batch = asyncio.get_running_loop().call_later(HEAD_BATCH_SECONDS, self.flush_heads)
        return await future

    def flush_heads(self) -> None:
        self.head_batch = None
        lookups, self.head_lookups = self.head_lookups, {}
        self.spawn(self.answer_heads(lookups))

    async def answer_heads(self, lookups: dict[tuple[int, str], list[asyncio.Future[int | None]]]) -> None:
        try:
            heads = await database_call(read_socket_heads)(list(lookups))
        except Exception as exc:
            for futures in lookups.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
            return
        for key, futures in lookups.items():
            for future in futures:
                if not future.done():
                    future.set_result(heads.get(key))

    # --- housekeeping ---

    def spawn(self, coroutine: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def close(self) -> None:
        for task in (self.receiving, self.rounds, self.feed_check, *self.background):
            if task is not None:
                task.cancel()
        if self.head_batch is not None:
            self.head_batch.cancel()
        for timer in self.lingering.values():
            timer.cancel()


_hubs: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, WaiterHub]" = weakref.WeakKeyDictionary()


def hub() -> WaiterHub:
    """This event loop's hub (a new one if the channel layer was replaced, as tests do)."""
    loop = asyncio.get_running_loop()
    layer = get_channel_layer()
    current = _hubs.get(loop)
    if current is None or current.layer is not layer:
        if current is not None:
            current.close()
        current = _hubs[loop] = WaiterHub(layer)
    return current
