"""Start a server under test with its file-descriptor limit raised: `python -m bench.serve KIND ARGS`, KIND one of
harness.SERVER_KINDS (`uvicorn`, `daphne`, `granian`), ARGS that server's own command-line arguments.

Thousands of idle sockets need thousands of descriptors; the soft limit is raised in-process (setrlimit) so
the bench works the same whether or not the calling shell ran `ulimit -n`. With BENCH_GC_LOG=1 each full
garbage collection's pause is written to the server's log, with the monotonic time it ended, to line up with
latency tails, and so is each of daphne's walks over its connections that held the event loop 5 ms or more.
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


def log_slow_connection_walks() -> None:
    """daphne walks all of its connections every second (`application_checker`) and every two seconds
    (`timeout_checker`, which also sends the pings due): each walk that held the event loop 5 ms or more."""
    # Imported here: importing daphne installs Twisted's reactor, and the load generator imports this module too.
    from daphne.server import Server

    for name in ("application_checker", "timeout_checker"):
        walk = getattr(Server, name)

        def timed(self: Any, walk: Any = walk, name: str = name) -> None:
            began = time.perf_counter()
            walk(self)
            held_ms = (time.perf_counter() - began) * 1000
            if held_ms >= 5:
                print(
                    f"daphne: {name} at {time.monotonic():.3f} held the loop {held_ms:.0f} ms "
                    f"({len(self.connections)} connections)",
                    file=sys.stderr,
                    flush=True,
                )

        setattr(Server, name, timed)


def main() -> None:
    server, args = sys.argv[1], sys.argv[2:]
    raise_fd_limit()
    if os.environ.get("BENCH_GC_LOG") in ("1", "types"):
        log_full_collections()
        if server == "daphne":
            log_slow_connection_walks()
    sys.argv = [server, *args]
    if server == "daphne":  # the `daphne` command as installed
        from daphne.cli import CommandLineInterface

        CommandLineInterface.entrypoint()
    elif server == "uvicorn":
        import uvicorn

        uvicorn.main()
    elif server == "granian":
        from granian.cli import entrypoint

        entrypoint()  # type: ignore[no-untyped-call]
    else:
        raise SystemExit(f"unknown server {server!r}: uvicorn, daphne or granian")


if __name__ == "__main__":
    main()
