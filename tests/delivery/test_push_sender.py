"""Pushes: published straight from the calling thread with Redis pub/sub; otherwise handed to the server's
event loop in order, or sent in place when there is no server loop."""

import asyncio
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

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


@pytest.mark.services
async def test_with_redis_pub_sub_a_push_is_published_from_the_calling_thread_to_the_group() -> None:
    layer, channel = await subscribe("push-published")
    assert pushes.pubsub_target(layer) is not None

    await sync_to_async(pushes.send_to_group)("push-published", {"type": "test.message", "n": 3})

    assert (await asyncio.wait_for(layer.receive(channel), 5))["n"] == 3


@pytest.mark.services
async def test_a_published_push_to_an_unreachable_redis_is_logged_not_raised(
    settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    layer = get_channel_layer()
    settings.CHANNEL_LAYERS = {
        "default": {**settings.CHANNEL_LAYERS["default"], "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    target = pushes.pubsub_target(layer)
    assert target is not None and target.url.endswith(":1/0")

    await sync_to_async(pushes.send_to_group)("push-nowhere", {"type": "test.message"})

    assert "waiters fall back to the event feed" in caplog.text
