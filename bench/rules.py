"""#8 Answer rules: what 1,000 rules on a queue cost at intake, and how fast a scripted queue's answer reaches the
waiting agent.

- Intake CPU: `POST /api/v1/requests` at 16 concurrent clients into a queue with 1,000 rules (900 naming a tool,
  100 matching on message and arguments, none matching these requests, so every request is evaluated against
  the whole set and stored pending) against a queue without a policy, alternating in rounds in the same server
  process. Per-request cost is the server's CPU time per request (/proc utime+stime), as in #1.
- Scripted answer: an agent holds its WebSocket (`resume`d, so it hears every event); each request goes to a
  scripted queue whose rule answers it at intake, one at a time. The decision commits before the 201 is sent, so
  the target is the `completed` frame's lag behind that response; POST-sent-to-frame is reported beside a plain
  intake round trip (a queue without a policy) measured alternately.
"""

import asyncio
import json
import time
from typing import Any

import httpx
import websockets

from bench import fixtures
from bench.harness import Context, Figure, LoadResult, Report, Server, closed_loop, percentile, summary_ms
from elicitation.queue import rules

NAME = "rules"
TITLE = "Answer rules: intake with 1,000 rules, scripted answer push"
PREFIX = "bench-rules"
CLIENTS = 16
RULES = 1000
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}


def rule_file(count: int) -> dict[str, Any]:
    """`count` rules that never match the benchmark's requests: 90% name another tool, 10% look at every request."""
    rules: list[dict[str, Any]] = []
    for index in range(count):
        if index % 10 == 9:
            match: dict[str, Any] = {
                "message": {"regex": f"^Rollback build {index}\\b"},
                "arguments": {"build": {"gt": 10_000_000 + index}},
            }
        else:
            match = {"tool": f"tool-{index}", "arguments": {"build": {"lte": index}}}
        rules.append({"name": f"rule {index}", "match": match, "action": "decline"})
    return {"mode": "human", "rules": rules}


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    plain = fixtures.create_queue(PREFIX + "-none")
    ruled = fixtures.create_queue(PREFIX + "-1000")
    scripted = fixtures.create_queue(PREFIX + "-scripted")
    rules.replace_policy(ruled, rule_file(RULES))
    rules.replace_policy(
        scripted,
        {
            "mode": "scripted",
            "rules": [
                {
                    "name": "approve builds",
                    "match": {"tool": "deploy"},
                    "action": "accept",
                    "content": {"approve": True},
                }
            ],
        },
    )
    agents = fixtures.create_agents(PREFIX, CLIENTS, plain)
    for queue in (ruled, scripted):
        queue.agents.add(*[agent.id for agent in agents])
    rounds, seconds = (1, 2.0) if ctx.quick else (3, 5.0)
    samples = 50 if ctx.quick else 300
    try:
        with Server(env=UNBOUND_RATES) as server:
            none, thousand = asyncio.run(measure_intake(ctx, server, agents, rounds, seconds))
            pushes, lag, plain, missing = asyncio.run(measure_scripted(ctx, server, agents[0], samples))
    finally:
        fixtures.purge(PREFIX)

    ratio = thousand.cpu_ms_per_call / none.cpu_ms_per_call
    p95 = percentile(pushes, 95) * 1000 if pushes else float("nan")
    plain_p95 = percentile(plain, 95) * 1000 if plain else float("nan")
    lag_p95 = percentile(lag, 95) * 1000 if lag else float("nan")
    report.add(
        Figure(
            "intake CPU per request, 1,000 rules",
            thousand.cpu_ms_per_call,
            "ms",
            "≤ 1.2x no rules",
            ratio <= 1.2,
            none.cpu_ms_per_call,
            "same queue shape, no policy",
            ratio,
        ),
        Figure(
            "intake p95 latency, 1,000 rules, 16 clients",
            summary_ms(thousand.latencies)["p95_ms"],
            "ms",
            "reported",
            None,
            summary_ms(none.latencies)["p95_ms"],
            "no policy",
            summary_ms(thousand.latencies)["p95_ms"] / summary_ms(none.latencies)["p95_ms"],
        ),
        Figure(
            "scripted answer frame after the intake response, p95",
            lag_p95,
            "ms",
            "≤ 50 ms",
            lag_p95 <= 50,
        ),
        Figure(
            "scripted: POST sent to answer frame, p95",
            p95,
            "ms",
            "reported",
            None,
            plain_p95,
            "plain intake round trip, no policy",
            p95 / plain_p95,
        ),
        Figure(
            "intake failures and answers never pushed",
            none.errors + thousand.errors + missing,
            "",
            "0",
            none.errors + thousand.errors + missing == 0,
        ),
    )
    report.details = {
        "no_rules": {
            **summary_ms(none.latencies),
            "rate": round(none.rate, 1),
            "cpu_ms": none.cpu_ms_per_call,
        },
        "rules_1000": {
            **summary_ms(thousand.latencies),
            "rate": round(thousand.rate, 1),
            "cpu_ms": thousand.cpu_ms_per_call,
        },
        "scripted_push": {**summary_ms(pushes), "samples": len(pushes), "missing": missing},
        "scripted_frame_after_response": summary_ms(lag),
        "plain_intake_round_trip": summary_ms(plain),
        "error_samples": none.error_samples + thousand.error_samples,
    }
    report.notes.append(
        f"{rounds} alternating rounds of {seconds:.0f} s (no policy, then 1,000 rules) at {CLIENTS} clients; "
        f"rules are compiled once per process and rules version and indexed by tool name. {len(pushes)} scripted "
        "answers, one at a time: the frame's lag behind the 201 (the decision commits before the response is sent) is the "
        "target; POST-to-frame is reported against a plain intake round trip measured alternately."
    )
    return report


