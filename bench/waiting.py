"""#5 Idle waiters at scale: 20,000 waiting agents on one server process cost the database what 1,000 do.

One server process; half the waiters are agent WebSockets (`/ws/agent/`, hello, `resume`, `subscribe` to the
agent's own pending request), half are long-polls (`GET /api/v1/requests/<id>?wait=60` on another pending
request of the same agent, re-issued on the same keep-alive connection as each returns). Nothing is answered:
the figures are what waiting costs. First 1,000 waiters (the baseline), then 20,000, on the same process.

Database load is counted by PostgreSQL itself: `xact_commit + xact_rollback` of the bench database in
`pg_stat_database`, read from another database so the reading adds nothing. Django runs in autocommit, so each
query outside an atomic block is one transaction; a batched recheck inside `atomic` counts once (pg_stat_statements
would count statements, but it needs `shared_preload_libraries` and a restart, which this machine's PostgreSQL
does not have). Index and sequential scans on the app's tables (`pg_stat_user_tables`) are in the details.
Backends flush their counters at most once a second while busy (10 s when idle), so the idle window is long.
"""

import asyncio
import contextlib
import json
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import psycopg
import websockets

from bench import fixtures, long_pollers
from bench.harness import (
    ClientProcess,
    Context,
    Figure,
    Report,
    Server,
    bench_env,
    cpu_seconds,
    raise_fd_limit,
    rss_kib,
)
from reviewhub_client.client import backoff_delay

