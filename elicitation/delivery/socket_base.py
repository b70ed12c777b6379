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
"""

import asyncio
import contextlib
import functools
import logging
import random
import uuid
import weakref
from typing import Any

from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import BaseChannelLayer, InMemoryChannelLayer, get_channel_layer
from channels.utils import await_many_dispatch
from django.conf import settings

from elicitation.queue import untrusted_json

logger = logging.getLogger(__name__)

FRAME_ERROR_CODES = {"surrogate": "invalid_text", "too_deep": "too_deep", "malformed": "invalid_json"}
PROBE_GROUP = "reviewhub.layer-probe"


def jittered(seconds: float, spread: float = 0.2) -> float:
    """`seconds` ± spread: timers of sockets opened together (after a restart) do not fire together."""
    return float(seconds) * random.uniform(1 - spread, 1 + spread)  # noqa: S311 (not cryptographic)


def layer_timeout() -> float:
    return float(settings.REDIS_OPERATION_TIMEOUT_SECONDS)


def layer_is_local(layer: BaseChannelLayer | None) -> bool:
    """The embedded in-memory layer cannot go away, so nothing watches it (a subclass might, and is watched)."""
    return layer is None or type(layer) is InMemoryChannelLayer


async def open_channel(layer: Any) -> str:
    """The consumer's channel name; with the layer unreachable, a name of our own that `receive_forever` keeps
    trying to listen on (the socket's group messages reach it once the layer is back)."""
    try:
        return str(await asyncio.wait_for(layer.new_channel(), layer_timeout()))
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


class HardenedJsonConsumer(AsyncJsonWebsocketConsumer):
    """AsyncJsonWebsocketConsumer with untrusted-frame handling and a channel layer allowed to fail."""

    groups_wanted: set[str]
    groups_joined: set[str]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        # AsyncConsumer.__call__, except that opening and reading the layer's channel never raise.
        self.scope = scope
        self.groups_wanted = set()
        self.groups_joined = set()
        self.wake = asyncio.Event()
        self.channel_layer = get_channel_layer(self.channel_layer_alias)
        self.base_send = send
        sources = [receive]
        if self.channel_layer is not None:
            self.channel_name = await open_channel(self.channel_layer)
            self.channel_receive = functools.partial(receive_forever, self.channel_layer, self.channel_name)
            sources.append(self.channel_receive)
        try:
            await await_many_dispatch(sources, self.dispatch)
        except StopConsumer:
            pass
        finally:
            if self.channel_layer is not None:
                LayerWatch.for_layer(self.channel_layer).unregister(self)

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
        LayerWatch.for_layer(self.channel_layer).register(self)
        try:
            await asyncio.wait_for(self.channel_layer.group_add(group, self.channel_name), layer_timeout())
        except Exception as exc:
            logger.warning("channel layer unavailable joining a group (%s)", type(exc).__name__)
            LayerWatch.for_layer(self.channel_layer).failed()
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
        for group in sorted(self.groups_wanted):
            with contextlib.suppress(Exception):  # an outage must not turn a close into an error
                await asyncio.wait_for(
                    self.channel_layer.group_discard(group, self.channel_name), layer_timeout()
                )
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

    async def layer_probe(self, message: dict[str, Any]) -> None:
        """The watch's probe, should this socket ever be in its group: nothing to do."""
