"""Every push: channel-layer group names, the payloads pushed to them, and sending them once the transaction
commits. The core never calls this module; it sends signals (queue/signals.py), and the `on_*` listeners below
turn each into pushes."""

import asyncio
import logging
import os
import queue
from collections import deque
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings
from django.db import transaction

from elicitation.models import AgentEvent, ElicitationRequest
from elicitation.queue import quorum

logger = logging.getLogger(__name__)

MESSAGE_EXCERPT_LENGTH = 160

Push = tuple[str, dict[str, Any]]  # (group, message)


# Agents' pushes travel between processes on AGENT_SHARDS layer groups, not one per agent: a process then joins at
# most AGENT_SHARDS groups for all of its waiting agents, where one subscribe per agent queued for seconds behind the
# pub/sub layer's lock (a reconnect storm's 2,500 agents, bench #11; 20,000 waiters, bench #10). Every process that
# holds one of a shard's agents hears all of the shard's pushes; its waiter hub hands each to the listeners of the
# agent the message names.
AGENT_SHARDS = 64


def agent_group(agent_id: int) -> str:
    """What an agent's waiters listen to, in-process (waiters.WaiterHub)."""
    return f"agent.{agent_id}"


def layer_group(group: str) -> str:
    """The channel-layer group that carries `group`'s messages between processes: an agent's shard, or the
    group itself."""
    kind, _, agent_id = group.partition(".")
    if kind == "agent" and agent_id.isdigit():
        return f"agents.{int(agent_id) % AGENT_SHARDS}"
    return group


def queue_group(queue_id: int) -> str:
    return f"queue.{queue_id}"


def request_group(request_id: Any) -> str:
    return f"request.{request_id}"


def request_summary(request: ElicitationRequest) -> dict[str, Any]:
    """What reviewer pages are told about a request: never content, never secrets; a quorum's progress as counts
    only (who approved stays on the request page)."""
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
        "approvals": quorum.counts(request.policy),
    }


class PushSender:
    """For the embedded in-memory layer, whose queues live on the ASGI server's event loop: pushes made in a
    view's thread are handed to that loop and sent there in order; the thread does not wait. Outside a server
    (Celery, commands, sync tests) they are sent in place."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: deque[tuple[str, dict[str, Any]]] = deque()
        self.task: asyncio.Task[None] | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Called on the server's loop with each ASGI connection; cheap when already bound."""
        if self.loop is not loop:
            self.loop, self.pending, self.task = loop, deque(), None

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
            group, message = self.pending.popleft()
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


