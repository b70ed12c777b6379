"""What every ReviewHub WebSocket shares: untrusted frames answered with an error frame (never a traceback or a
closed socket), and a channel layer that may be down or hung without costing the upgrade.

Frames. A binary frame, text that is not JSON, a frame nested deeper than MAX_JSON_DEPTH or holding a lone UTF-16
surrogate each get `{"type": "error", "code": …, "detail": …}` (codes `binary_frame`, `invalid_json`, `too_deep`,
`invalid_text` with `field`), and the socket keeps working.

Channel layer. Channels opens the consumer's channel on Redis before `connect()`; with Redis down that raised and
the upgrade failed with HTTP 500. Here every layer call has a timeout and a failure is survived: the socket is
accepted and served from the database (the consumer rechecks as often as a long-poll does) until the layer is
back. One `LayerWatch` per process probes the layer while sockets are open; when it answers again after failing,
every open socket rejoins its groups and rechecks at once, since pushes sent while it was away are lost.

Sending. A client that stops reading must not grow the server's memory without bound. Every frame a consumer sends
goes into its `SendBuffer` (at most SOCKET_SEND_BUFFER_FRAMES frames and SOCKET_SEND_BUFFER_BYTES bytes of JSON
text; one frame always fits, however large) and one writer task hands them to the server in order. What is bounded
where:
- uvicorn's `send` awaits while its transport is above its high-water mark (64 KiB), so a peer that does not read
  stops the writer and the buffer fills: beyond the bound the socket is given up on (below). Under a server whose
  `send` returns at once (daphne, `runserver`'s) only this buffer is bounded; that server's own buffering is its own.
- A socket given up on has its buffered frames dropped and is closed with CLOSE_TOO_SLOW (4008, "too slow: resume
  from your cursor"); a peer that does not take even the close frame within CLOSE_GRACE_SECONDS is dropped (its
  client sees 1006). Either way the client reconnects and resumes from the last cursor it received: every frame it
  never got is still in the outbox. Frames from a long read of our own (a resume's replay) wait for room in the
  buffer (`wait_for_room`, half of it: the other half is for pushes) instead of overflowing it.
"""

import asyncio
import collections
import contextlib
import functools
import logging
import random
import uuid
import weakref
from collections.abc import Awaitable, Callable, Coroutine, MutableMapping
from typing import Any, TypeVar

from channels.consumer import get_handler_name
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings

from elicitation.queue import untrusted_json

logger = logging.getLogger(__name__)
T = TypeVar("T")

FRAME_ERROR_CODES = {"surrogate": "invalid_text", "too_deep": "too_deep", "malformed": "invalid_json"}
PROBE_GROUP = "reviewhub.layer-probe"
CLOSE_TOO_SLOW = 4008
# RFC 6455's 1012 (service restart) and 1013 (try again later) as their twins in the application range, the API's
# codes since autobahn (daphne, `runserver`'s server) turns any code but 1000 and 3000-4999 into 1011; clients
# treat 1012 and 1013 alike.
CLOSE_SERVICE_RESTART = 4012
CLOSE_TRY_AGAIN_LATER = 4013
CLOSE_GRACE_SECONDS = 2.0


def jittered(seconds: float, spread: float = 0.2) -> float:
    """`seconds` ± spread: timers of sockets opened together (after a restart) do not fire together."""
    return float(seconds) * random.uniform(1 - spread, 1 + spread)  # noqa: S311 (not cryptographic)


def layer_timeout() -> float:
    return float(settings.REDIS_OPERATION_TIMEOUT_SECONDS)


def layer_is_local(layer: BaseChannelLayer | None) -> bool:
    """The embedded in-memory layer cannot go away, so nothing watches it (a subclass might, and is watched)."""
    return layer is None or type(layer) is InMemoryChannelLayer


MEMBERSHIP_CONCURRENCY = 8


class MembershipGate:
    """The layer subscribes/unsubscribes of one process: MEMBERSHIP_CONCURRENCY in flight, and a count of those
    waiting for a turn (the queue a reconnect storm's group joins form; agent handshakes are refused past a bound)."""

    def __init__(self) -> None:
        self.turns = asyncio.Semaphore(MEMBERSHIP_CONCURRENCY)
        self.waiting = 0


_membership_gates: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, MembershipGate]" = (
    weakref.WeakKeyDictionary()
)


def membership_gate() -> MembershipGate:
    loop = asyncio.get_running_loop()
    gate = _membership_gates.get(loop)
    if gate is None:
        gate = _membership_gates[loop] = MembershipGate()
    return gate


