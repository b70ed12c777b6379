"""#14 An idle server process: no sockets, no waiters, no requests. What does it cost while nothing happens?

Three processes side by side, measured over the same window so the machine's load falls on all alike:

- embedded: the server as `make run` starts it (`run_command`, the production settings, DEBUG on, SQLite in a
  file of the bench's own, migrated and seeded as `make run` does), no DATABASE_URL or REDIS_URL;
- services: the same command on PostgreSQL and Redis (the bench's database and Redis db);
- baseline: the same uvicorn command serving `trivial_app`, an ASGI app that answers 200 and does nothing else.

Each is started, asked `/healthz` once (as a health check would), left alone SETTLE_SECONDS, then measured over
IDLE_SECONDS: CPU from /proc/<pid>/stat (utime + stime, its children too) and context switches of all its threads
(how often something wakes it, a count the machine's load hardly moves).
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import httpx

from bench.harness import (
    BENCH_DATABASE_URL,
    BENCH_REDIS_URL,
    REPO,
    RESULTS,
    Context,
    Figure,
    Report,
    cpu_seconds,
    descendants,
    free_port,
    load_average,
)
from reviewhub.cli import ASGI_APPLICATION, SERVER_OPTIONS

NAME = "idle"
TITLE = "Idle server process: CPU with no sockets, no waiters, no requests"
IDLE_SECONDS = 60.0
SETTLE_SECONDS = 10.0
CPU_TARGET_PERCENT = 0.5
SQLITE_PATH = Path("/tmp/reviewhub-bench-idle.sqlite3")
START_SECONDS = 180.0  # a loaded machine imports Django slowly


def run_command(port: int, application: str = ASGI_APPLICATION) -> list[str]:
    """What the Makefile's `run` target execs after migrating and seeding."""
    listen = ["--host", "127.0.0.1", "--port", str(port)]
    return [sys.executable, "-m", "uvicorn", application, *listen, *SERVER_OPTIONS]


def baseline_command(port: int) -> list[str]:
    return run_command(port, "bench.idle:trivial_app")


Scope = MutableMapping[str, Any]


async def trivial_app(
    scope: Scope, receive: Callable[[], Awaitable[Scope]], send: Callable[[Scope], Awaitable[None]]
) -> None:
    """The baseline: 200 to every HTTP request, nothing kept, nothing scheduled."""
    if scope["type"] == "lifespan":  # uvicorn's startup, then its shutdown: nothing to start or stop
        for phase in ("startup", "shutdown"):
            await receive()
            await send({"type": f"lifespan.{phase}.complete"})
        return
    if scope["type"] != "http":
        return
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
    await send({"type": "http.response.body", "body": b"ok"})


