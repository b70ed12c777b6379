"""Every push: channel-layer group names, the payloads pushed to them, and sending them once the transaction
commits. The core never calls this module; it sends signals (queue/signals.py), and the `on_*` listeners below
turn each into pushes."""

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels_redis.pubsub import RedisPubSubChannelLayer
from django.conf import settings
from django.db import transaction

from elicitation.models import AgentEvent, ElicitationRequest
from reviewhub.redis_pool import SharedConnectionPool

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


@dataclass(frozen=True)
class PubSubTarget:
    url: str
    prefix: str


def pubsub_target(layer: Any) -> PubSubTarget | None:
    """The Redis to PUBLISH to directly when the layer is channels_redis's single-host pub/sub layer."""
    if not isinstance(layer, RedisPubSubChannelLayer):
        return None
    layers: dict[str, Any] = settings.CHANNEL_LAYERS
    config: dict[str, Any] = layers["default"].get("CONFIG", {})
    hosts = config.get("hosts", [])
    if len(hosts) != 1 or not isinstance(hosts[0], str):
        return None
    return PubSubTarget(url=hosts[0], prefix=config.get("prefix", "asgi"))


def publish_now(layer: Any, target: PubSubTarget, group: str, message: dict[str, Any]) -> None:
    """One PUBLISH from the calling thread, to the channel the group's subscribers listen on.

    `group_send` would need an event loop: from a view's thread, `async_to_sync` waits for the server's loop
    to come round, and under load that wait (not Redis) was most of the push latency (BENCHMARKS.md #3).
    The channel name is channels_redis's (RedisPubSubLoopLayer._get_group_channel_name);
    tests/delivery/test_push_sender.py checks that the group's subscribers receive what is published here."""
    client = redis.Redis(connection_pool=SharedConnectionPool.from_url(target.url))
    client.publish(f"{target.prefix}__group__{group}", layer.serialize(message))


class PushSender:
    """For layers without a direct publish (the embedded in-memory layer): pushes made in a view's thread are
    handed to the ASGI server's event loop, which owns the layer, and sent there in order; the thread does
    not wait. Outside a server (Celery, commands, sync tests) they are sent in place."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: list[tuple[str, dict[str, Any]]] = []
        self.task: asyncio.Task[None] | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the server's loop with each ASGI connection; cheap when already bound."""
        if self.loop is not loop:
            self.loop, self.pending, self.task = loop, [], None

    def send(self, group: str, message: dict[str, Any]) -> None:
        loop = self.loop
        if loop is None or loop.is_closed() or not loop.is_running():
            send_in_place(group, message)
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
            send_in_place(group, message)

    def _enqueue(self, loop: asyncio.AbstractEventLoop, group: str, message: dict[str, Any]) -> None:
        if self.loop is not loop:
            return  # rebound to a newer loop meanwhile; best effort, like every push
        self.pending.append((group, message))
        if self.task is None or self.task.done():
            self.task = loop.create_task(self._drain())

    async def _drain(self) -> None:
        layer = get_channel_layer()
        while self.pending:
            group, message = self.pending.pop(0)
            if layer is None:
                continue
            try:
                await layer.group_send(group, message)
            except Exception:
                logger.warning(
                    "channel layer push to %s failed; waiters fall back to the event feed",
                    group,
                    exc_info=True,
                )


pushes = PushSender()


def send_in_place(group: str, message: dict[str, Any]) -> None:
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
    layer = get_channel_layer()
    target = pubsub_target(layer)
    if target is None:
        pushes.send(group, message)
        return
    try:
        publish_now(layer, target, group, message)
    except Exception:
        logger.warning(
            "channel layer push to %s failed; waiters fall back to the event feed", group, exc_info=True
        )


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


# --- what each domain signal pushes (connected in ElicitationConfig.ready) ------------------------------------------


def on_request_created(sender: Any, request: ElicitationRequest, **kwargs: Any) -> None:
    """A new request is news for queue pages only: no request page or waiter can know its id yet."""
    summary = request_summary(request)
    send_on_commit(
        queue_group(request.queue_id), {"type": "queue.update", "kind": "created", "request": summary}
    )


def on_request_changed(
    sender: Any, request: ElicitationRequest, kind: str, left_queue_id: int | None = None, **kwargs: Any
) -> None:
    """Tell every open queue page and request page about a transition, after commit."""
    summary = request_summary(request)
    if left_queue_id is not None:
        # Escalated: the old queue's pages drop it; the new queue's pages gain it.
        left = {**summary, "status": "escalated", "queue": left_queue_id}
        send_on_commit(
            queue_group(left_queue_id), {"type": "queue.update", "kind": "escalated", "request": left}
        )
        send_on_commit(
            queue_group(request.queue_id), {"type": "queue.update", "kind": "created", "request": summary}
        )
        return
    send_on_commit(queue_group(request.queue_id), {"type": "queue.update", "kind": kind, "request": summary})
    send_on_commit(request_group(request.id), {"type": "request.update", "kind": kind, "request": summary})


def on_draft_changed(sender: Any, request_id: Any, draft: dict[str, Any], **kwargs: Any) -> None:
    send_on_commit(request_group(request_id), {"type": "request.draft", "draft": draft})


def on_agent_event_recorded(sender: Any, event: AgentEvent, **kwargs: Any) -> None:
    send_on_commit(agent_group(event.agent_id), {"type": "agent.event", "event": event.payload})


def on_agent_key_changed(sender: Any, agent_id: int, **kwargs: Any) -> None:
    """Revoked or rotated: every socket of the agent re-checks its key, and closes if it was the old one."""
    send_on_commit(agent_group(agent_id), {"type": "agent.revoked"})