async def change_membership(call: Callable[[], Awaitable[T]]) -> T:
    """A subscribe or unsubscribe on the layer (new channel, group join or leave), at most MEMBERSHIP_CONCURRENCY at
    a time per process, each with its own timeout.

    The pub/sub layer serialises them, and publishes, behind one lock per Redis connection, so a timeout around a
    call queued there measured everyone else's calls. With 20,000 waiters opening, the ~30,000 queued joins timed
    out, the sockets took the layer for down and all rejoined, and the queue never drained (bench #10). Queued here
    instead, a call waits without a clock and the timeout covers its own round trip."""
    gate = membership_gate()
    gate.waiting += 1
    try:
        await gate.turns.acquire()
    finally:
        gate.waiting -= 1
    try:
        return await asyncio.wait_for(call(), layer_timeout())
    finally:
        gate.turns.release()


async def open_channel(layer: Any) -> str:
    """The consumer's channel name; with the layer unreachable, a name of our own that `receive_forever` keeps
    trying to listen on (the socket's group messages reach it once the layer is back). A layer already known to be
    away is not asked: thousands of sockets reconnecting would queue behind each other's timeouts."""
    if LayerWatch.for_layer(layer).known_down:
        return f"specific.unjoined!{uuid.uuid4().hex}"
    try:
        return str(await change_membership(layer.new_channel))
    except Exception as exc:
        logger.warning("channel layer unavailable when a socket opened (%s)", type(exc).__name__)
        LayerWatch.for_layer(layer).failed()
        return f"specific.unjoined!{uuid.uuid4().hex}"


async def receive_forever(layer: Any, channel: str) -> Any:
    """The layer's next message for `channel`, waiting out outages with jittered backoff instead of raising."""
    delay = 0.5
    while True:
        try:
            return await layer.receive(channel)
        except Exception as exc:
            logger.info("channel layer receive failed (%s); retrying", type(exc).__name__)
            LayerWatch.for_layer(layer).failed()
            await asyncio.sleep(jittered(delay))
            delay = min(delay * 2, 10.0)


class LayerWatch:
    """One per channel layer per event loop: probes the layer every CHANNEL_LAYER_PROBE_SECONDS while sockets are
    open, and calls `layer_recovered()` on each of them when it answers again after a failure."""

    _watches: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[int, LayerWatch]]" = (
        weakref.WeakKeyDictionary()
    )

    def __init__(self, layer: Any) -> None:
        self.layer = layer
        self.sockets: weakref.WeakSet[HardenedJsonConsumer] = weakref.WeakSet()
        self.healthy = True
        self.task: asyncio.Task[None] | None = None

    @classmethod
    def for_layer(cls, layer: Any) -> "LayerWatch":
        per_loop = cls._watches.setdefault(asyncio.get_running_loop(), {})
        watch = per_loop.get(id(layer))
        if watch is None or watch.layer is not layer:
            watch = per_loop[id(layer)] = cls(layer)
        return watch

    def failed(self) -> None:
        self.healthy = False

    @property
    def known_down(self) -> bool:
        """Failed, and not yet seen back by the probe (which only watches a layer that can go away)."""
        return not self.healthy and not layer_is_local(self.layer)

    def register(self, socket: "HardenedJsonConsumer") -> None:
        if layer_is_local(self.layer):
            return
        self.sockets.add(socket)
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self.run())

    def unregister(self, socket: "HardenedJsonConsumer") -> None:
        self.sockets.discard(socket)

    async def probe(self) -> bool:
        try:
            await asyncio.wait_for(
                self.layer.group_send(PROBE_GROUP, {"type": "layer.probe"}), layer_timeout()
            )
        except Exception:
            return False
        return True

    async def run(self) -> None:
        while self.sockets:
            await asyncio.sleep(jittered(settings.CHANNEL_LAYER_PROBE_SECONDS))
            if await self.probe():
                if not self.healthy:
                    self.healthy = True
                    logger.info("channel layer is back; %d sockets recheck now", len(self.sockets))
                    for socket in list(self.sockets):
                        socket.layer_recovered()
            elif self.healthy:
                self.healthy = False
                logger.warning("channel layer is not answering; sockets are served from the database")


