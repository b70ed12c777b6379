"""#15 Which ASGI server: the push, reconnect-storm and idle-socket measurements on each server, side by side.

`python -m bench servers [--servers uvicorn,daphne,granian] [--rounds 2] [--parts sockets,push,storm]`

The same code, settings and load on every server of harness.SERVER_KINDS: uvicorn (as deployed), the daphne
command line, and granian. Each part runs its servers in turn, round after round (A, B, C, A, B, C), so
the load of whatever else shares the machine falls on all of them alike:

- push (#3's target rows): 5,000 idle agent sockets on one process of the server, answers committed at 100/s
  through another; WebSocket push latency from commit to frame, and each process's CPU per answer.
- storm (#11): two processes of the server behind the loopback proxy, one killed with 2,500 agents on it; time
  until every agent resumed, anything lost, duplicated or answered 5xx, the survivor's answers during the storm
  against before, and its CPU during the storm per reconnected agent (the answers offered meanwhile, the same on
  every server, included).
- sockets (#4): 5,000 idle sockets on one process; CPU per handshake, memory per socket, CPU while idle (one
  round: these are CPU and memory counts, which the machine's load hardly moves).

Latencies on a shared 2-core machine move with its load (the load average before and after each run is in the
notes); CPU per operation and counts move little. Every run's figures are also written to
bench/results/servers-runs.json as they come, so a run stopped midway keeps what it measured.
"""

import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

from bench import fixtures, push, sockets, storm
from bench.harness import (
    RESULTS,
    SERVER_KINDS,
    SERVER_LABELS,
    Context,
    Figure,
    Report,
    Server,
    load_average,
    percentile,
    raise_fd_limit,
)

NAME = "servers"
TITLE = "Which ASGI server: push, reconnect storm and idle sockets on each"
PARTS = ("sockets", "push", "storm")
ROUNDS = 2
PUSH_PREFIX = "bench-servers-push"
SOCKETS_PREFIX = "bench-servers-sockets"
RUNS_FILE = RESULTS / "servers-runs.json"

Runs = dict[str, dict[str, list[dict[str, Any]]]]  # part -> server kind -> one result per round


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    raise_fd_limit()
    kinds: list[str] = ctx.options.get("servers") or list(SERVER_KINDS)
    rounds: int = ctx.options.get("rounds") or (1 if ctx.quick else ROUNDS)
    parts: list[str] = ctx.options.get("parts") or list(PARTS)
    runs: Runs = {part: {kind: [] for kind in kinds} for part in parts}
    measure: dict[str, Callable[[Context, list[str], int, Runs], None]] = {
        "sockets": measure_sockets,
        "push": measure_push,
        "storm": measure_storm,
    }
    for part in parts:
        measure[part](ctx, kinds, rounds, runs)

    baseline = kinds[0]
    if "push" in runs:
        report.add(*push_figures(runs["push"], baseline))
    if "storm" in runs:
        report.add(*storm_figures(runs["storm"], baseline))
    if "sockets" in runs:
        report.add(*socket_figures(runs["sockets"], baseline, 500 if ctx.quick else sockets.SOCKETS))
    report.notes += run_notes(runs)
    report.details = {
        part: {kind: [trim(r) for r in results] for kind, results in by_kind.items()}
        for part, by_kind in runs.items()
    }
    return report


def save(runs: Runs) -> None:
    RUNS_FILE.parent.mkdir(parents=True, exist_ok=True)
    RUNS_FILE.write_text(json.dumps(runs, indent=1, default=str) + "\n")


