"""#4 Waiting agents per process: 5,000 idle agent WebSockets on one process of the deployed server (the servers
compared: #15, bench/servers.py).

5,000 agents each open `/ws/agent/` (Authorization: Bearer) and wait for `hello`; then
the sockets sit idle for a while (the consumer's periodic recheck runs) and must all still be open. Resident
memory growth per socket = (RSS after - RSS before) / sockets, from /proc. The server's CPU while idle is
reported too: 5,000 idle sockets should cost little. Descriptor limits are raised in both processes.
"""

import asyncio
import importlib.util
import json
import time
from typing import Any

import websockets

from bench import fixtures
from bench.harness import (
    DEPLOYED_SERVER,
    SERVER_LABELS,
    Context,
    Figure,
    Report,
    Server,
    cpu_seconds,
    load_average,
    raise_fd_limit,
    rss_kib,
    summary_ms,
)

NAME = "sockets"
TITLE = "Idle agent WebSockets per ASGI process"
PREFIX = "bench-sockets"
SOCKETS = 5000
IDLE_SECONDS = 12.0
KIB_TARGET = 100


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    raise_fd_limit()
    count = 500 if ctx.quick else SOCKETS
    fixtures.purge(PREFIX)
    try:
        queue = fixtures.create_queue(PREFIX)
        ctx.progress.start(f"creating {count:,} agents")
        agents = fixtures.create_agents(PREFIX, count, queue)
        with Server(DEPLOYED_SERVER) as server:
            result = asyncio.run(measure(ctx, server, agents, idle_seconds(ctx)))
    finally:
        fixtures.purge(PREFIX)

    report.add(*socket_figures(SERVER_LABELS[DEPLOYED_SERVER], result, count))
    report.details = result
    report.notes.append(
        f"{count:,} agents, one socket each, opened 64 at a time from one asyncio client process; idle for "
        f"{idle_seconds(ctx):.0f} s (1.5 recheck intervals) before counting open sockets and reading RSS. "
        "RSS before = after a warm-up of 50 sockets opened and closed. uvicorn runs with its defaults and what "
        f"the environment has ({uvicorn_stack()}). The handshake rate depends on how busy the machine was "
        "(details: load_average_opening); server CPU per handshake does not."
    )
    return report


def uvicorn_stack() -> str:
    """What uvicorn's `auto` choices pick here: uvloop and httptools only where installed."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    return f"{loop}, {http}, websockets"


def socket_figures(label: str, r: dict[str, Any], count: int) -> list[Figure]:
    return [
        Figure(
            f"{label}: sockets open after idling (of {count:,})",
            r["open_after_idle"],
            "",
            f"{count:,}",
            r["open_after_idle"] == count,
        ),
        Figure(f"{label}: failed handshakes", r["failed"], "", "0", r["failed"] == 0),
        Figure(
            f"{label}: RSS growth per socket",
            r["kib_per_socket"],
            "KiB",
            f"≤ {KIB_TARGET} KiB",
            r["kib_per_socket"] <= KIB_TARGET,
        ),
        Figure(
            f"{label}: handshakes per second (64 at a time)", r["handshakes_per_s"], "/s", "reported", None
        ),
        Figure(
            f"{label}: server CPU per handshake", r["server_cpu_ms_per_handshake"], "ms", "reported", None
        ),
        Figure(
            f"{label}: server CPU while {count:,} sockets idle",
            r["idle_cpu_percent"],
            "% of a core",
            "reported",
            None,
        ),
    ]


def idle_seconds(ctx: Context) -> float:
    """Long enough for every socket's periodic recheck to run at least once: that is what idling costs."""
    from django.conf import settings

    return max(4.0 if ctx.quick else IDLE_SECONDS, settings.AGENT_SOCKET_RECHECK_SECONDS * 1.5)


async def measure(
    ctx: Context, server: Server, agents: list[fixtures.Credential], idle_seconds: float
) -> dict[str, Any]:
    url = server.ws_url + "/ws/agent/"

    async def open_socket(agent: fixtures.Credential) -> Any:
        socket = await websockets.connect(
            url,
            additional_headers={"Authorization": f"Bearer {agent.key}"},
            open_timeout=60,
            ping_interval=None,  # idle means idle: no client pings
            max_queue=4,
        )
        hello = json.loads(await asyncio.wait_for(socket.recv(), 60))
        if hello.get("type") != "hello":
            raise RuntimeError(f"first frame {hello}")
        return socket

    ctx.progress.start(f"{server.kind}: warm-up")
    warm = await asyncio.gather(*(open_socket(a) for a in agents[:50]), return_exceptions=True)
    await asyncio.gather(
        *(s.close() for s in warm if not isinstance(s, BaseException)), return_exceptions=True
    )
    await asyncio.sleep(2)
    rss_before = rss_kib(server.pid)

    ctx.progress.start(f"{server.kind}: opening {len(agents):,} sockets", len(agents))
    gate = asyncio.Semaphore(64)
    sockets: list[Any] = []
    failures: list[str] = []
    handshakes: list[float] = []

    async def open_one(agent: fixtures.Credential) -> None:
        async with gate:
            began = time.monotonic()
            try:
                sockets.append(await open_socket(agent))
                handshakes.append(time.monotonic() - began)
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}"[:200])
            ctx.progress.update(len(sockets), f"{len(failures)} failed")

    started = time.monotonic()
    load_at_start = load_average()
    cpu_at_start = cpu_seconds(server.pid)
    await asyncio.gather(*(open_one(a) for a in agents))
    opening = time.monotonic() - started
    handshake_cpu_ms = (cpu_seconds(server.pid) - cpu_at_start) * 1000 / max(len(sockets), 1)

    ctx.progress.start(f"{server.kind}: idle {idle_seconds:.0f} s")
    cpu_before = cpu_seconds(server.pid)
    await asyncio.sleep(idle_seconds)
    idle_cpu = (cpu_seconds(server.pid) - cpu_before) / idle_seconds * 100
    rss_after = rss_kib(server.pid)
    still_open = sum(1 for s in sockets if s.state.name == "OPEN")

    ctx.progress.start(f"{server.kind}: closing")
    for start in range(0, len(sockets), 500):
        await asyncio.gather(*(s.close() for s in sockets[start : start + 500]), return_exceptions=True)
    return {
        "opened": len(sockets),
        "failed": len(failures),
        "failure_samples": failures[:5],
        "open_after_idle": still_open,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "kib_per_socket": round((rss_after - rss_before) / max(len(sockets), 1), 1),
        "handshakes_per_s": round(len(sockets) / opening, 1),
        "server_cpu_ms_per_handshake": round(handshake_cpu_ms, 2),
        "handshake": summary_ms(handshakes),
        "idle_cpu_percent": round(idle_cpu, 1),
        # Handshake rates of the two servers are only comparable if the machine was as busy for both.
        "load_average_opening": [load_at_start, load_average()],
    }
