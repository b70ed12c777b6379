"""Pushes: with the in-memory layer, handed to the server's event loop in order (or sent in place when there is
no server loop); with a networked layer (channels_redis), sent through the layer's public group_send from the
committing thread itself, on an event loop it borrows for the call."""

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import InMemoryChannelLayer, get_channel_layer

from elicitation.delivery import pushes

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
            pushes.send_to_group("push-direct", {"type": "test.message", "n": number})
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
        threading.Thread(target=loops.send, args=(layer, "push-pool", {"type": "test.message", "n": n}))
        for n in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    layer.entered = threading.Barrier(1)
    loops.send(layer, "push-pool", {"type": "test.message", "n": 2})

    first, second, third = (loop for _, loop, _ in layer.sent)
    assert first != second
    assert third in {first, second}  # reused, not a third loop
    assert loops.idle.qsize() == 2


def test_a_forked_process_never_reuses_its_parents_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = RecordingLayer()
    loops = pushes.PushLoops()
    loops.send(layer, "push-fork", {"type": "test.message", "n": 1})

    monkeypatch.setattr(pushes.os, "getpid", lambda: -1)  # as a Celery prefork child sees it
    loops.send(layer, "push-fork", {"type": "test.message", "n": 2})

    (_, parent_loop, _), (_, child_loop, _) = layer.sent
    assert child_loop != parent_loop


async def test_a_push_made_on_a_running_loop_becomes_a_task_there(monkeypatch: pytest.MonkeyPatch) -> None:
    layer = RecordingLayer()
    monkeypatch.setattr(pushes, "get_channel_layer", lambda: layer)

    pushes.send_to_group("push-task", {"type": "test.message", "n": 5})
    await asyncio.wait_for(asyncio.gather(*pushes.background), 5)

    assert [(loop, n) for _, loop, n in layer.sent] == [(id(asyncio.get_running_loop()), 5)]


@pytest.mark.services
async def test_with_redis_pushes_from_view_threads_reach_the_group_in_order() -> None:
    layer, channel = await subscribe("push-published")
    assert not isinstance(layer, InMemoryChannelLayer)

    def view_thread() -> None:
        for number in range(MESSAGES):
            pushes.send_to_group("push-published", {"type": "test.message", "n": number})

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

    await sync_to_async(pushes.send_to_group)("push-nowhere", {"type": "test.message"})

    assert "waiters fall back to the event feed" in caplog.text