NAME = "waiting"
TITLE = "Idle waiters at scale: database cost per process, not per waiter"
PREFIX = "bench-waiting"
WAITERS = 20_000
BASELINE_WAITERS = 1_000
LONG_POLL_SECONDS = long_pollers.LONG_POLL_SECONDS
IDLE_SECONDS = 40.0
QUERIES_TARGET = 20.0  # per second, whatever the number of waiters
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}
SERVER_ENV = {**UNBOUND_RATES, "MAX_LONG_POLL_SECONDS": str(LONG_POLL_SECONDS)}
OPENING = long_pollers.OPENING  # handshakes in flight at once (and first long-polls, in their process)
HANDSHAKE_ATTEMPTS = 5
OPENING_LIMIT_SECONDS = 300.0
SETTLE_SECONDS = 12.0
SERVER_DESCRIPTORS = 300  # what a server process holds besides its waiters, with room to spare


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fd_limit = raise_fd_limit()
    # Each waiter is one descriptor in the server, which inherits this process's limit; where the machine's hard
    # limit is below WAITERS plus the server's own (database, Redis, listening socket), the run holds what fits.
    most = (fd_limit - SERVER_DESCRIPTORS) // 2 * 2
    big, small = (2_000, 200) if ctx.quick else (min(WAITERS, most), BASELINE_WAITERS)
    idle = 15.0 if ctx.quick else IDLE_SECONDS
    agents_needed = big // 2
    fixtures.purge(PREFIX)
    results: dict[str, dict[str, Any]] = {}
    try:
        queue = fixtures.create_queue(PREFIX)
        ctx.progress.start(f"creating {agents_needed:,} agents and {big:,} requests")
        agents = fixtures.create_agents(PREFIX, agents_needed, queue)
        requests = fixtures.requests_per_agent(queue, [a.id for a in agents], 2)
        with Server(env=SERVER_ENV, role="waiting", start_timeout=120) as server:
            for count in (small, big):
                chosen = agents[: count // 2]
                waits = [(a, requests[a.id][0], requests[a.id][1]) for a in chosen]
                results[str(count)] = asyncio.run(measure(ctx, server, waits, idle))
    finally:
        fixtures.purge(PREFIX)

    b, s = results[str(big)], results[str(small)]
    ended_in_windows = b["long_polls_ended_in_window"] + s["long_polls_ended_in_window"]
    report.add(
        Figure(
            f"database transactions per second, {big:,} idle waiters",
            b["db_per_s"],
            "/s",
            f"≤ {QUERIES_TARGET:.0f}/s",
            b["db_per_s"] <= QUERIES_TARGET,
            s["db_per_s"],
            f"{small:,} waiters",
            b["db_per_s"] / s["db_per_s"] if s["db_per_s"] else None,
        ),
        Figure(
            f"database transactions per second, {small:,} idle waiters",
            s["db_per_s"],
            "/s",
            f"≤ {QUERIES_TARGET:.0f}/s",
            s["db_per_s"] <= QUERIES_TARGET,
        ),
        Figure(
            f"server CPU while {big:,} waiters idle",
            b["idle_cpu_percent"],
            "% of a core",
            "reported",
            None,
            s["idle_cpu_percent"],
            f"{small:,} waiters",
            b["idle_cpu_percent"] / s["idle_cpu_percent"] if s["idle_cpu_percent"] else None,
        ),
        Figure(f"RSS growth per waiter ({big:,})", b["kib_per_waiter"], "KiB", "reported", None),
        Figure(
            "long-polls that ended during the idle windows (none: the window counts waiting alone)",
            ended_in_windows,
            "",
            "0",
            ended_in_windows == 0,
        ),
        Figure(
            f"waiters still waiting after idling (of {big:,})",
            b["waiting_after_idle"],
            "",
            f"{big:,}",
            b["waiting_after_idle"] == big,
        ),
        Figure(
            "failed handshakes, long-poll errors and 5xx (both runs)",
            b["failures"] + s["failures"],
            "",
            "0",
            b["failures"] + s["failures"] == 0,
        ),
    )
    report.details = results
    if big < WAITERS and not ctx.quick:
        report.notes.append(
            f"{WAITERS:,} waiters were asked for; this machine allows {fd_limit:,} open descriptors per process "
            f"(hard limit), so one server process held {big:,} waiters plus its own connections."
        )
    report.notes.append(
        f"One server process; {big:,} waiters = {big // 2:,} agents, each with one WebSocket subscribed to a "
        f"pending request and one long-poll (`?wait={LONG_POLL_SECONDS}`, the server's MAX_LONG_POLL_SECONDS raised "
        "to allow it, so none ends during the window: a long-poll that ends and is re-issued is an agent's GET "
        "through Django, an API call's cost, not waiting's) on another; "
        f"baseline {small:,} waiters on the same process first. Idle window {idle:.0f} s after a {SETTLE_SECONDS:.0f} s settle. "
        "Database cost = transactions committed or rolled back in the bench database (pg_stat_database, read "
        "from another database); pg_stat_statements is not preloaded here. RSS per waiter = (RSS with every "
        "waiter open - RSS before opening) / waiters. Clients: asyncio, raw HTTP/1.1 for the "
        f"long-polls, {OPENING} connections opened at a time per client process; the long-polls run in a second "
        "client process, since each process may hold only so many descriptors."
    )
    return report


class PollerProcess(ClientProcess):
    """The long-polls in a client process of their own (`long_pollers.poll_forever`), so that neither client
    process needs more descriptors than the machine allows one: opened, still polling, stop."""

    def __init__(self, host: str, port: int, polls: list[tuple[str, str]]) -> None:
        super().__init__(long_pollers.poll_forever, host, port, polls)

    async def wait_opened(self, timeout: float) -> int:
        return int(await self.reply("opened", timeout))

    async def still_polling(self) -> int:
        return int(await self.ask("count"))

    async def ended(self) -> int:
        return int(await self.ask("ended"))

    async def stop(self, timeout: float = 60) -> Counter[str]:  # type: ignore[override]
        outcomes = await super().stop(timeout)
        return Counter(outcomes) if outcomes is not None else Counter({"poller process did not stop": 1})


def database_counters() -> tuple[int, int]:
    """(transactions, index + sequential scans on the app's tables) of the bench database so far."""
    url = bench_env()["DATABASE_URL"]
    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    with psycopg.connect(url, autocommit=True) as conn:
        scans = conn.execute(
            "SELECT coalesce(sum(coalesce(idx_scan, 0) + coalesce(seq_scan, 0)), 0) FROM pg_stat_user_tables "
            "WHERE relname LIKE 'elicitation_%%'"
        ).fetchone()
    return int(row[0]) if row else 0, int(scans[0]) if scans else 0


async def measure(
    ctx: Context, server: Server, waits: list[tuple[fixtures.Credential, str, str]], idle: float
) -> dict[str, Any]:
    count = 2 * len(waits)
    url = server.ws_url + "/ws/agent/"
    host, port = urlsplit(server.base_url).hostname or "127.0.0.1", server.port
    outcomes: Counter[str] = Counter()
    sockets: list[Any] = []
    gate = asyncio.Semaphore(OPENING)
    await asyncio.sleep(2)
    rss_before = rss_kib(server.pid)

    async def open_socket(agent: fixtures.Credential, request_id: str) -> None:
        # As an agent would: a handshake that failed (refused with 4013, or timed out) is retried with the client
        # library's backoff; what still fails is counted.
        async with gate:
            for attempt in range(HANDSHAKE_ATTEMPTS):
                try:
                    socket = await websockets.connect(
                        url,
                        additional_headers={"Authorization": f"Bearer {agent.key}"},
                        open_timeout=120,
                        ping_interval=None,  # idle means idle
                        max_queue=4,
                    )
                    hello = json.loads(await asyncio.wait_for(socket.recv(), 120))
                    await socket.send(json.dumps({"type": "resume", "after": int(hello.get("cursor", 0))}))
                    await socket.send(json.dumps({"type": "subscribe", "ids": [request_id]}))
                    sockets.append(socket)
                    break
                except Exception as exc:
                    last = attempt == HANDSHAKE_ATTEMPTS - 1
                    outcomes[f"handshake {'failed' if last else 'retried'} {type(exc).__name__}"] += 1
                    if not last:
                        await asyncio.sleep(backoff_delay(attempt))
            ctx.progress.update(len(sockets))

    ctx.progress.start(
        f"opening {count:,} waiters (sockets here, long-polls in a second process)", len(waits)
    )
    opening_started = time.monotonic()
    polls_opened = 0
    # Sockets first, then the long-polls: both at once queued thousands of long-polls' key checks on the server's
    # few database threads ahead of the handshakes (on daphne, then refused after its 5 s connect timeout).
    with contextlib.suppress(
        TimeoutError
    ):  # bounded: a server that stops accepting ends the run with what opened
        await asyncio.wait_for(
            asyncio.gather(*(open_socket(agent, first) for agent, first, _ in waits)), OPENING_LIMIT_SECONDS
        )
    pollers = PollerProcess(host, port, [(agent.key, second) for agent, _, second in waits])
    with contextlib.suppress(TimeoutError):
        polls_opened = await pollers.wait_opened(OPENING_LIMIT_SECONDS)
    if len(sockets) + polls_opened < count:
        outcomes["not opened within the limit"] += count - len(sockets) - polls_opened
    opening = time.monotonic() - opening_started
    ctx.progress.start(f"{count:,} waiters: settling, then idle {idle:.0f} s")
    # Backends hold up to 10 s of counters while idle (PGSTAT_IDLE_INTERVAL): let the opening's flush first.
    await asyncio.sleep(SETTLE_SECONDS)
    rss_open = rss_kib(server.pid)
    db_before, scans_before = await asyncio.to_thread(database_counters)
    cpu_before = cpu_seconds(server.pid)
    ended_before = await pollers.ended()
    began = time.monotonic()
    await asyncio.sleep(idle)
    db_after, scans_after = await asyncio.to_thread(database_counters)
    elapsed = time.monotonic() - began
    ended_in_window = await pollers.ended() - ended_before
    idle_cpu = (cpu_seconds(server.pid) - cpu_before) / elapsed * 100
    open_sockets = sum(1 for s in sockets if s.state.name == "OPEN")
    polling = await pollers.still_polling()  # a long-poll that ended badly ended its task

    ctx.progress.start(f"{count:,} waiters: closing")
    outcomes.update(await pollers.stop())
    for start in range(0, len(sockets), 500):
        await asyncio.gather(*(s.close() for s in sockets[start : start + 500]), return_exceptions=True)
    failures = sum(
        n for outcome, n in outcomes.items() if outcome != "200 pending" and "retried" not in outcome
    )
    return {
        "waiters": count,
        "sockets_open": open_sockets,
        "long_polls_waiting": polling,
        "long_polls_ended_in_window": ended_in_window,
        "waiting_after_idle": open_sockets + polling,
        "db_transactions": db_after - db_before,
        "db_per_s": round((db_after - db_before) / elapsed, 2),
        "table_scans_per_s": round((scans_after - scans_before) / elapsed, 2),
        "idle_seconds": round(elapsed, 1),
        "idle_cpu_percent": round(idle_cpu, 1),
        "rss_before_kib": rss_before,
        "rss_open_kib": rss_open,
        "kib_per_waiter": round((rss_open - rss_before) / max(count, 1), 1),
        "opening_seconds": round(opening, 1),
        "long_poll_outcomes": dict(outcomes),
        "failures": failures,
    }
