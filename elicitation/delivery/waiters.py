"""Every waiter of a process, waited on together: one hub per event loop, so that waiting costs the database and
the channel layer per process, not per waiting agent.

Batched rechecks (the safety net under pushes). A lost push (Redis restarting) must delay an answer, never strand
it, so waiters look at the database now and then; here they do it together:

- long-polls: every LONG_POLL_RECHECK_SECONDS (jittered) the hub reads, in ONE query per chunk of CHUNK ids, which
  awaited requests are still open (`requests_still_open`), and in one query per chunk every feed-waiting agent's
  head cursor (`agent_heads`); only the waits whose answer is now ready are woken.
- agent sockets keep their own (jittered) timers (agent_socket.py), but their head look-ups are spaced reads
  (`SpacedReads`, HEAD_BATCH_SECONDS apart): ONE query per chunk (`agent_event_heads`), which also says whether the
  socket's key was revoked or rotated away. A socket whose head moved then reads its outbox.
- a new long-poll's first look (is the answer there already?) is a spaced read too (FIRST_LOOK_SPACING); an agent
  key that the database confirmed lately is trusted for starting a wait while its revocation would be heard
  (`trusted_key`).

So the queries per interval stay flat however many agents wait (until a chunk fills): at most one long-poll round
per LONG_POLL_RECHECK_SECONDS and one read of each spaced kind per its spacing. 10,000 long-polls re-polling every
60 s cost a handful of queries a second, not three reads each (bench #10).

In-process fan-out. The hub owns one channel on the layer and joins each layer group once, however many waiters of
the process wait on it (ref-counted group_add / group_discard). Long-polls, on a request or on the feed, and agent
sockets listen on their agent's group: every transition that closes a request tells its agent through the outbox,
and the `agent.event` push names the agent, the request and its status. Between processes agents' groups travel on
a few shared layer groups (`pushes.layer_group`: AGENT_SHARDS of them), so a process joins at most that many for
all of its agents; the hub hands each push to the listeners of the agent it names. A push reaches the hub once and
wakes every waiter of its agent that it answers; a feed wait whose cursor the event passed ends without a database
read. A message that names no agent (from an older publisher) goes to every agent listener, and feed waits answer
it with one batched read. Publishing is unchanged: one group_send per event (pushes.py).

Fast answers. A push that closes the request ends a long-poll's wait at once, without a database read, and a
long-poll costs no subscribe/unsubscribe of its own on the layer, whose pub/sub connection serialises them (and
publishes) behind one lock: a join per long-poll queued there took seconds with 5,000 sockets open (bench #3).
The first waiter of a shard's agents joins the shard; it is left GROUP_LINGER_SECONDS after the last one, in the
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
from typing import Any, Generic, TypeVar

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
K = TypeVar("K")
V = TypeVar("V")

CHUNK = 5000  # ids per recheck query
HEAD_BATCH_SECONDS = 0.5  # sockets' head look-ups: at most one query per this many seconds
# New long-polls' first looks: at most one query (of each kind) per this many seconds. A quiet process looks at
# once; a busy one makes a wait on an already closed request answer up to this much later.
FIRST_LOOK_SPACING = 0.25
# How long an agent key the database confirmed is trusted for starting a long-poll without reading it again; the
# trust also ends with a revocation push (heard while the agent's group is joined) or a refused answer. A trusted
# key only ever starts a wait: every answer is Django's, which authenticates the key again.
KEY_TRUST_SECONDS = 120.0
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
    return LongPollRound(still_open, read_feed_heads(feed_agent_ids))


def read_socket_heads(keys: list[tuple[int, str]]) -> dict[tuple[int, str], int | None]:
    heads: dict[tuple[int, str], int | None] = {}
    for chunk in chunks(keys):
        heads.update(selectors.agent_event_heads(chunk))
    return heads


def read_feed_heads(agent_ids: list[int]) -> dict[int, int]:
    heads: dict[int, int] = {}
    for chunk in chunks(agent_ids):
        heads.update(selectors.agent_heads(chunk))
    return heads


def read_first_looks(waits: list[tuple[int, str]]) -> dict[tuple[int, str], bool]:
    """For each (agent, request) a new long-poll waits on, whether it is over already: the request closed, or it is
    not the agent's (Django's answer then says 404). One query per chunk."""
    still_open: set[tuple[int, str]] = set()
    for chunk in chunks(waits):
        owners = selectors.open_request_owners([request_id for _, request_id in chunk])
        still_open |= {(agent_id, request_id) for request_id, agent_id in owners.items()}
    return {wait: wait not in still_open for wait in waits}


class SpacedReads(Generic[K, V]):
    """Look-ups answered together by one read: the first at once, then at most one read per `spacing` seconds,
    with every look-up that arrived meanwhile. A quiet process answers without delay; a busy one reads the database
    1/`spacing` times a second however many look up. `read` (keys → values, run on the waiter threads) is called
    with distinct keys; a key it leaves out is answered None."""

    def __init__(self, read: Callable[[list[K]], dict[K, V]], spacing: float) -> None:
        self.read = read
        self.spacing = spacing
        self.pending: dict[K, list[asyncio.Future[V | None]]] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.reading: asyncio.Task[None] | None = None
        self.last_read = float("-inf")

    async def look_up(self, key: K) -> V | None:
        future: asyncio.Future[V | None] = asyncio.get_running_loop().create_future()
        self.pending.setdefault(key, []).append(future)
        self.schedule()
        return await future

    def schedule(self) -> None:
        if self.timer is not None or self.reading is not None or not self.pending:
            return
        loop = asyncio.get_running_loop()
        self.timer = loop.call_at(max(loop.time(), self.last_read + self.spacing), self.flush)

    def flush(self) -> None:
        self.timer = None
        lookups, self.pending = self.pending, {}
        self.last_read = asyncio.get_running_loop().time()
        self.reading = asyncio.ensure_future(self.answer(lookups))

    async def answer(self, lookups: dict[K, list[asyncio.Future[V | None]]]) -> None:
        try:
            found = await database_call(self.read)(list(lookups))
        except Exception as exc:
            for futures in lookups.values():
                for future in futures:
                    if not future.done():
                        future.set_exception(exc)
        else:
            for key, futures in lookups.items():
                for future in futures:
                    if not future.done():
                        future.set_result(found.get(key))
        finally:
            self.reading = None
            self.schedule()

    def close(self) -> None:
        for pending in (self.timer, self.reading):
            if pending is not None:
                pending.cancel()
        for futures in self.pending.values():
            for future in futures:
                future.cancel()


# --- what a push means ---------------------------------------------------------------------------------------


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


@dataclass
class TrustedKey:
    agent_id: int
    confirmed_at: float


class WaiterHub:
    """All waiters of one event loop (see the module docstring). Tasks run only while someone waits."""

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.channel: str | None = None
        self.opening = asyncio.Lock()
        self.listeners: dict[str, set[Listener]] = {}
        self.groups_by_kind: dict[str, set[str]] = {}
        # Layer groups (pushes.layer_group): the groups listened to that each carries, and which are joined.
        self.carried: dict[str, set[str]] = {}
        self.joined: set[str] = set()
        self.group_locks: dict[str, asyncio.Lock] = {}
        self.request_waits: dict[str, set[LongPollWait]] = {}
        self.feed_waits: set[LongPollWait] = set()
        # Module functions looked up when called, so that a test may wrap them.
        self.socket_heads = SpacedReads(lambda keys: read_socket_heads(keys), HEAD_BATCH_SECONDS)
        self.request_looks = SpacedReads(lambda waits: read_first_looks(waits), FIRST_LOOK_SPACING)
        self.feed_looks = SpacedReads(lambda agent_ids: read_feed_heads(agent_ids), FIRST_LOOK_SPACING)
        self.other_reads: dict[Callable[..., Any], SpacedReads[Any, Any]] = {}
        # sha256 of an agent key → whose it is, while trusted (KEY_TRUST_SECONDS); grouped by the agent's group.
        self.trusted_keys: dict[bytes, TrustedKey] = {}
        self.trusted_by_group: dict[str, set[bytes]] = {}
        self.receiving: asyncio.Task[None] | None = None
        self.rounds: asyncio.Task[None] | None = None
        self.feed_check: asyncio.Task[None] | None = None
        self.feed_dirty = False
        self.background: set[asyncio.Task[Any]] = set()
        # Joined groups nobody listens to any more, each with the timer that leaves it (GROUP_LINGER_SECONDS).
        self.lingering: dict[str, asyncio.TimerHandle] = {}
        self.layer_rests_until = 0.0  # after a layer failure, waiters do not queue behind its timeouts

    # --- groups: one membership per group per process ---

    def is_joined(self, group: str) -> bool:
        """Whether `group`'s messages reach this process now (its layer group is joined)."""
        return pushes.layer_group(group) in self.joined

    async def listen(self, group: str, listener: Listener) -> None:
        """Call `listener` with every message sent to `group` from now on (joined when this returns, if the
        layer answers)."""
        self.listeners.setdefault(group, set()).add(listener)
        self.groups_by_kind.setdefault(kind_of(group), set()).add(group)
        carrier = pushes.layer_group(group)
        self.carried.setdefault(carrier, set()).add(group)
        if carrier not in self.joined:
            await self.sync_group(carrier)

    def unlisten(self, group: str, listener: Listener) -> None:
        listening = self.listeners.get(group)
        if listening is None:
            return
        listening.discard(listener)
        if not listening:
            del self.listeners[group]
            self.groups_by_kind.get(kind_of(group), set()).discard(group)
            carrier = pushes.layer_group(group)
            carried = self.carried.get(carrier, set())
            carried.discard(group)
            if carried:
                return
            self.carried.pop(carrier, None)
            # Later and in the background: the answer is ready, the agent is likely to wait again soon, and the
            # pub/sub layer queues unsubscribes behind one lock per Redis connection.
            if carrier in self.lingering:
                self.lingering[carrier].cancel()
            self.lingering[carrier] = asyncio.get_running_loop().call_later(
                GROUP_LINGER_SECONDS, self.stop_lingering, carrier
            )

    def stop_lingering(self, group: str) -> None:
        self.lingering.pop(group, None)
        self.spawn(self.sync_group(group))

    async def sync_group(self, group: str) -> None:
        """Make the layer's membership of the layer group `group` match whether anyone listens to a group it
        carries; a failure is retried next round."""
        if self.layer is None:
            return
        lock = self.group_locks.setdefault(group, asyncio.Lock())
        try:
            async with lock:
                wanted = group in self.carried
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
                        for carried in [g for g in self.trusted_by_group if pushes.layer_group(g) == group]:
                            self.distrust_group(carried)  # its revocations go unheard from now on
                        await change_membership(functools.partial(self.layer.group_discard, group, channel))
                except Exception as exc:
                    self.layer_failed()
                    logger.warning(
                        "channel layer unavailable for %s (%s); rechecks stand in", group, type(exc).__name__
                    )
        finally:
            if group not in self.carried and not lock.locked():
                self.group_locks.pop(group, None)

    def layer_resting(self) -> bool:
        return asyncio.get_running_loop().time() < self.layer_rests_until

    def layer_failed(self) -> None:
        self.layer_rests_until = asyncio.get_running_loop().time() + settings.LONG_POLL_RECHECK_SECONDS
        self.trusted_keys.clear()  # a revocation push may have been lost with the layer
        self.trusted_by_group.clear()

    # --- agent keys: trusted while a revocation would be heard ---

    def trusted_key(self, digest: bytes) -> TrustedKey | None:
        """Whose key this is, without a database read: the database confirmed it within KEY_TRUST_SECONDS, and the
        agent's group has been joined since, so its revocation push would have been heard (and ended the trust)."""
        trusted = self.trusted_keys.get(digest)
        if trusted is None:
            return None
        group = pushes.agent_group(trusted.agent_id)
        age = asyncio.get_running_loop().time() - trusted.confirmed_at
        if age > KEY_TRUST_SECONDS or not self.is_joined(group) or self.layer_resting():
            self.distrust(digest)
            return None
        return trusted

    def trust_key(self, digest: bytes, agent_id: int) -> None:
        """The database just confirmed this key as `agent_id`'s (the key check, or Django's answer)."""
        now = asyncio.get_running_loop().time()
        self.trusted_keys[digest] = TrustedKey(agent_id, now)
        self.trusted_by_group.setdefault(pushes.agent_group(agent_id), set()).add(digest)

    def distrust(self, digest: bytes) -> None:
        trusted = self.trusted_keys.pop(digest, None)
        if trusted is not None:
            group = pushes.agent_group(trusted.agent_id)
            self.trusted_by_group.get(group, set()).discard(digest)
            if not self.trusted_by_group.get(group):
                self.trusted_by_group.pop(group, None)

    def distrust_group(self, group: str) -> None:
        for digest in self.trusted_by_group.pop(group, set()):
            self.trusted_keys.pop(digest, None)

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
        if message.get("type") == "agent.revoked" and group is not None:
            self.distrust_group(group)
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
            looking = asyncio.ensure_future(first_look())
            woken = asyncio.ensure_future(wait.done.wait())
            try:
                # A push may answer before the (spaced) first look does.
                await asyncio.wait({looking, woken}, return_when=asyncio.FIRST_COMPLETED)
                if wait.done.is_set() or await looking:
                    return
            finally:
                woken.cancel()
                if looking.done() and not looking.cancelled():
                    looking.exception()  # retrieved: a push answered, so a failed look no longer matters
                looking.cancel()
            self.start_rounds()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wait.done.wait(), seconds)
        finally:
            self.unlisten(group, listener)
            self.leave(wait)

    async def first_look_at_request(self, wait: LongPollWait) -> bool:
        assert wait.request_id is not None
        return bool(await self.request_looks.look_up((wait.agent_id, wait.request_id)))

    async def first_look_at_feed(self, wait: LongPollWait) -> bool:
        return (await self.feed_looks.look_up(wait.agent_id) or 0) > wait.cursor

    def spaced(self, read: Callable[[list[K]], dict[K, V]], spacing: float) -> SpacedReads[K, V]:
        """This hub's spaced reads through `read` (one set per function, made on first use)."""
        if read not in self.other_reads:
            self.other_reads[read] = SpacedReads(read, spacing)
        return self.other_reads[read]

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
            if event_closes(message, request_id):  # the read that would follow could only confirm it
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
            out_of_step = {g for g in self.carried if g not in self.joined}
            out_of_step |= {g for g in self.joined if g not in self.carried and g not in self.lingering}
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
        """`selectors.agent_event_head`, read together with every other socket's (HEAD_BATCH_SECONDS apart)."""
        return await self.socket_heads.look_up((agent_id, key_prefix))

    # --- housekeeping ---

    def spawn(self, coroutine: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def close(self) -> None:
        for task in (self.receiving, self.rounds, self.feed_check, *self.background):
            if task is not None:
                task.cancel()
        spaced: list[SpacedReads[Any, Any]] = [self.socket_heads, self.request_looks, self.feed_looks]
        for reads in [*spaced, *self.other_reads.values()]:
            reads.close()
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