class SendBuffer:
    """A socket's frames not yet handed to the server: at most `max_frames` frames and `max_bytes` bytes of frame
    text (one frame always fits, so one larger than the bound is not refused outright). Accept and close messages
    are not counted: there are at most two. `put` never waits; a frame beyond the bound overflows the buffer for
    good (its frames are dropped; the socket is to be given up on)."""

    def __init__(self, max_frames: int, max_bytes: int) -> None:
        self.max_frames = max_frames
        self.max_bytes = max_bytes
        self.frames: collections.deque[tuple[dict[str, Any], int]] = collections.deque()
        self.frame_count = 0  # `websocket.send` messages in `frames`
        self.bytes = 0
        self.overflowed = False
        self.changed = asyncio.Event()  # set whenever a frame leaves: room may have appeared

    def __len__(self) -> int:
        return self.frame_count

    def put(self, message: dict[str, Any]) -> bool:
        """Queue `message`; False if it did not fit (the buffer has overflowed) or the buffer already had."""
        if self.overflowed:
            return False
        size = frame_size(message)
        if message.get("type") == "websocket.send":
            fits = not self.frame_count or (
                self.frame_count < self.max_frames and self.bytes + size <= self.max_bytes
            )
            if not fits:
                self.discard()
                return False
            self.frame_count += 1
            self.bytes += size
        self.frames.append((message, size))
        return True

    def discard(self) -> None:
        """Drop every queued frame and accept no more (the client will read them from the outbox on resume)."""
        self.overflowed = True
        self.frames.clear()
        self.frame_count = self.bytes = 0
        self.changed.set()

    def take(self) -> dict[str, Any] | None:
        if not self.frames:
            return None
        message, size = self.frames.popleft()
        if message.get("type") == "websocket.send":
            self.frame_count -= 1
            self.bytes -= size
        self.changed.set()
        return message

    def has_room_for(self, size: int) -> bool:
        """Room for a frame we can hold back: only while the buffer stays half empty, so pushes still fit."""
        return not self.frame_count or (
            self.frame_count + 1 <= self.max_frames // 2 and self.bytes + size <= self.max_bytes // 2
        )

    async def wait_for_room(self, size: int) -> None:
        while not self.overflowed and not self.has_room_for(size):
            self.changed.clear()
            await self.changed.wait()


def frame_size(message: dict[str, Any]) -> int:
    # Frames are JSON from json.dumps (ASCII), so characters are bytes.
    return len(message.get("text") or message.get("bytes") or b"")


