"""#1 Intake: `POST /api/v1/requests` at 16 concurrent clients against a plain Django view doing the same insert.

Both run in the same server process, alternating in rounds so a neighbour's burst of CPU hits both alike.
Per-request cost is the server process's CPU time per request (/proc utime+stime over the round): unlike
wall-clock throughput, it does not move when another process takes a core away. It is guarded loosely (≤ 3x the bare
insert: what a create adds, its checks, audit row, rules and notices, is the product), and the throughput reported.
"""

import asyncio
import json

import httpx

from bench import fixtures
from bench.harness import Context, Figure, LoadResult, Report, Server, closed_loop, summary_ms

NAME = "intake"
TITLE = "Intake: POST /api/v1/requests"
CLIENTS = 16
PREFIX = "bench-intake"


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    queue = fixtures.create_queue(PREFIX)
    agents = fixtures.create_agents(PREFIX, CLIENTS, queue)
    rounds, seconds = (1, 2.0) if ctx.quick else (3, 5.0)
    try:
        # A loaded machine (other benchmarks, test runs) can take the server past the default 30 s to start.
        server = Server().start(timeout=120)
        try:
            api, base = asyncio.run(measure(ctx, server, queue.pk, agents, rounds, seconds))
        finally:
            server.stop()
    finally:
        fixtures.purge(PREFIX)

    cost_ratio = api.cpu_ms_per_call / base.cpu_ms_per_call
    report.add(
        Figure(
            "intake throughput, 16 clients",
            api.rate,
            "req/s",
            "reported",
            None,
            base.rate,
            "plain JsonResponse insert",
            api.rate / base.rate,
        ),
        Figure(
            "intake server CPU per request",
            api.cpu_ms_per_call,
            "ms",
            "≤ 3x baseline",
            cost_ratio <= 3.0,
            base.cpu_ms_per_call,
            "plain JsonResponse insert",
            cost_ratio,
        ),
        Figure(
            "intake p95 latency, 16 clients",
            summary_ms(api.latencies)["p95_ms"],
            "ms",
            "reported",
            None,
            summary_ms(base.latencies)["p95_ms"],
            "plain JsonResponse insert",
            summary_ms(api.latencies)["p95_ms"] / summary_ms(base.latencies)["p95_ms"],
        ),
        Figure("intake failed requests", api.errors + base.errors, "", "0", api.errors + base.errors == 0),
    )
    report.details = {
        "api": {**summary_ms(api.latencies), "rate": round(api.rate, 1), "errors": api.errors},
        "baseline": {**summary_ms(base.latencies), "rate": round(base.rate, 1), "errors": base.errors},
        "error_samples": api.error_samples + base.error_samples,
        "rounds": rounds,
        "seconds_per_round": seconds,
    }
    report.notes.append(
        f"{rounds} alternating rounds of {seconds:.0f} s each (API, then baseline), 16 keep-alive clients in one "
        "asyncio process with httpx; the load generator shares the 2 cores with the server."
    )
    return report


async def measure(
    ctx: Context,
    server: Server,
    queue_id: int,
    agents: list[fixtures.Credential],
    rounds: int,
    seconds: float,
) -> tuple[LoadResult, LoadResult]:
    body = json.dumps({**fixtures.CREATE_BODY, "queue": queue_id}).encode()
    api_body = json.dumps({**fixtures.CREATE_BODY, "queue": PREFIX}).encode()
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=server.base_url, limits=limits, timeout=30) as client:

        async def create(worker: int) -> None:
            agent = agents[worker % len(agents)]
            response = await client.post(
                "/api/v1/requests",
                content=api_body,
                headers={"Authorization": f"Bearer {agent.key}", "Content-Type": "application/json"},
            )
            if response.status_code != 201:
                raise RuntimeError(f"{response.status_code} {response.text[:200]}")

        async def baseline(worker: int) -> None:
            agent = agents[worker % len(agents)]
            response = await client.post(
                "/bench/baseline/requests",
                content=body,
                headers={
                    "X-Bench-Queue": str(queue_id),
                    "X-Bench-Agent": str(agent.id),
                    "Content-Type": "application/json",
                },
            )
            if response.status_code != 201:
                raise RuntimeError(f"{response.status_code} {response.text[:200]}")

        # Warm both paths (imports, connections, caches) before anything is counted.
        ctx.progress.start("warm-up")
        await closed_loop(create, workers=CLIENTS, max_calls=200, max_seconds=20)
        await closed_loop(baseline, workers=CLIENTS, max_calls=200, max_seconds=20)
        api, base = LoadResult(), LoadResult()
        for index in range(rounds):
            for label, call, total in (("api", create, api), ("baseline", baseline, base)):
                ctx.progress.start(f"round {index + 1}/{rounds} {label}")
                part = await closed_loop(
                    call,
                    workers=CLIENTS,
                    max_calls=100_000,
                    max_seconds=seconds,
                    progress=ctx.progress,
                    server_pid=server.pid,
                )
                total.latencies += part.latencies
                total.errors += part.errors
                total.error_samples += part.error_samples
                total.seconds += part.seconds
                total.server_cpu += part.server_cpu
        ctx.progress.finish()
    return api, base