async def measure_intake(
    ctx: Context, server: Server, agents: list[fixtures.Credential], rounds: int, seconds: float
) -> tuple[LoadResult, LoadResult]:
    bodies = {
        label: json.dumps({**fixtures.CREATE_BODY, "queue": f"{PREFIX}-{label}"}).encode()
        for label in ("none", "1000")
    }
    limits = httpx.Limits(max_connections=CLIENTS, max_keepalive_connections=CLIENTS)
    async with httpx.AsyncClient(base_url=server.base_url, limits=limits, timeout=30) as client:

        def poster(label: str) -> Any:
            async def create(worker: int) -> None:
                response = await client.post(
                    "/api/v1/requests",
                    content=bodies[label],
                    headers={
                        "Authorization": f"Bearer {agents[worker].key}",
                        "Content-Type": "application/json",
                    },
                )
                if response.status_code != 201 or response.json()["status"] != "pending":
                    raise RuntimeError(f"{response.status_code} {response.text[:200]}")

            return create

        ctx.progress.start("warm-up")
        for label in bodies:
            await closed_loop(poster(label), workers=CLIENTS, max_calls=200, max_seconds=20)
        totals = {label: LoadResult() for label in bodies}
        for index in range(rounds):
            for label in bodies:
                ctx.progress.start(f"round {index + 1}/{rounds} {label} rules")
                part = await closed_loop(
                    poster(label),
                    workers=CLIENTS,
                    max_calls=100_000,
                    max_seconds=seconds,
                    progress=ctx.progress,
                    server_pid=server.pid,
                )
                total = totals[label]
                total.latencies += part.latencies
                total.errors += part.errors
                total.error_samples += part.error_samples
                total.seconds += part.seconds
                total.server_cpu += part.server_cpu
        ctx.progress.finish()
    return totals["none"], totals["1000"]


async def read_frames(socket: Any, arrivals: dict[str, float], changed: asyncio.Event) -> None:
    """Note when each `completed` frame arrives (it may come before the POST's own response)."""
    while True:
        message = json.loads(await socket.recv())
        if message.get("type") == "completed":
            arrivals[str(message.get("id"))] = time.perf_counter()
            changed.set()


async def arrival(request_id: str, arrivals: dict[str, float], changed: asyncio.Event) -> float:
    while request_id not in arrivals:
        changed.clear()
        await changed.wait()
    return arrivals[request_id]


async def measure_scripted(
    ctx: Context, server: Server, agent: fixtures.Credential, samples: int
) -> tuple[list[float], list[float], list[float], int]:
    """Per scripted request: POST sent -> `completed` frame, and the frame's lag behind the 201 response (0 when
    the frame came first). Plain intake round trips (a queue without a policy) alternate with them as the same-run
    baseline."""
    body = json.dumps({**fixtures.CREATE_BODY, "queue": f"{PREFIX}-scripted"}).encode()
    plain = json.dumps({**fixtures.CREATE_BODY, "queue": f"{PREFIX}-none"}).encode()
    headers = {"Authorization": f"Bearer {agent.key}", "Content-Type": "application/json"}
    to_frame: list[float] = []
    lag: list[float] = []
    baseline: list[float] = []
    missing = 0
    arrivals: dict[str, float] = {}
    changed = asyncio.Event()
    socket = await websockets.connect(
        server.ws_url + "/ws/agent/", additional_headers=headers, open_timeout=30, max_queue=None
    )
    reader: asyncio.Task[None] | None = None
    try:
        hello = json.loads(await asyncio.wait_for(socket.recv(), 30))
        await socket.send(json.dumps({"type": "resume", "after": hello.get("cursor", 0)}))
        reader = asyncio.ensure_future(read_frames(socket, arrivals, changed))
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            ctx.progress.start("scripted answers", samples)
            for index in range(samples):
                began = time.perf_counter()
                await client.post("/api/v1/requests", content=plain, headers=headers)
                baseline.append(time.perf_counter() - began)
                sent = time.perf_counter()
                response = await client.post("/api/v1/requests", content=body, headers=headers)
                answered = time.perf_counter()
                try:
                    frame_at = await asyncio.wait_for(arrival(response.json()["id"], arrivals, changed), 5)
                except TimeoutError:
                    missing += 1
                    continue
                to_frame.append(frame_at - sent)
                lag.append(max(0.0, frame_at - answered))
                ctx.progress.update(index + 1)
                await asyncio.sleep(0.02)
    finally:
        if reader is not None:
            reader.cancel()
        await socket.close()
    return to_frame, lag, baseline, missing
