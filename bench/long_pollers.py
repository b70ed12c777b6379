"""The long-polls of bench #10 (waiting), run in a client process of their own: started with the `spawn` method, so
this module imports nothing that needs Django."""

import asyncio
import json
from collections import Counter
from typing import Any

from bench.harness import KeepAliveHttp, raise_fd_limit

# Longer than a run (opening, settling, the idle window): no long-poll ends during the window, so the window counts
# what waiting costs. A long-poll that ends and is re-issued is an agent's GET through Django, an API call's cost
# (bench/findings.md, 2026-11-28). The bench's server allows it with MAX_LONG_POLL_SECONDS.
LONG_POLL_SECONDS = 300
OPENING = 64  # first long-polls in flight at once
OPENING_PER_SECOND = 150.0  # about the rate the server completes socket handshakes


class LongPoller:
    """One agent's long-poll on one request over one keep-alive HTTP/1.1 connection, re-issued as it returns."""

    def __init__(self, host: str, port: int, key: str, request_id: str, outcomes: Counter[str]) -> None:
        self.http = KeepAliveHttp(host, port)
        self.path = f"/api/v1/requests/{request_id}?wait={LONG_POLL_SECONDS}"
        self.headers = {"Authorization": f"Bearer {key}"}
        self.outcomes = outcomes
        self.first_sent = asyncio.Event()

    async def run(self) -> None:
        try:
            while True:
                status, body = await self.http.request("GET", self.path, self.headers, sent=self.first_sent)
                returned = json.loads(body).get("status") if status == 200 else None
                self.outcomes[f"{status} {returned}" if status == 200 else f"HTTP {status}"] += 1
                if status != 200 or returned != "pending":
                    return
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            self.outcomes[type(exc).__name__] += 1
        finally:
            self.first_sent.set()

    def close(self) -> None:
        self.http.close()


def poll_forever(host: str, port: int, polls: list[tuple[str, str]], pipe: Any) -> None:
    raise_fd_limit()
    asyncio.run(run_pollers(host, port, polls, pipe))


async def run_pollers(host: str, port: int, polls: list[tuple[str, str]], pipe: Any) -> None:
    outcomes: Counter[str] = Counter()
    gate = asyncio.Semaphore(OPENING)
    pollers: list[LongPoller] = []
    tasks: list[asyncio.Task[None]] = []

    async def start(index: int, key: str, request_id: str) -> None:
        # Paced: written at once, 10,000 long-polls would all queue their key checks on the server's few database
        # threads ahead of the sockets' handshakes, which then stalled (a flood no agent fleet sends at once).
        await asyncio.sleep(index / OPENING_PER_SECOND)
        async with gate:
            poller = LongPoller(host, port, key, request_id, outcomes)
            pollers.append(poller)
            tasks.append(asyncio.ensure_future(poller.run()))
            await poller.first_sent.wait()

    await asyncio.gather(*(start(index, key, request_id) for index, (key, request_id) in enumerate(polls)))
    pipe.send(("opened", len(pollers)))
    while (command := await asyncio.to_thread(pipe.recv)) != "stop":
        if command == "count":
            pipe.send(("count", sum(1 for task in tasks if not task.done())))
        elif command == "ended":  # long-polls answered so far, re-issued or not
            pipe.send(("ended", sum(outcomes.values())))
    for task in tasks:
        task.cancel()
    for poller in pollers:
        poller.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    pipe.send(("stop", dict(outcomes)))
