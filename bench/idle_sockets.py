"""Idle agent sockets held by a client process of their own (`harness.ClientProcess`): `hold_forever` opens them,
answers `count` with how many are still open, and closes them on `stop`.

Held in the measuring process, 5,000 sockets made its own full garbage collections last up to 0.6 s and their
pings and frames queued ahead of the frames being timed, so the load generator's pauses were measured as the
server's (bench #3)."""

import asyncio
import gc
import json
from typing import Any

import websockets

from bench.harness import raise_fd_limit

OPENING = 32  # handshakes in flight at once


async def open_socket(url: str, key: str) -> Any:
    socket = await websockets.connect(
        url, additional_headers={"Authorization": f"Bearer {key}"}, open_timeout=30, max_queue=None
    )
    hello = json.loads(await asyncio.wait_for(socket.recv(), 30))
    if hello.get("type") != "hello":
        raise RuntimeError(f"unexpected first frame {hello}")
    return socket


def hold_forever(url: str, keys: list[str], pipe: Any) -> None:
    raise_fd_limit()
    asyncio.run(hold(url, keys, pipe))


async def hold(url: str, keys: list[str], pipe: Any) -> None:
    gate = asyncio.Semaphore(OPENING)
    sockets: list[Any] = []

    async def open_one(key: str) -> None:
        async with gate:
            sockets.append(await open_socket(url, key))

    # A socket that failed to open is not held: `opened` and `count` say how many are.
    await asyncio.gather(*(open_one(key) for key in keys), return_exceptions=True)
    gc.freeze()  # held until `stop`: the collector need not walk them meanwhile
    pipe.send(("opened", len(sockets)))
    while (command := await asyncio.to_thread(pipe.recv)) != "stop":
        if command == "count":
            pipe.send(("count", sum(1 for socket in sockets if socket.state.name == "OPEN")))
    await asyncio.gather(*(socket.close() for socket in sockets), return_exceptions=True)
    pipe.send(("stop", len(sockets)))
