"""Pushes: with the in-memory layer, handed to the server's event loop in order (or sent in place when there is
no server loop); with a networked layer (channels_redis), sent through the layer's public group_send from the
committing thread itself, on an event loop it borrows for the call. The pushes one transaction makes are one
`on_commit` callback, sent together under one timeout."""

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.db import transaction

from elicitation.delivery import pushes
from elicitation.models import ElicitationRequest
from elicitation.queue import transitions

MESSAGES = 50


async def subscribe(group: str) -> tuple[Any, str]:
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await layer.group_add(group, channel)
    return layer, channel


async def receive_numbers(layer: Any, channel: str, count: int) -> list[int]:
    return [(await asyncio.wait_for(layer.receive(channel), 5))["n"] for _ in range(count)]


async def test_pushes_from_worker_threads_arrive_from_the_loop_in_the_order_they_were_made() -> None:
    layer, channel = await subscribe("push-order")
    sender = pushes.PushSender()
    sender.bind(asyncio.get_running_loop())
    finished: list[str] = []

    def view_thread() -> None:
        for number in range(MESSAGES):
            sender.send("push-order", {"type": "test.message", "n": number})
        finished.append(threading.current_thread().name)

    worker = threading.Thread(target=view_thread, name="view-thread")
    worker.start()
    await asyncio.get_running_loop().run_in_executor(None, worker.join)

    assert finished == ["view-thread"]
    assert await receive_numbers(layer, channel, MESSAGES) == list(range(MESSAGES))


async def test_a_push_made_on_the_loop_itself_is_queued_there() -> None:
    layer, channel = await subscribe("push-on-loop")
    sender = pushes.PushSender()
    sender.bind(asyncio.get_running_loop())

    sender.send("push-on-loop", {"type": "test.message", "n": 7})

    assert await receive_numbers(layer, channel, 1) == [7]


async def test_without_a_server_loop_the_push_is_sent_before_send_returns() -> None:
    layer, channel = await subscribe("push-direct")
    sender = pushes.PushSender()  # never bound: Celery workers, commands, sync tests

    def view_thread() -> bool:
        sender.send("push-direct", {"type": "test.message", "n": 1})
        return True

    await sync_to_async(view_thread)()

    # Already in the channel: no wait needed.
    assert (await asyncio.wait_for(layer.receive(channel), 0.5))["n"] == 1


