"""Reviewers' answers offered at a steady rate from a client process of their own (`harness.ClientProcess`), started
with the `spawn` method, so this module imports nothing that needs Django.

In the storm bench (#11) the answers were offered by the process that also runs the 5,000 agents' sockets: when
half of them dropped and reconnected at once that process's own event loop ran up to 0.7 s late, and answers were
offered and read late, which measured the load generator as the survivor's slowness. Times are CLOCK_MONOTONIC
(`time.monotonic()`), which every process on the machine shares, so the caller lines them up with its own."""

import asyncio
import json
import time
from collections import Counter
from typing import Any

from bench.harness import KeepAliveHttp, paced


def answer_until_stopped(*args: Any) -> None:
    """`answer(*args)` in this (spawned) process's own event loop."""
    asyncio.run(answer(*args))


async def answer(
    host: str,
    port: int,
    reviewer_id: int,
    request_ids: list[str],
    rate: float,
    in_flight: int,
    max_seconds: float,
    pipe: Any,
) -> None:
    """Answer `request_ids` in order at `rate` (at most `in_flight` at once) through `bench/respond/<id>` until told
    to stop; `stop` is answered with when each answer was offered, each committed answer's (response time, seconds)
    and the HTTP statuses (0: the connection failed)."""
    http = KeepAliveHttp(host, port)
    gate = asyncio.Semaphore(in_flight)
    stopped = asyncio.Event()
    offered: list[float] = []
    answered: list[tuple[float, float]] = []
    statuses: Counter[int] = Counter()

    async def one(index: int) -> None:
        if stopped.is_set():
            return
        began = time.monotonic()
        offered.append(began)
        async with gate:
            try:
                status, body = await http.request(
                    "POST", f"/bench/respond/{request_ids[index]}", {"X-Bench-User": str(reviewer_id)}
                )
            except (OSError, asyncio.IncompleteReadError):
                statuses[0] += 1
                return
        statuses[status] += 1
        if status == 200 and json.loads(body).get("id") == request_ids[index]:
            now = time.monotonic()
            answered.append((now, now - began))

    pipe.send(("started", time.monotonic()))
    answering = asyncio.ensure_future(paced(len(request_ids), rate, one, max_seconds=max_seconds))
    while await asyncio.to_thread(pipe.recv) != "stop":
        pass
    stopped.set()
    await answering
    http.close()
    pipe.send(("stop", {"offered": offered, "answered": answered, "statuses": dict(statuses)}))
