"""#12 Answer rules against a noisy neighbour: one agent's intake while another agent sends pathological messages
to a pathological rule.

A queue holds the rule `message: {regex: "^(a+)+$"}`. Under Python's `re`, a 27-character message of a's ending in
`b` held the GIL for seconds per request and stalled every request of the process; on RE2 it is one linear scan.

- Quiet: one agent posts ordinary requests to the queue back to back (one at a time), nothing else.
- Pathological noise: the same, while a second agent posts `"a" * 26 + "b"` to the same queue at a fixed offered
  rate (open loop, so a stalled server cannot slow the noise down and hide the stall).
- Ordinary noise (reported): the same rate of ordinary messages, to tell what the load itself costs.

Phases alternate in rounds in the same server process; the target is the quiet agent's p95 under pathological
noise against its p95 alone. The rate is one a shared 2-core machine serves with room to spare (each request
costs a few ms of server CPU), so a stall, not the load, is what would show.
"""

import asyncio
import json
from collections.abc import Awaitable, Callable

import httpx

from bench import fixtures
from bench.harness import Context, Figure, LoadResult, Report, Server, closed_loop, paced, summary_ms
from elicitation.queue import rules

NAME = "rule_regex"
TITLE = "Answer rules: one agent's intake while another sends pathological messages to a pathological rule"
PREFIX = "bench-rule-regex"
PATTERN = "^(a+)+$"
PATHOLOGICAL = "a" * 26 + "b"  # 27 characters: the message that froze a process
NOISE_PER_SECOND = 5
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}
PHASES = ("quiet", "ordinary noise", "pathological noise")


class Noise:
    """What the noisy agent's open loop got: latencies of its answered requests, failures, requests offered."""

    def __init__(self) -> None:
        self.result = LoadResult()
        self.offered = 0


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    queue = fixtures.create_queue(PREFIX + "-q")
    rules.replace_policy(
        queue,
        {"rules": [{"name": "only a's", "match": {"message": {"regex": PATTERN}}, "action": "decline"}]},
    )
    quiet = fixtures.create_agents(PREFIX + "-quiet", 1, queue)[0]
    noisy = fixtures.create_agents(PREFIX + "-noisy", 1, queue)[0]
    rounds, seconds = (1, 3.0) if ctx.quick else (4, 8.0)
    try:
        with Server(env=UNBOUND_RATES, role="rule-regex", start_timeout=120) as server:
            measured, noise = asyncio.run(measure(ctx, server, queue.slug, quiet, noisy, rounds, seconds))
    finally:
        fixtures.purge(PREFIX)

    p95 = {phase: summary_ms(measured[phase].latencies)["p95_ms"] for phase in PHASES}
    ratio = p95["pathological noise"] / p95["quiet"]
    bad = noise["pathological noise"]
    failures = sum(measured[phase].errors for phase in PHASES) + sum(
        n.offered - n.result.ok for n in noise.values()
    )
    report.add(
        Figure(
            f"intake p95, one agent, while another sends {NOISE_PER_SECOND} pathological messages/s",
            p95["pathological noise"],
            "ms",
            "≤ 1.5x quiet",
            ratio <= 1.5,
            p95["quiet"],
            "same agent, no other traffic",
            ratio,
        ),
        Figure(
            f"intake p95, one agent, while another sends {NOISE_PER_SECOND} ordinary messages/s",
            p95["ordinary noise"],
            "ms",
            "reported",
            None,
            p95["quiet"],
            "same agent, no other traffic",
            p95["ordinary noise"] / p95["quiet"],
        ),
        Figure(
            f"pathological request (`{PATTERN}`, 27-character message) p95",
            summary_ms(bad.result.latencies)["p95_ms"],
            "ms",
            "reported",
            None,
            summary_ms(noise["ordinary noise"].result.latencies)["p95_ms"],
            "an ordinary request at the same rate",
            summary_ms(bad.result.latencies)["p95_ms"]
            / summary_ms(noise["ordinary noise"].result.latencies)["p95_ms"],
        ),
        Figure("intake failures and unanswered requests (both agents)", failures, "", "0", failures == 0),
    )
    report.details = {
        **{
            phase: {**summary_ms(measured[phase].latencies), "rate": round(measured[phase].rate, 1)}
            for phase in PHASES
        },
        **{
            f"noisy agent, {phase}": {
                **summary_ms(n.result.latencies),
                "offered": n.offered,
                "answered": n.result.ok,
            }
            for phase, n in noise.items()
        },
        "error_samples": [s for phase in PHASES for s in measured[phase].error_samples]
        + [s for n in noise.values() for s in n.result.error_samples],
    }
    report.notes.append(
        f"{rounds} rounds of three {seconds:.0f}-s phases (quiet, ordinary noise, pathological noise): the measured "
        f"agent posts one request at a time; the noisy agent's requests are offered at {NOISE_PER_SECOND}/s "
        "whatever the server's pace. Every request is evaluated against the rule and stored pending (none matches)."
    )
    return report


async def measure(
    ctx: Context,
    server: Server,
    slug: str,
    quiet: fixtures.Credential,
    noisy: fixtures.Credential,
    rounds: int,
    seconds: float,
) -> tuple[dict[str, LoadResult], dict[str, Noise]]:
    ordinary = json.dumps({**fixtures.CREATE_BODY, "queue": slug}).encode()
    pathological = json.dumps({**fixtures.CREATE_BODY, "queue": slug, "message": PATHOLOGICAL}).encode()
    noise_bodies = {"ordinary noise": ordinary, "pathological noise": pathological}
    measured = {phase: LoadResult() for phase in PHASES}
    noise = {phase: Noise() for phase in noise_bodies}
    async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:

        async def post(key: str, body: bytes) -> None:
            response = await client.post(
                "/api/v1/requests",
                content=body,
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            )
            if response.status_code != 201 or response.json()["status"] != "pending":
                raise RuntimeError(f"{response.status_code} {response.text[:200]}")

        async def quiet_call(worker: int) -> None:
            await post(quiet.key, ordinary)

        def noisy_call(phase: str) -> Callable[[int], Awaitable[None]]:
            target = noise[phase].result
            body = noise_bodies[phase]

            async def call(index: int) -> None:
                loop = asyncio.get_running_loop()
                began = loop.time()
                try:
                    await post(noisy.key, body)
                except Exception as exc:
                    target.errors += 1
                    target.error_samples = [*target.error_samples, f"{type(exc).__name__}: {exc}"[:300]][:5]
                    return
                target.latencies.append(loop.time() - began)

            return call

        ctx.progress.start("warm-up")
        await closed_loop(quiet_call, workers=1, max_calls=100, max_seconds=10)
        await paced(10, NOISE_PER_SECOND, noisy_call("pathological noise"), max_seconds=2)
        noise["pathological noise"] = Noise()
        for index in range(rounds):
            for phase in PHASES:
                ctx.progress.start(f"round {index + 1}/{rounds}: {phase}")
                background = None
                if phase in noise:
                    count = int(seconds * NOISE_PER_SECOND)
                    background = asyncio.ensure_future(
                        paced(count, NOISE_PER_SECOND, noisy_call(phase), max_seconds=seconds)
                    )
                part = await closed_loop(
                    quiet_call, workers=1, max_calls=100_000, max_seconds=seconds, progress=ctx.progress
                )
                if background is not None:
                    noise[phase].offered += await background
                total = measured[phase]
                total.latencies += part.latencies
                total.errors += part.errors
                total.error_samples = (total.error_samples + part.error_samples)[:5]
                total.seconds += part.seconds
        ctx.progress.finish()
    return measured, noise
