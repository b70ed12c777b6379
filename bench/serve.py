"""Start a server under test with its file-descriptor limit raised: `python -m bench.serve daphne|uvicorn ARGS`.

Thousands of idle sockets need thousands of descriptors; the soft limit is raised in-process (setrlimit) so
the bench works the same whether or not the calling shell ran `ulimit -n`. With BENCH_GC_LOG=1 each full
garbage collection's pause is written to the server's log, with the monotonic time it ended, to line up with
latency tails.
"""

import gc
import os
import sys
import time
from collections import Counter
from typing import Any

from bench.harness import raise_fd_limit


def log_full_collections() -> None:
    started: list[float] = []
    previous: Counter[str] = Counter()

    def callback(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            pause_ms = (time.perf_counter() - started[0]) * 1000
            print(
                f"gc: full collection at {time.monotonic():.3f}: {pause_ms:.0f} ms",
                file=sys.stderr,
                flush=True,
            )
            if os.environ.get("BENCH_GC_LOG") == "types":
                counts = Counter(type(o).__name__ for o in gc.get_objects())
                grown = (counts - previous).most_common(12)
                previous.clear()
                previous.update(counts)
                print(f"gc: grown since the last: {grown}", file=sys.stderr, flush=True)

    gc.callbacks.append(callback)


def main() -> None:
    server, args = sys.argv[1], sys.argv[2:]
    raise_fd_limit()
    if os.environ.get("BENCH_GC_LOG") in ("1", "types"):
        log_full_collections()
    sys.argv = [server, *args]
    if server == "daphne":
        from daphne.cli import CommandLineInterface

        CommandLineInterface.entrypoint()
    elif server == "uvicorn":
        import uvicorn

        uvicorn.main()
    else:
        raise SystemExit(f"unknown server {server!r}: daphne or uvicorn")


if __name__ == "__main__":
    main()