class PushLoops:
    """Event loops that committing threads borrow, one thread per loop at a time, to call the channel layer's
    public `group_send` themselves: the push leaves from the thread that committed, with no hand-over.

    Handing pushes to another loop costs what the committing thread does not have to pay: under load, waiting for
    the ASGI server's loop made p50 67 ms, then seconds when pushes queued there (bench/findings.md #3), and even
    a loop of its own in a thread needs the GIL back several times per push (83 ms p50 against 18 ms for the
    committing thread's own PUBLISH on a busy process, README dependency notes). channels_redis keeps its
    connections per loop, so each pooled loop keeps one warm connection; there are at most as many loops as
    threads that ever pushed at the same moment. A forked process (Celery prefork) starts with none."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.idle: queue.LifoQueue[asyncio.AbstractEventLoop] = queue.LifoQueue()

    def send_batch(self, layer: Any, batch: list[Push]) -> None:
        if self.pid != os.getpid():  # the parent's loops hold the parent's connections
            self.pid, self.idle = os.getpid(), queue.LifoQueue()
        try:
            loop = self.idle.get_nowait()
        except queue.Empty:
            loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(send_within_budget(layer, batch))
        finally:
            self.idle.put(loop)


push_loops = PushLoops()
background: set[asyncio.Task[None]] = set()


def push_budget_seconds() -> float:
    """What one batch of pushes may cost the thread that committed: one Redis operation timeout, however many
    pushes the transaction made (a hung Redis would otherwise cost each of them that timeout in turn)."""
    return float(getattr(settings, "REDIS_OPERATION_TIMEOUT_SECONDS", 2))


async def send_within_budget(layer: Any, batch: list[Push]) -> None:
    """Send a batch concurrently, group by group, under one timeout. Each group's pushes go out in the order they
    were made (a page must see `claimed` before `completed`); groups do not wait for each other."""
    by_group: dict[str, list[dict[str, Any]]] = {}
    for group, message in batch:
        by_group.setdefault(group, []).append(message)

    async def send_in_order(group: str, messages: list[dict[str, Any]]) -> None:
        for message in messages:
            await send_logged(layer, group, message)

    try:
        async with asyncio.timeout(push_budget_seconds()):
            if len(by_group) == 1:  # most commits push to one group: no task per group to schedule
                ((group, messages),) = by_group.items()
                await send_in_order(group, messages)
            else:
                await asyncio.gather(
                    *(send_in_order(group, messages) for group, messages in by_group.items())
                )
    except TimeoutError:
        logger.warning(
            "channel layer pushes to %s timed out after %ss; waiters fall back to the event feed",
            ", ".join(by_group),
            push_budget_seconds(),
        )


async def send_logged(layer: Any, group: str, message: dict[str, Any]) -> None:
    try:
        await layer.group_send(group, message)
    except Exception:
        logger.warning(
            "channel layer push to %s failed; waiters fall back to the event feed", group, exc_info=True
        )


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


def send_to_groups(batch: list[Push]) -> None:
    """Best effort: a push that fails is recovered by the durable feed and the long-poll recheck. The in-memory
    layer's queues belong to the server's loop (PushSender); a networked layer (channels_redis) is sent to from
    the calling thread on a borrowed loop (PushLoops), or as a task when the caller is itself on a loop, the whole
    batch under one timeout either way."""
    layer = get_channel_layer()
    if layer is None or not batch:
        return
    if isinstance(layer, InMemoryChannelLayer):
        for group, message in batch:
            pushes.send(group, message)
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is not None:
        task = running.create_task(send_within_budget(layer, batch))
        background.add(task)
        task.add_done_callback(background.discard)
        return
    try:
        push_loops.send_batch(layer, batch)
    except Exception:
        logger.warning(
            "channel layer pushes to %s failed; waiters fall back to the event feed",
            ", ".join(sorted({group for group, _ in batch})),
            exc_info=True,
        )


Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


def with_push_sender(app: ASGIApp) -> ASGIApp:
    """Wrap the ASGI app so pushes made by its views leave from its event loop (see PushSender)."""

    async def application(scope: Scope, receive: Any, send: Any) -> None:
        pushes.bind(asyncio.get_running_loop())
        await app(scope, receive, send)

    return application


class CommitBatch:
    """The pushes a transaction made, registered as ONE `on_commit` callback and sent together when it runs."""

    def __init__(self, push: Push) -> None:
        self.batch: list[Push] = [push]

    def __call__(self) -> None:
        send_to_groups(self.batch)


def send_on_commit(group: str, message: dict[str, Any]) -> None:
    """Queue a push for after commit, joining the transaction's batch when it may.

    A push joins the latest batch only if that batch is registered under every savepoint now open (its savepoints
    either are those or were released into them): Django drops a callback when a savepoint it was registered
    under rolls back, so the joined push is then dropped exactly when it should be. Otherwise (a deeper savepoint
    opened since) it starts a batch of its own, after the other, so every group keeps its order."""
    connection = transaction.get_connection()
    if connection.in_atomic_block:
        open_savepoints = set(connection.savepoint_ids)
        latest = next(
            (
                (savepoints, callback)
                for savepoints, callback, _ in reversed(connection.run_on_commit)
                if isinstance(callback, CommitBatch)
            ),
            None,
        )
        if latest is not None and latest[0] >= open_savepoints:
            latest[1].batch.append((group, message))
            return
    transaction.on_commit(CommitBatch((group, message)))


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
    # `agent` names the agent: the waiter hub that hears the shard hands it to that agent's listeners.
    message = {"type": "agent.event", "agent": event.agent_id, "event": event.payload}
    send_on_commit(layer_group(agent_group(event.agent_id)), message)


def on_agent_key_changed(sender: Any, agent_id: int, **kwargs: Any) -> None:
    """Revoked or rotated: every socket of the agent re-checks its key, and closes if it was the old one."""
    send_on_commit(layer_group(agent_group(agent_id)), {"type": "agent.revoked", "agent": agent_id})
