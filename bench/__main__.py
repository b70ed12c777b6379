"""`python -m bench [NAME ...] [--quick]`: run benchmarks, write bench/results/latest.json and BENCHMARKS.md.

Names: intake, claim, push, sockets, queue, layer, reach, rules, reviewer, waiting, storm, rule_regex, gateway, idle,
expected_wait (default: all, in that order), and servers (only when named: `--servers`, `--rounds`, `--parts`;
bench/servers.py).
`--quick` runs each with smaller counts to check the harness works; its figures are not written to BENCHMARKS.md.
`--render` only rewrites BENCHMARKS.md from the last full run's figures and bench/findings.md (after editing the findings).
The environment decides where it runs: DATABASE_URL (default the dedicated rh_bench database) and
REDIS_URL (default Redis db 8); servers under test are started on free loopback ports.
"""

import argparse
import importlib
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

from bench import harness, serve

BENCHMARKS = {
    "intake": "bench.intake",
    "claim": "bench.claim",
    "push": "bench.push",
    "sockets": "bench.sockets",
    "queue": "bench.queue_scale",
    "layer": "bench.channel_layer",
    "reach": "bench.reach",
    "rules": "bench.rules",
    "reviewer": "bench.reviewer",
    # Added after the first nine, so the numbers bench/findings.md cites stay put.
    "waiting": "bench.waiting",
    "storm": "bench.storm",
    "rule_regex": "bench.rule_regex",
    "gateway": "bench.gateway",
    "idle": "bench.idle",
    "servers": "bench.servers",
    "expected_wait": "bench.expected_wait",
}
# Run only when named: the comparison of ASGI servers repeats the push, storm and sockets benches on each (~40 min).
ON_DEMAND = {"servers"}
# The whole run, all benchmarks but those on demand (claim, push, reach and waiting ~4-5 min each).
BUDGET_SECONDS = 30 * 60


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "names",
        nargs="*",
        help=f"benchmarks to run: {', '.join(BENCHMARKS)} (default all but {', '.join(ON_DEMAND)})",
    )
    parser.add_argument("--quick", action="store_true", help="small counts; results go to quick.json only")
    parser.add_argument(
        "--profile", action="store_true", help="sample each server under test with py-spy (bench/results/)"
    )
    parser.add_argument(
        "--gil",
        action="store_true",
        help="with --profile: sample only the thread holding the GIL (where the CPU goes, not the waits)",
    )
    parser.add_argument(
        "--servers",
        type=server_kinds,
        help=f"servers: the ASGI servers to compare, comma-separated (default {','.join(harness.SERVER_KINDS)})",
    )
    parser.add_argument("--rounds", type=int, help="servers: rounds of each server in turn (default 2)")
    parser.add_argument(
        "--parts",
        type=lambda text: text.split(","),
        help="servers: which of sockets,push,storm (default all)",
    )
    parser.add_argument(
        "--render",
        action="store_true",
        help="only rewrite BENCHMARKS.md from bench/results/latest.json and bench/findings.md",
    )
    args = parser.parse_args(argv)
    if args.render:
        render_markdown(harness.RESULTS / "latest.json")
        return 0
    names = args.names or [name for name in BENCHMARKS if name not in ON_DEMAND]
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")

    # SIGTERM (timeout, Ctrl-C from a wrapper) unwinds like an exception, so every benchmark's `finally`
    # stops its server and deletes its rows.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    harness.refuse_shared_database()
    harness.raise_fd_limit()
    harness.ensure_database()
    harness.setup_django()

    info = {**harness.machine(), "date": harness.now_iso()}
    sys.stderr.write(
        f"bench: {', '.join(names)} on {info['cores']} cores ({info['cpu']}), load {info['load_average']}, "
        f"CPU probe {harness.cpu_probe_ms():g} ms ({harness.QUIET_CPU_PROBE_MS} at the machine's usual speed)\n"
    )
    started = time.monotonic()
    reports: list[harness.Report] = []
    if os.environ.get("BENCH_GC_LOG") in ("1", "types"):
        serve.log_full_collections()  # the load generator's own pauses delay what it measures
    results_file = harness.RESULTS / ("quick.json" if args.quick else "latest.json")
    path = results_file
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        progress = harness.Progress(name)
        sys.stderr.write(f"\n== {module.TITLE}\n")
        load_before, probe_before = harness.load_average(), harness.cpu_probe_ms()
        began = time.monotonic()
        if args.profile:
            os.environ["BENCH_PROFILE"] = name
            if args.gil:
                os.environ["BENCH_PROFILE_GIL"] = "1"
        try:
            options = {"servers": args.servers, "rounds": args.rounds, "parts": args.parts}
            report = module.run(harness.Context(progress=progress, quick=args.quick, options=options))
        except Exception as exc:  # one broken benchmark must not lose the others' figures
            traceback.print_exc()
            report = harness.Report(name, module.TITLE, error=f"{type(exc).__name__}: {exc}"[:300])
        progress.finish()
        report.seconds = time.monotonic() - began
        report.load_before, report.load_after = load_before, harness.load_average()
        report.cpu_probe_before_ms, report.cpu_probe_after_ms = probe_before, harness.cpu_probe_ms()
        reports.append(report)
        for figure in report.figures:
            mark = {True: "ok  ", False: "MISS", None: "    "}[figure.met]
            ratio = f" ({figure.ratio:.2f}x baseline)" if figure.ratio is not None else ""
            sys.stderr.write(
                f"  {mark} {figure.label}: {figure.cell(figure.value)} {figure.unit}{ratio}  target {figure.target}\n"
            )
        if report.error:
            sys.stderr.write(f"  FAILED: {report.error}\n")
        # Saved as each benchmark ends: a run stopped later (a hang, a timeout) keeps what it measured.
        path = harness.write_results([report], info, results_file)

    total = time.monotonic() - started
    if not args.quick:
        render_markdown(path)
    sys.stderr.write(f"\nbench: {total:.0f} s (budget {BUDGET_SECONDS} s); figures in {path}\n")
    return 0 if all(r.met for r in reports) else 1


def server_kinds(text: str) -> list[str]:
    kinds = text.split(",")
    unknown = [kind for kind in kinds if kind not in harness.SERVER_KINDS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown server {', '.join(unknown)}: {', '.join(harness.SERVER_KINDS)}"
        )
    return kinds


def render_markdown(results_file: Path) -> None:
    """BENCHMARKS.md: the table of figures from `results_file`, then the analysis in bench/findings.md."""
    results = json.loads(results_file.read_text())["benchmarks"]
    findings_file = harness.REPO / "bench" / "findings.md"
    findings = findings_file.read_text() if findings_file.exists() else ""
    (harness.REPO / "BENCHMARKS.md").write_text(harness.render_markdown(results, list(BENCHMARKS), findings))


if __name__ == "__main__":
    sys.exit(main())
