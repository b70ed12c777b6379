"""Subscribes and unsubscribes on the channel layer queue in-process (socket_base.change_membership): the pub/sub
layer serialises them behind one lock per connection, so a timeout around a call queued there would measure
everyone else's calls. And a layer already known to be away is not asked at all."""

import asyncio
from typing import Any

import pytest

from elicitation.delivery import socket_base


class SerialisingLayer:
    """Like channels_redis's pub/sub layer: one subscribe at a time per connection, each taking `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.lock = asyncio.Lock()
        self.waiting = 0
        self.most_waiting = 0
        self.joined: list[str] = []

    async def group_add(self, group: str, channel: str) -> None:
        self.waiting += 1
        self.most_waiting = max(self.most_waiting, self.waiting)
        try:
            async with self.lock:
                await asyncio.sleep(self.seconds)
                self.joined.append(group)
        finally:
            self.waiting -= 1


async def test_many_joins_through_a_serialising_layer_each_get_their_own_timeout(settings: Any) -> None:
    settings.REDIS_OPERATION_TIMEOUT_SECONDS = 1
    layer = SerialisingLayer(
        0.1
    )  # 30 joins take 3 s in all: unqueued, every one after the 10th would time out

    results = await asyncio.gather(
        *(socket_base.change_membership(lambda n=n: layer.group_add(f"g{n}", "c")) for n in range(30)),
        return_exceptions=True,
    )

    assert [r for r in results if isinstance(r, BaseException)] == []
    assert sorted(layer.joined) == sorted(f"g{n}" for n in range(30))
    assert layer.most_waiting == socket_base.MEMBERSHIP_CONCURRENCY


async def test_a_call_that_hangs_still_times_out() -> None:
    async def hang() -> None:
        await asyncio.sleep(3600)

    with pytest.raises(TimeoutError):
        await socket_base.change_membership(hang)


async def test_a_layer_known_to_be_away_is_not_asked_for_a_channel() -> None:
    class AwayLayer:
        asked = 0

        async def new_channel(self) -> str:
            self.asked += 1
            return "specific.x"

    layer = AwayLayer()
    socket_base.LayerWatch.for_layer(layer).failed()

    name = await socket_base.open_channel(layer)

    assert name.startswith("specific.unjoined!")
    assert layer.asked == 0
