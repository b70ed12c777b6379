"""Pushes made in a view's thread leave from the server's event loop, in order; without a loop they go at once."""

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from elicitation import events

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
    sender = events.PushSender()
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
    sender = events.PushSender()
    sender.bind(asyncio.get_running_loop())

    sender.send("push-on-loop", {"type": "test.message", "n": 7})

    assert await receive_numbers(layer, channel, 1) == [7]


async def test_without_a_server_loop_the_push_is_sent_before_send_returns() -> None:
    layer, channel = await subscribe("push-direct")
    sender = events.PushSender()  # never bound: Celery workers, commands, sync tests

    def view_thread() -> bool:
        sender.send("push-direct", {"type": "test.message", "n": 1})
        return True

    await sync_to_async(view_thread)()

    # Already in the channel: no wait needed.
    assert (await asyncio.wait_for(layer.receive(channel), 0.5))["n"] == 1


def test_a_closed_loop_is_never_handed_a_push(monkeypatch: pytest.MonkeyPatch) -> None:
    loop = asyncio.new_event_loop()
    sender = events.PushSender()
    sender.bind(loop)
    loop.close()
    sent: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(events, "send_now", lambda group, message: sent.append((group, message)))

    sender.send("push-closed", {"type": "test.message"})

    assert sent == [("push-closed", {"type": "test.message"})]
