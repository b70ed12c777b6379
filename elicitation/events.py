"""Channel-layer group names, the payloads pushed to them, and sending them once the transaction commits."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings
from django.db import transaction

from elicitation.models import ElicitationRequest

logger = logging.getLogger(__name__)

MESSAGE_EXCERPT_LENGTH = 160


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def queue_group(queue_id: int) -> str:
    return f"queue.{queue_id}"


def request_group(request_id: Any) -> str:
    return f"request.{request_id}"


def request_summary(request: ElicitationRequest) -> dict[str, Any]:
    """What reviewer pages are told about a request: never content, never secrets."""
    return {
        "id": str(request.id),
        "queue": request.queue_id,
        "status": request.status,
        "mode": request.mode,
        "priority": request.priority,
        "agent": request.agent.name,
        "message_excerpt": request.message[:MESSAGE_EXCERPT_LENGTH],
        "created_at": request.created_at.isoformat(),
        "deadline": request.deadline.isoformat(),
        "claimed_by": request.claimed_by.get_username() if request.claimed_by else None,
        "claimed_at": request.claimed_at.isoformat() if request.claimed_at else None,
        "lease_expires_at": request.lease_expires_at.isoformat() if request.lease_expires_at else None,
        "url_flow_completed": request.url_flow_completed_at is not None,
    }


Batch = list[tuple[str, dict[str, Any]]]


class PushSender:
    """Sends pushes from the ASGI server's event loop, in order, without the request thread waiting for them.

    A view runs in a worker thread; `async_to_sync` would hop to the loop and block the thread until Redis
    answers, once per push (three for an answer). Here the thread only queues the message, and a task on the
    loop sends whatever has queued up as one batch. With Redis pub/sub a batch is one pipelined round trip:
    channels_redis publishes one message per round trip under a lock, and on a busy loop each round trip
    waits for the loop to come round again, so sent one by one 200 pushes a second built seconds of backlog
    (BENCHMARKS.md #3). Outside a server (Celery, commands, sync tests) there is no loop to hand over to, and
    pushes are sent in place."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: Batch = []
        self.task: asyncio.Task[None] | None = None
        self.redis: Any = None  # redis.asyncio client for pipelined publishes, bound to self.loop

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the server's loop with each ASGI connection; cheap when already bound."""
        if self.loop is not loop:
            self.loop, self.pending, self.task, self.redis = loop, [], None, None

    def send(self, group: str, message: dict[str, Any]) -> None:
        loop = self.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            send_now(group, message)
            return
        try:
            on_loop = asyncio.get_running_loop() is loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            self._enqueue(loop, group, message)
            return
        try:
            loop.call_soon_threadsafe(self._enqueue, loop, group, message)
        except RuntimeError:  # the loop closed between the check and the call
            send_now(group, message)

    def _enqueue(self, loop: asyncio.AbstractEventLoop, group: str, message: dict[str, Any]) -> None:
        if self.loop is not loop:
            return  # rebound to a newer loop meanwhile; best effort, like every push
        self.pending.append((group, message))
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._drain())

    async def _drain(self) -> None:
        layer = get_channel_layer()
        while self.pending:
            batch, self.pending = self.pending, []
            if layer is None:
                continue
            try:
                target = pipelined_target(layer)
                if target is not None:
                    await self._publish_pipelined(layer, target, batch)
                else:
                    await send_one_by_one(layer, batch)
            except Exception:
                logger.warning(
                    "channel layer push of %d messages failed; waiters fall back to the event feed",
                    len(batch),
                    exc_info=True,
                )

    async def _publish_pipelined(self, layer: Any, target: "PubSubTarget", batch: Batch) -> None:
        """PUBLISH each message to the channel its group's subscribers listen on, in order, in one round trip."""
        if self.redis is None:
            self.redis = aioredis.Redis.from_url(target.url)
        async with self.redis.pipeline(transaction=False) as pipe:
            for group, message in batch:
                # channels_redis's own name for a group's channel (RedisPubSubLoopLayer._get_group_channel_name);
                # tests/delivery/test_push_sender.py checks the group's subscribers receive what is sent here.
                pipe.publish(f"{target.prefix}__group__{group}", layer.serialize(message))
            await pipe.execute()


@dataclass(frozen=True)
class PubSubTarget:
    url: str
    prefix: str


def pipelined_target(layer: Any) -> PubSubTarget | None:
    """Where to publish directly: the configured Redis of a single-host pub/sub layer, else None."""
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    layers: dict[str, Any] = settings.CHANNEL_LAYERS
    config: dict[str, Any] = layers["default"].get("CONFIG", {})
    hosts = config.get("hosts", [])
    if len(hosts) != 1 or not isinstance(hosts[0], str):
        return None
    return PubSubTarget(url=hosts[0], prefix=config.get("prefix", "asgi"))


async def send_one_by_one(layer: Any, batch: Batch) -> None:
    for group, message in batch:
        await layer.group_send(group, message)


pushes = PushSender()


def send_now(group: str, message: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.warning(
            "channel layer push to %s failed; waiters fall back to the event feed", group, exc_info=True
        )


def send_to_group(group: str, message: dict[str, Any]) -> None:
    """Best effort: a push that fails is recovered by the durable feed and the long-poll recheck."""
    pushes.send(group, message)


Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def with_push_sender(app: ASGIApp) -> ASGIApp:
    """Wrap the ASGI app so pushes made by its views leave from its event loop (see PushSender)."""

    async def application(scope: Scope, receive: Any, send: Any) -> None:
        pushes.bind(asyncio.get_running_loop())
        await app(scope, receive, send)

    return application


def send_on_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: send_to_group(group, message))


def broadcast_request_change(request: ElicitationRequest, kind: str) -> None:
    """Tell every open queue page and request page about a transition, after commit."""
    summary = request_summary(request)
    send_on_commit(queue_group(request.queue_id), {"type": "queue.update", "kind": kind, "request": summary})
    send_on_commit(request_group(request.id), {"type": "request.update", "kind": kind, "request": summary})


def broadcast_new_request(request: ElicitationRequest) -> None:
    """A new request is news for queue pages only: no request page or waiter can know its id yet."""
    summary = request_summary(request)
    send_on_commit(
        queue_group(request.queue_id), {"type": "queue.update", "kind": "created", "request": summary}
    )


def broadcast_draft_change(request_id: Any, draft: dict[str, Any]) -> None:
    send_on_commit(request_group(request_id), {"type": "request.draft", "draft": draft})


def push_agent_event(agent_id: int, payload: dict[str, Any]) -> None:
    send_on_commit(agent_group(agent_id), {"type": "agent.event", "event": payload})


def close_agent_sockets(agent_id: int) -> None:
    send_on_commit(agent_group(agent_id), {"type": "agent.revoked"})