class HardenedJsonConsumer(AsyncJsonWebsocketConsumer):  # type: ignore[misc]
    """AsyncJsonWebsocketConsumer with untrusted-frame handling and a channel layer allowed to fail."""

    groups_wanted: set[str]
    groups_joined: set[str]
    # False: the socket opens no channel of its own; what it listens to reaches it through `hear()` (agent sockets:
    # the process's waiter hub, which joins each group once for all of its listeners).
    own_channel = True

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # AsyncConsumer.__call__, except that opening and reading the layer's channel never raise, frames go out
        # through the bounded send buffer, and a socket given up on (too slow) ends without waiting for its peer.
        self.scope = scope
        self.groups_wanted = set()
        self.groups_joined = set()
        self.wake = asyncio.Event()
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.server_send = send
        self.send_buffer = SendBuffer(settings.SOCKET_SEND_BUFFER_FRAMES, settings.SOCKET_SEND_BUFFER_BYTES)
        self.base_send = self.buffer_frame
        self.writer: asyncio.Task[None] | None = None
        self.background: set[asyncio.Task[Any]] = set()
        self.given_up = False  # too slow: closed with CLOSE_TOO_SLOW
        self.peer_gone = False  # the server refused a send: the disconnect is on its way through `receive`
        refusal = self.refusal()
        if refusal is not None:
            await self.refuse_unopened(receive, refusal)
            return
        sources = [receive]
        if not self.own_channel:
            self.heard: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
            sources.append(self.heard.get)
        elif self.channel_layer is not None:
            self.channel_name = await open_channel(self.channel_layer)
            self.channel_receive = functools.partial(receive_forever, self.channel_layer, self.channel_name)
            sources.append(self.channel_receive)
        self.dispatching = asyncio.ensure_future(await_many_dispatch(sources, self.dispatch))
        try:
            await self.dispatching
        except StopConsumer:
            pass
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not self.given_up or (current is not None and current.cancelling()):
                raise
            await self.disconnect(CLOSE_TOO_SLOW)
        finally:
            for task in [self.writer, *self.background]:
                if task is not None and task is not asyncio.current_task():
                    task.cancel()
            if self.channel_layer is not None:
                LayerWatch.for_layer(self.channel_layer).unregister(self)

    async def dispatch(self, message: MutableMapping[str, Any]) -> None:
        """AsyncConsumer.dispatch without its `aclose_old_connections()` before every handler: that is a hop to the
        process's one thread-sensitive thread for every frame, push and handshake of every socket, and in a
        reconnect storm it was 15 % of the surviving process's GIL samples, queued behind that one thread. These
        consumers read the database only through `database_sync_to_async` (the waiter threads included), which
        closes stale connections around each call itself."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"No handler for message type {message.get('type')!r}")
        await handler(message)

    def hear(self, message: MutableMapping[str, Any]) -> None:
        """A message for this socket from an in-process fan-out, dispatched like one from its own channel."""
        self.heard.put_nowait(message)

    def refusal(self) -> int | None:
        """A close code for a handshake this process is too busy to take, checked before any work (no channel is
        opened); None to go on."""
        return None

    async def refuse_unopened(self, receive: Any, code: int) -> None:
        """Accept and close at once, so the client learns why from the code instead of a bare HTTP 403."""
        if (await receive())["type"] == "websocket.connect":
            await self.server_send({"type": "websocket.accept"})
            await self.server_send({"type": "websocket.close", "code": code})

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> "asyncio.Task[Any]":
        """A task that lives no longer than the socket."""
        task = asyncio.ensure_future(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)
        return task

    # --- the bounded send buffer and its writer ---

    async def buffer_frame(self, message: dict[str, Any]) -> None:
        """What Channels calls to send (`base_send`): queue the frame for the writer; never waits."""
        if self.given_up or self.peer_gone:
            return
        if not self.send_buffer.put(message):
            self.give_up_too_slow()
            return
        if self.writer is None or self.writer.done():
            self.writer = asyncio.ensure_future(self.write_frames())

    async def write_frames(self) -> None:
        """The one writer: hands frames to the server in order, waiting wherever the server makes it wait. Runs
        while there is something to write, so an idle socket holds no task for it."""
        while (message := self.send_buffer.take()) is not None:
            try:
                await self.server_send(message)
            except Exception as exc:  # the peer is gone; the server tells the consumer so through `receive`
                logger.debug("socket send failed (%s); dropping its frames", type(exc).__name__)
                self.peer_gone = True
                self.send_buffer.discard()
                return

    def give_up_too_slow(self) -> None:
        if self.given_up:
            return
        self.given_up = True
        logger.info(
            "socket closed with %d: its client read too slowly (more than %d frames or %d bytes waiting)",
            CLOSE_TOO_SLOW,
            self.send_buffer.max_frames,
            self.send_buffer.max_bytes,
        )
        self.spawn(self.close_too_slow())

    async def close_too_slow(self) -> None:
        writer = self.writer
        if writer is not None and not writer.done():
            writer.cancel()  # most likely waiting on a peer that does not read
            await asyncio.wait([writer])
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self.server_send({"type": "websocket.close", "code": CLOSE_TOO_SLOW}), CLOSE_GRACE_SECONDS
            )
        self.dispatching.cancel()

    # --- frames ---

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        if text_data is None:
            await self.send_json(
                {"type": "error", "code": "binary_frame", "detail": "Frames must be JSON text, not binary."}
            )
            return
        try:
            content = untrusted_json.loads(text_data)
        except untrusted_json.JSONRefused as refused:
            frame = {"type": "error", "code": FRAME_ERROR_CODES[refused.code], "detail": refused.reason}
            if refused.path != "$":
                frame["field"] = refused.path
            await self.send_json(frame)
            return
        await self.receive_json(content, **kwargs)

    # --- groups on a layer that may be away ---

    @property
    def layer_joined(self) -> bool:
        return self.groups_wanted <= self.groups_joined

    async def join_group(self, group: str) -> bool:
        """Join `group`, or remember to once the layer is back. True if joined now."""
        self.groups_wanted.add(group)
        if self.channel_layer is None:
            return False
        watch = LayerWatch.for_layer(self.channel_layer)
        watch.register(self)
        if watch.known_down:
            return False  # joined when the watch sees the layer back (layer_recovered)
        layer, channel = self.channel_layer, self.channel_name
        try:
            await change_membership(functools.partial(layer.group_add, group, channel))
        except Exception as exc:
            logger.warning("channel layer unavailable joining a group (%s)", type(exc).__name__)
            watch.failed()
            return False
        self.groups_joined.add(group)
        return True

    async def rejoin_groups(self) -> None:
        for group in sorted(self.groups_wanted):
            self.groups_joined.discard(group)
            await self.join_group(group)

    async def leave_groups(self) -> None:
        if self.channel_layer is None:
            return
        layer, channel = self.channel_layer, self.channel_name
        for group in sorted(self.groups_wanted):
            with contextlib.suppress(Exception):  # an outage must not turn a close into an error
                await change_membership(functools.partial(layer.group_discard, group, channel))
        self.groups_wanted = set()
        self.groups_joined = set()

    def layer_recovered(self) -> None:
        """The layer answers again: pushes sent while it was away are lost, so look at the database now."""
        self.wake.set()

    async def wait_for_wake(self, seconds: float) -> bool:
        """Sleep about `seconds` (jittered), or less if the layer comes back. True if woken by the layer."""
        try:
            await asyncio.wait_for(self.wake.wait(), jittered(seconds))
        except TimeoutError:
            return False
        self.wake.clear()
        return True