def test_a_closed_loop_is_never_handed_a_push(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.new_event_loop()
    sender = pushes.PushSender()
    sender.bind(loop)
    loop.close()
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(pushes, "send_in_place", lambda group, message: sent.append((group, message)))

    sender.send("push-closed", {"type": "test.message"})

    assert sent == [("push-closed", {"type": "test.message"})]


class RecordingLayer:
    """A networked layer stand-in: records which thread and which event loop sent each push."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int, int]] = []
        self.entered = threading.Barrier(1)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        loop = id(asyncio.get_running_loop())
        await asyncio.get_running_loop().run_in_executor(None, self.entered.wait, 5)
        self.sent.append((threading.current_thread().name, loop, message["n"]))


def test_a_networked_layer_is_sent_to_from_the_committing_thread_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = RecordingLayer()
    monkeypatch.setattr(pushes, "get_channel_layer", lambda: layer)
    arrived_on_return: list[bool] = []

    def view_thread() -> None:
        for number in range(MESSAGES):
            pushes.send_to_groups([("push-direct", {"type": "test.message", "n": number})])
            arrived_on_return.append(layer.sent[-1][2] == number)

    worker = threading.Thread(target=view_thread, name="view-thread")
    worker.start()
    worker.join()

    assert all(arrived_on_return) and len(arrived_on_return) == MESSAGES
    assert [(thread, n) for thread, _, n in layer.sent] == [("view-thread", n) for n in range(MESSAGES)]


def test_threads_pushing_at_once_each_borrow_a_loop_of_their_own_and_return_it() -> None:
    layer = RecordingLayer()
    layer.entered = threading.Barrier(2)  # both sends are inside group_send at the same moment
    loops = pushes.PushLoops()
    threads = [
        threading.Thread(
            target=loops.send_batch, args=(layer, [("push-pool", {"type": "test.message", "n": n})])
        )
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    layer.entered = threading.Barrier(1)
    loops.send_batch(layer, [("push-pool", {"type": "test.message", "n": 2})])

    first, second, third = (loop for _, loop, _ in layer.sent)
    assert first != second
    assert third in {first, second}  # reused, not a third loop
    assert loops.idle.qsize() == 2


def test_a_forked_process_never_reuses_its_parents_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = RecordingLayer()
    loops = pushes.PushLoops()
    loops.send_batch(layer, [("push-fork", {"type": "test.message", "n": 1})])

    monkeypatch.setattr(pushes.os, "getpid", lambda: -1)  # as a Celery prefork child sees it
    loops.send_batch(layer, [("push-fork", {"type": "test.message", "n": 2})])

    (_, parent_loop, _), (_, child_loop, _) = layer.sent
    assert child_loop != parent_loop


async def test_a_push_made_on_a_running_loop_becomes_a_task_there(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = RecordingLayer()
    monkeypatch.setattr(pushes, "get_channel_layer", lambda: layer)

    pushes.send_to_groups([("push-task", {"type": "test.message", "n": 5})])
    await asyncio.wait_for(asyncio.gather(*pushes.background), 5)

    assert [(loop, n) for _, loop, n in layer.sent] == [(id(asyncio.get_running_loop()), 5)]


@pytest.mark.services
async def test_with_redis_pushes_from_view_threads_reach_the_group_in_order() -> None:
    layer, channel = await subscribe("push-published")
    assert not isinstance(layer, InMemoryChannelLayer)

    def view_thread() -> None:
        for number in range(MESSAGES):
            pushes.send_to_groups([("push-published", {"type": "test.message", "n": number})])

    await sync_to_async(view_thread)()

    assert await receive_numbers(layer, channel, MESSAGES) == list(range(MESSAGES))


@pytest.mark.services
async def test_a_push_to_an_unreachable_redis_is_logged_not_raised(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    # Changing CHANNEL_LAYERS makes Channels build a new layer, which the next push uses.
    settings.CHANNEL_LAYERS = {
        "default": {
            **settings.CHANNEL_LAYERS["default"],
            "CONFIG": {"hosts": [{"address": "redis://127.0.0.1:1/0", "socket_connect_timeout": 1}]},
        }
    }

    await sync_to_async(pushes.send_to_groups)([("push-nowhere", {"type": "test.message"})])

    assert "waiters fall back to the event feed" in caplog.text


# --- one transaction, one batch ------------------------------------------------------------------------------------


class Boom(Exception):
    pass


def push_numbers(callbacks: list[Any]) -> list[list[tuple[str, int]]]:
    """What each captured push batch would send, as (group, n)."""
    batches = [callback.batch for callback in callbacks if isinstance(callback, pushes.CommitBatch)]
    return [[(group, message["n"]) for group, message in batch] for batch in batches]


@pytest.mark.django_db
def test_an_answers_pushes_are_one_callback_after_commit(
    make_request: Any, reviewer: Any, django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    request: ElicitationRequest = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    sent: list[list[tuple[str, dict[str, Any]]]] = []
    monkeypatch.setattr(pushes, "send_to_groups", lambda batch: sent.append(list(batch)))

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        transitions.respond(request.pk, user=reviewer, action="decline")

    assert len([c for c in callbacks if isinstance(c, pushes.CommitBatch)]) == 1
    [batch] = sent
    assert [(group, message["type"]) for group, message in batch] == [
        (pushes.layer_group(pushes.agent_group(request.agent_id)), "agent.event"),
        (pushes.queue_group(request.queue_id), "queue.update"),
        (pushes.request_group(request.pk), "request.update"),
    ]


@pytest.mark.django_db
def test_a_rolled_back_savepoint_drops_only_its_own_pushes(django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        pushes.send_on_commit("a", {"type": "t", "n": 1})
        with pytest.raises(Boom), transaction.atomic():
            pushes.send_on_commit("a", {"type": "t", "n": 2})
            pushes.send_on_commit("b", {"type": "t", "n": 3})
            raise Boom
        pushes.send_on_commit("a", {"type": "t", "n": 4})

    assert push_numbers(callbacks) == [[("a", 1), ("a", 4)]]


@pytest.mark.django_db
def test_a_released_savepoints_pushes_keep_their_place(django_capture_on_commit_callbacks: Any) -> None:
    with django_capture_on_commit_callbacks() as callbacks, transaction.atomic():
        pushes.send_on_commit("a", {"type": "t", "n": 1})
        with transaction.atomic():
            pushes.send_on_commit("a", {"type": "t", "n": 2})
        pushes.send_on_commit("a", {"type": "t", "n": 3})

    # The later push joins the released savepoint's batch, so group a still hears 1, 2, 3 in order.
    assert push_numbers(callbacks) == [[("a", 1)], [("a", 2), ("a", 3)]]


@pytest.mark.django_db
def test_a_rolled_back_transaction_pushes_nothing(
    django_capture_on_commit_callbacks: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[Any] = []
    monkeypatch.setattr(pushes, "send_to_groups", sent.append)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(Boom), transaction.atomic():
            pushes.send_on_commit("a", {"type": "t", "n": 1})
            raise Boom
        pushes.send_on_commit("b", {"type": "t", "n": 2})  # a transaction of its own, after the rollback

    assert push_numbers(callbacks) == [[("b", 2)]]
    assert sent == [[("b", {"type": "t", "n": 2})]]


class HungLayer:
    """A networked layer whose Redis stopped answering: every group_send waits until it is cancelled."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cancelled: list[str] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.started.append(group)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(group)
            raise


def test_a_hung_layer_costs_a_batch_one_budget_not_one_per_push(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    layer = HungLayer()
    monkeypatch.setattr(pushes, "get_channel_layer", lambda: layer)
    monkeypatch.setattr(pushes, "push_budget_seconds", lambda: 0.2)
    loops = pushes.PushLoops()
    monkeypatch.setattr(pushes, "push_loops", loops)

    pushes.send_to_groups([("agent.1", {"n": 1}), ("queue.1", {"n": 2}), ("request.1", {"n": 3})])

    # All three groups were tried at once and given up together; nothing is left running on the loop.
    assert sorted(layer.started) == sorted(layer.cancelled) == ["agent.1", "queue.1", "request.1"]
    assert "timed out" in caplog.text and "waiters fall back to the event feed" in caplog.text
    loop = loops.idle.get_nowait()
    assert not asyncio.all_tasks(loop)


class SlowFirstLayer:
    """Group a's first push is slow: a's later push must wait for it, group b's must not."""

    def __init__(self) -> None:
        self.arrived: list[tuple[str, int]] = []

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        if (group, message["n"]) == ("a", 1):
            await asyncio.sleep(0.05)
        self.arrived.append((group, message["n"]))


def test_a_batch_keeps_each_groups_order_and_groups_do_not_wait_for_each_other(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layer = SlowFirstLayer()
    monkeypatch.setattr(pushes, "get_channel_layer", lambda: layer)

    pushes.send_to_groups([("a", {"n": 1}), ("a", {"n": 2}), ("b", {"n": 3})])

    assert layer.arrived == [("b", 3), ("a", 1), ("a", 2)]