def attempt(ctx: Context, what: str, measurement: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One measurement; a server that fails it (refuses the app, exits) is recorded as failed, not fatal."""
    load_before, began = load_average(), time.monotonic()
    try:
        result = measurement()
    except Exception as exc:
        ctx.progress.note(f"{what} failed: {type(exc).__name__}: {exc}"[:300])
        result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    result.setdefault("load_average", [load_before, load_average()])
    result["seconds"] = round(time.monotonic() - began)
    return result


# --- the parts ---------------------------------------------------------------------------------------------------


def measure_push(ctx: Context, kinds: list[str], rounds: int, runs: Runs) -> None:
    idle = 200 if ctx.quick else push.IDLE_SOCKETS
    ws_count, lp_count = (200, 100) if ctx.quick else (1000, 300)
    fixtures.purge(PUSH_PREFIX)
    try:
        queue = fixtures.create_queue(PUSH_PREFIX)
        ctx.progress.start(f"creating {idle + push.WAITING_AGENTS} agents")
        idle_agents = fixtures.create_agents(PUSH_PREFIX + "-idle", idle, queue)
        waiting = fixtures.create_agents(PUSH_PREFIX + "-wait", push.WAITING_AGENTS, queue)
        reviewer = fixtures.create_reviewers(PUSH_PREFIX, 1, queue)[0]
        for number in range(rounds):
            for kind in kinds:
                ctx.progress.note(f"push, round {number + 1}: {SERVER_LABELS[kind]}")
                runs["push"][kind].append(
                    attempt(
                        ctx,
                        f"push on {kind}",
                        lambda kind=kind: push.two_processes(  # type: ignore[misc]
                            ctx, kind, queue, idle_agents, waiting, reviewer.id, ws_count, lp_count
                        ),
                    )
                )
                save(runs)
    finally:
        fixtures.purge(PUSH_PREFIX)


def measure_storm(ctx: Context, kinds: list[str], rounds: int, runs: Runs) -> None:
    count = 500 if ctx.quick else storm.AGENTS
    for number in range(rounds):
        for kind in kinds:
            ctx.progress.note(f"storm, round {number + 1}: {SERVER_LABELS[kind]}")
            runs["storm"][kind].append(
                attempt(ctx, f"storm on {kind}", lambda kind=kind: storm.storm_on(ctx, kind, count))  # type: ignore[misc]
            )
            save(runs)


def measure_sockets(ctx: Context, kinds: list[str], rounds: int, runs: Runs) -> None:
    count = 500 if ctx.quick else sockets.SOCKETS
    fixtures.purge(SOCKETS_PREFIX)
    try:
        queue = fixtures.create_queue(SOCKETS_PREFIX)
        ctx.progress.start(f"creating {count:,} agents")
        agents = fixtures.create_agents(SOCKETS_PREFIX, count, queue)

        def on(kind: str) -> dict[str, Any]:
            with Server(kind, start_timeout=120) as server:
                return asyncio.run(sockets.measure(ctx, server, agents, sockets.idle_seconds(ctx)))

        for kind in kinds:
            ctx.progress.note(f"sockets: {SERVER_LABELS[kind]}")
            runs["sockets"][kind].append(attempt(ctx, f"sockets on {kind}", lambda kind=kind: on(kind)))  # type: ignore[misc]
            save(runs)
    finally:
        fixtures.purge(SOCKETS_PREFIX)


# --- the rows ----------------------------------------------------------------------------------------------------


def measured(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in results if "error" not in r]


def worst(values: list[float], higher_is_worse: bool = True) -> float:
    if not values:
        return float("nan")
    return max(values) if higher_is_worse else min(values)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def versus(value: float, base: float | None) -> float | None:
    return value / base if base else None


def push_figures(by_kind: dict[str, list[dict[str, Any]]], baseline: str) -> list[Figure]:
    def p99(r: dict[str, Any]) -> float:
        return percentile(r["ws"], 99) * 1000

    def p50(r: dict[str, Any]) -> float:
        return percentile(r["ws"], 50) * 1000

    summary: dict[str, dict[str, float]] = {}
    for kind, results in by_kind.items():
        ok = measured(results)
        summary[kind] = {
            "p99": worst([p99(r) for r in ok]),
            "p50": median([p50(r) for r in ok]),
            "sockets_cpu": median([r["cpu_ms_per_answer"]["sockets"] for r in ok]),
            "answers_cpu": median([r["cpu_ms_per_answer"]["answers"] for r in ok]),
            "missing": sum(r["ws_missing"] + r["lp_missing"] for r in ok) + 1000 * (len(results) - len(ok)),
            "rate": worst([r["rate"] for r in ok], higher_is_worse=False),
            "idle_open": worst([r["idle_open"] for r in ok], higher_is_worse=False),
        }
    base = summary[baseline]
    base_label = SERVER_LABELS[baseline]
    figures = []
    for kind, s in summary.items():
        label, rounds = SERVER_LABELS[kind], len(by_kind[kind])
        figures += [
            Figure(
                f"{label}: WebSocket push p99, 5,000 idle sockets (worst of {rounds})",
                s["p99"],
                "ms",
                "≤ 50 ms",
                s["p99"] <= 50,
                base["p99"],
                base_label,
                versus(s["p99"], base["p99"]),
            ),
            Figure(
                f"{label}: WebSocket push p50 (median of {rounds})",
                s["p50"],
                "ms",
                "reported",
                None,
                base["p50"],
                base_label,
                versus(s["p50"], base["p50"]),
            ),
            Figure(
                f"{label}: sockets process CPU per pushed answer",
                s["sockets_cpu"],
                "ms",
                "reported",
                None,
                base["sockets_cpu"],
                base_label,
                versus(s["sockets_cpu"], base["sockets_cpu"]),
            ),
            Figure(
                f"{label}: answering process CPU per answer",
                s["answers_cpu"],
                "ms",
                "reported",
                None,
                base["answers_cpu"],
                base_label,
                versus(s["answers_cpu"], base["answers_cpu"]),
            ),
            Figure(
                f"{label}: push: answers never pushed, failed runs count 1,000",
                s["missing"],
                "",
                "0",
                s["missing"] == 0,
            ),
            Figure(
                f"{label}: push: answers committed per second (offered 100/s, worst)",
                s["rate"],
                "/s",
                "≥ 95/s",
                s["rate"] >= 95,
            ),
        ]
    return figures


def storm_figures(by_kind: dict[str, list[dict[str, Any]]], baseline: str) -> list[Figure]:
    summary: dict[str, dict[str, float]] = {}
    for kind, results in by_kind.items():
        ok = measured(results)
        summary[kind] = {
            "p99": worst([percentile(r["resume_seconds"], 99) for r in ok if r["resume_seconds"]]),
            "faults": sum(
                r["not_resumed"]
                + r["outbox"]["lost"]
                + r["outbox"]["duplicated_on_one_socket"]
                + r["proxy"].get("5xx", 0)
                + r["answer_5xx"]
                for r in ok
            )
            + 1000 * (len(results) - len(ok)),
            "answers": worst(
                [r["rate_during"] / r["rate_before"] for r in ok if r["rate_before"]], higher_is_worse=False
            ),
            "answer_p99": worst([r["answer_p99_during_ms"] for r in ok]),
            "cpu": median([r["survivor_cpu_ms_per_reconnect"] for r in ok]),
        }
    base = summary[baseline]
    base_label = SERVER_LABELS[baseline]
    figures = []
    for kind, s in summary.items():
        label, rounds = SERVER_LABELS[kind], len(by_kind[kind])
        figures += [
            Figure(
                f"{label}: storm: kill → every cut-off agent resumed, p99 (worst of {rounds})",
                s["p99"],
                "s",
                f"≤ {storm.RESUME_P99_TARGET:.0f} s",
                s["p99"] <= storm.RESUME_P99_TARGET,
                base["p99"],
                base_label,
                versus(s["p99"], base["p99"]),
            ),
            Figure(
                f"{label}: storm: never resumed + lost + duplicated on a socket + 5xx (failed runs count 1,000)",
                s["faults"],
                "",
                "0",
                s["faults"] == 0,
            ),
            Figure(
                f"{label}: storm: survivor's answers/s during ÷ before the kill (worst)",
                s["answers"],
                "x",
                "≥ 0.9x",
                s["answers"] >= 0.9,
                base["answers"],
                base_label,
                versus(s["answers"], base["answers"]),
            ),
            Figure(
                f"{label}: storm: answer p99 on the survivor during the storm (worst)",
                s["answer_p99"],
                "ms",
                "reported",
                None,
                base["answer_p99"],
                base_label,
                versus(s["answer_p99"], base["answer_p99"]),
            ),
            Figure(
                f"{label}: storm: survivor CPU during the storm per reconnected agent (answers included)",
                s["cpu"],
                "ms",
                "reported",
                None,
                base["cpu"],
                base_label,
                versus(s["cpu"], base["cpu"]),
            ),
        ]
    return figures


def socket_figures(by_kind: dict[str, list[dict[str, Any]]], baseline: str, count: int) -> list[Figure]:
    summary: dict[str, dict[str, float]] = {}
    for kind, results in by_kind.items():
        ok = measured(results)
        summary[kind] = {
            "cpu": median([r["server_cpu_ms_per_handshake"] for r in ok]),
            "kib": median([r["kib_per_socket"] for r in ok]),
            "idle": median([r["idle_cpu_percent"] for r in ok]),
            "faults": sum(r["failed"] + (count - r["open_after_idle"]) for r in ok)
            + count * (len(results) - len(ok)),
        }
    base = summary[baseline]
    base_label = SERVER_LABELS[baseline]
    figures = []
    for kind, s in summary.items():
        label = SERVER_LABELS[kind]
        figures += [
            Figure(
                f"{label}: sockets: server CPU per handshake",
                s["cpu"],
                "ms",
                "reported",
                None,
                base["cpu"],
                base_label,
                versus(s["cpu"], base["cpu"]),
            ),
            Figure(
                f"{label}: sockets: RSS per socket",
                s["kib"],
                "KiB",
                f"≤ {sockets.KIB_TARGET} KiB",
                s["kib"] <= sockets.KIB_TARGET,
                base["kib"],
                base_label,
                versus(s["kib"], base["kib"]),
            ),
            Figure(
                f"{label}: sockets: server CPU while {count:,} sockets idle",
                s["idle"],
                "% of a core",
                "reported",
                None,
                base["idle"],
                base_label,
                versus(s["idle"], base["idle"]),
            ),
            Figure(
                f"{label}: sockets: failed handshakes + closed while idle",
                s["faults"],
                "",
                "0",
                s["faults"] == 0,
            ),
        ]
    return figures


def run_notes(runs: Runs) -> list[str]:
    """Every run's own figures, in the order they ran, with the machine's load average before → after."""

    def load(r: dict[str, Any]) -> str:
        before, after = r["load_average"]
        return f"load {before}→{after}"

    def push_run(r: dict[str, Any]) -> str:
        cpu = r["cpu_ms_per_answer"]
        return (
            f"p50 {percentile(r['ws'], 50) * 1000:.2f} ms, p99 {percentile(r['ws'], 99) * 1000:.1f} ms, "
            f"{r['rate']:.0f} answers/s, CPU/answer {cpu['sockets']} + {cpu['answers']} ms"
        )

    def storm_run(r: dict[str, Any]) -> str:
        resume = r["resume_seconds"]
        return (
            f"resume p99 {percentile(resume, 99):.1f} s (max {max(resume, default=float('nan')):.1f} s), "
            f"answers {r['rate_during']}/{r['rate_before']} per s, answer p99 during {r['answer_p99_during_ms']} ms, "
            f"{r['survivor_cpu_ms_per_reconnect']} ms CPU per reconnect"
        )

    def sockets_run(r: dict[str, Any]) -> str:
        return (
            f"{r['server_cpu_ms_per_handshake']} ms CPU per handshake, {r['kib_per_socket']} KiB per socket, "
            f"idle {r['idle_cpu_percent']} % of a core, {r['failed']} failed"
        )

    describe = {"push": push_run, "storm": storm_run, "sockets": sockets_run}
    notes = []
    for part, by_kind in runs.items():
        rounds = max((len(results) for results in by_kind.values()), default=0)
        for number in range(rounds):
            cells = []
            for kind, results in by_kind.items():
                if number < len(results):
                    r = results[number]
                    what = r["error"] if "error" in r else describe[part](r)
                    cells.append(f"{SERVER_LABELS[kind]}: {what} ({load(r)}, {r['seconds']} s)")
            notes.append(f"{part}, round {number + 1}: " + "; ".join(cells))
    return notes


def trim(result: dict[str, Any]) -> dict[str, Any]:
    """A run's figures without the raw latency lists (summarised in the rows and notes)."""
    return {k: v for k, v in result.items() if k not in {"ws", "lp", "hop", "resume_seconds", "ws_slowest"}}