def run_env(port: int, **extra: str) -> dict[str, str]:
    """As `make run` exports it (DEBUG on unless set, PUBLIC_URL the address served), with the production
    settings, not the bench's."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env.update(
        {
            "DEBUG": os.environ.get("DEBUG", "true"),
            "PUBLIC_URL": f"http://127.0.0.1:{port}",
            "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        }
    )
    env.update(extra)
    return env


class IdleProcess:
    """One server under watch, in a process group of its own."""

    def __init__(
        self, name: str, command: Callable[[int], list[str]], env: Callable[[int], dict[str, str]]
    ) -> None:
        self.name = name
        self.port = free_port()
        self.command = command(self.port)
        self.env = env(self.port)
        self.log_path = RESULTS / f"server-idle-{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        RESULTS.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_healthy(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited at start; see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{self.port}/healthz", timeout=5).status_code == 200:
                    return
            time.sleep(0.2)
        raise RuntimeError(
            f"{self.name} did not answer /healthz within {START_SECONDS:.0f} s; see {self.log_path}"
        )

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def context_switches(self) -> int:
        """Voluntary and involuntary context switches of every thread of the process and its children."""
        total = 0
        for pid in (self.pid, *descendants(self.pid)):
            for task in Path(f"/proc/{pid}/task").iterdir():
                with contextlib.suppress(OSError):
                    for line in (task / "status").read_text().splitlines():
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
        return total

    def threads(self) -> int:
        return sum(
            len(list(Path(f"/proc/{pid}/task").iterdir())) for pid in (self.pid, *descendants(self.pid))
        )

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)


def prepare_embedded_database(ctx: Context) -> None:
    """`make run`'s migrate and seed_demo, on the bench's own SQLite file."""
    ctx.progress.start("migrating and seeding the embedded database")
    env = run_env(0, SQLITE_PATH=str(SQLITE_PATH))
    for command in (["migrate", "--noinput", "-v", "0"], ["seed_demo"]):
        subprocess.run(
            [sys.executable, "manage.py", *command], cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL
        )


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    idle_seconds = 10.0 if ctx.quick else IDLE_SECONDS
    prepare_embedded_database(ctx)
    database_url = os.environ.get("DATABASE_URL", BENCH_DATABASE_URL)
    redis_url = os.environ.get("REDIS_URL", BENCH_REDIS_URL)
    processes = [
        IdleProcess("embedded", run_command, lambda port: run_env(port, SQLITE_PATH=str(SQLITE_PATH))),
        IdleProcess(
            "services",
            run_command,
            lambda port: run_env(port, DATABASE_URL=database_url, REDIS_URL=redis_url),
        ),
        IdleProcess("baseline", baseline_command, lambda port: run_env(port)),
    ]
    measured: dict[str, dict[str, float]] = {}
    try:
        ctx.progress.start("starting the servers")
        for process in processes:
            process.start()
        for process in processes:
            process.wait_healthy()
        ctx.progress.start(f"settling {SETTLE_SECONDS:.0f} s, then idle {idle_seconds:.0f} s")
        time.sleep(SETTLE_SECONDS)
        load_before = load_average()
        cpu_before = {p.name: cpu_seconds(p.pid) for p in processes}
        switches_before = {p.name: p.context_switches() for p in processes}
        began = time.monotonic()
        time.sleep(idle_seconds)
        elapsed = time.monotonic() - began
        for p in processes:
            measured[p.name] = {
                "cpu_percent": round((cpu_seconds(p.pid) - cpu_before[p.name]) / elapsed * 100, 3),
                "wakeups_per_second": round((p.context_switches() - switches_before[p.name]) / elapsed, 1),
                "threads": p.threads(),
            }
        load_after = load_average()
    finally:
        for process in processes:
            process.stop()

    baseline = measured["baseline"]
    for name, what in (
        ("embedded", "embedded (make run: SQLite)"),
        ("services", "services (PostgreSQL + Redis)"),
    ):
        m = measured[name]
        report.add(
            Figure(
                f"idle server process CPU, {what}",
                m["cpu_percent"],
                "% of a core",
                f"≤ {CPU_TARGET_PERCENT} %",
                m["cpu_percent"] <= CPU_TARGET_PERCENT,
                baseline["cpu_percent"],
                "plain uvicorn, trivial app",
                m["cpu_percent"] / baseline["cpu_percent"] if baseline["cpu_percent"] else None,
            ),
            Figure(
                f"idle server process: context switches per second, {what}",
                m["wakeups_per_second"],
                "/s",
                "reported",
                None,
                baseline["wakeups_per_second"],
                "plain uvicorn, trivial app",
                m["wakeups_per_second"] / baseline["wakeups_per_second"]
                if baseline["wakeups_per_second"]
                else None,
            ),
        )
    report.details = {
        **measured,
        "idle_seconds": round(elapsed, 1),
        "load_average": [load_before, load_after],
    }
    report.notes.append(
        f"Three processes side by side, idle over the same {idle_seconds:.0f} s after answering one /healthz each and "
        f"settling {SETTLE_SECONDS:.0f} s: the server as `make run` starts it on SQLite (embedded, the production "
        "settings with DEBUG on) and on PostgreSQL + Redis (services), and plain uvicorn serving an ASGI app that "
        f"answers 200 (baseline). CPU from /proc (utime + stime, children included), over {elapsed:.0f} s; context "
        f"switches of all threads. Load average {load_before} → {load_after}."
    )
    return report
