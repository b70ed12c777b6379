"""The harness every benchmark uses: environment, servers under test, load loops, percentiles, the report.

A benchmark module exposes `NAME`, `TITLE` and `run(ctx: Context) -> Report`. It builds its own rows (bulk
inserts where it needs many), measures the figure and its same-run baseline, and deletes what it created.
"""

import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
BENCH_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/rh_bench"
BENCH_REDIS_URL = "redis://127.0.0.1:6379/8"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024
# Both servers listen with the backlog production uses (docker-compose.yml): Twisted's default of 50 overflows in a
# reconnect storm, and the kernel then drops connections the server never saw.
LISTEN_BACKLOG = 4096


# --- environment -----------------------------------------------------------------------------------------------


def bench_env(**extra: str) -> dict[str, str]:
    """The environment of every process the bench starts: bench settings, its database and Redis db."""
    env = dict(os.environ)
    env.setdefault("DATABASE_URL", BENCH_DATABASE_URL)
    env.setdefault("REDIS_URL", BENCH_REDIS_URL)
    env["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def setup_django() -> None:
    """Configure Django in this process (the load generator) for fixtures and database checks."""
    os.environ.update({k: v for k, v in bench_env().items() if k in {"DATABASE_URL", "REDIS_URL"}})
    os.environ["DJANGO_SETTINGS_MODULE"] = "bench.settings"
    import django

    django.setup()


def refuse_shared_database() -> None:
    """The bench deletes what it creates in bulk: never let it loose on the test suite's database."""
    name = os.environ.get("DATABASE_URL", BENCH_DATABASE_URL).rsplit("/", 1)[-1].split("?")[0]
    if name in {"test", "postgres", "reviewhub"}:
        raise SystemExit(f"refusing to benchmark against database {name!r}: use a dedicated one (rh_bench)")


def ensure_database() -> None:
    """Create the bench database if needed and bring its schema up to date."""
    import psycopg

    url = os.environ.get("DATABASE_URL", BENCH_DATABASE_URL)
    base, name = url.rsplit("/", 1)
    with psycopg.connect(base + "/postgres", autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            conn.execute(f'CREATE DATABASE "{name}"')
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
        cwd=REPO,
        env=bench_env(),
        check=True,
    )


def raise_fd_limit(wanted: int = 65536) -> int:
    """Thousands of sockets need thousands of descriptors: lift the soft limit as far as the hard one allows."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def machine() -> dict[str, Any]:
    cpu = "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


CPU_PROBE_ROUNDS = 5
QUIET_CPU_PROBE_MS = "13 to 15"  # the probe on the bench machine on quiet nights (findings log)


def cpu_probe_ms() -> float:
    """CPU milliseconds this process spends on `sum(range(10**6))`, the median of CPU_PROBE_ROUNDS: how fast the
    host lets a core run right now. The load average cannot tell: a host that lends the machine half a core makes
    every process slower without anything queueing here, and the figures it measures then read as regressions
    (findings log, 2026-11-28: one commit's long-poll p50 in two runs minutes apart)."""
    spent = []
    for _ in range(CPU_PROBE_ROUNDS):
        began = time.process_time()
        sum(range(10**6))
        spent.append(time.process_time() - began)
    return round(statistics.median(spent) * 1000, 1)


# --- processes -------------------------------------------------------------------------------------------------


def rss_kib(pid: int) -> int:
    """Resident memory of a process and its children, from /proc (VmRSS)."""
    total = 0
    for each in (pid, *descendants(pid)):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{each}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def stat_fields(pid: int) -> list[str]:
    """/proc/<pid>/stat after the command name (which may hold spaces): field 3 of the man page is index 0."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (granian serves from a worker process it forks)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError):
                children.setdefault(int(stat_fields(int(entry.name))[1]), []).append(int(entry.name))
    found, todo = [], list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found.append(child)
        todo += children.get(child, [])
    return found


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process, all its threads and its children (live or reaped) so far."""
    fields = stat_fields(pid)
    total = sum(int(value) for value in fields[11:15])  # utime, stime, reaped children's cutime, cstime
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            total += sum(int(value) for value in stat_fields(child)[11:13])
    return total / CLOCK_TICKS


# The ASGI servers a bench can run ReviewHub on (`python -m bench.serve KIND`).
SERVER_KINDS = ("uvicorn", "daphne", "granian")
SERVER_LABELS = {"uvicorn": "uvicorn", "daphne": "daphne", "granian": "granian"}
# What `make run`, the image and the test servers serve with: the kind every bench runs unless it compares them.
DEPLOYED_SERVER = "uvicorn"
# granian admits at most this many connections at once per worker (its default is the backlog): above the 5,000
# sockets the benches hold, so it refuses none of them.
GRANIAN_BACKPRESSURE = 65536


class Server:
    """One ASGI server process under test (see SERVER_KINDS) on a free loopback port, bench settings. It leads a
    process group of its own, so `kill()` takes a server's worker processes (granian's) with it."""

    def __init__(
        self,
        kind: str = DEPLOYED_SERVER,
        env: dict[str, str] | None = None,
        role: str = "",
        start_timeout: float = 30.0,
    ) -> None:
        if kind not in SERVER_KINDS:
            raise ValueError(f"unknown server {kind!r}: one of {', '.join(SERVER_KINDS)}")
        self.kind = kind
        self.start_timeout = start_timeout  # a loaded machine imports Django slowly
        self.port = free_port()
        self.env = bench_env(**(env or {}))
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = RESULTS / f"server-{kind}{'-' + role if role else ''}.log"
        self.profiler: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        """The process started; `cpu_seconds` and `rss_kib` of it count its workers too."""
        assert self.process is not None
        return self.process.pid

    @property
    def serving_pid(self) -> int:
        """The process running the application's event loop: granian's worker, otherwise the one started."""
        workers = descendants(self.pid)
        return min(workers) if workers else self.pid

    def command(self) -> list[str]:
        app = os.environ.get("BENCH_APP", "reviewhub.asgi:application")
        serve = [sys.executable, "-m", "bench.serve", self.kind]
        if self.kind == "daphne":
            return [*serve, "-e", f"tcp:port={self.port}:interface=127.0.0.1:backlog={LISTEN_BACKLOG}", app]
        if self.kind == "uvicorn":
            return [
                *serve,
                app,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--no-access-log",
                "--log-level",
                "warning",
                "--backlog",
                str(LISTEN_BACKLOG),
            ]
        return [
            *serve,
            "--interface",
            "asgi",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backlog",
            str(LISTEN_BACKLOG),
            "--backpressure",
            str(GRANIAN_BACKPRESSURE),
            "--no-access-log",
            "--log-level",
            "warning",
            app,
        ]

    def start(self, timeout: float = 30.0) -> "Server":
        RESULTS.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self.command(),
            cwd=REPO,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.kind} exited at start; see {self.log_path}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200:
                    self.start_profiler()
                    return self
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{self.kind} did not answer /healthz within {timeout:.0f} s; see {self.log_path}")

    def start_profiler(self) -> None:
        """With BENCH_PROFILE=<name> (`python -m bench --profile`), py-spy samples the server until it stops;
        the collapsed stacks land in bench/results/profile-<name>-<server>.txt (speedscope/flamegraph input)."""
        name = os.environ.get("BENCH_PROFILE")
        if not name:
            return
        out = RESULTS / f"profile-{name}-{self.kind}-{self.port}.txt"
        py_spy = Path(sys.executable).parent / "py-spy"
        self.profiler = subprocess.Popen(
            [
                str(py_spy),
                "record",
                "-p",
                str(self.serving_pid),
                "-r",
                "100",
                "-f",
                "raw",
                "-o",
                str(out),
                "--nonblocking",
                *(["--gil"] if os.environ.get("BENCH_PROFILE_GIL") else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def kill(self) -> None:
        """Die like a crashed process, workers and all: SIGKILL to the server's process group."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(ProcessLookupError):  # a worker its server left behind
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.profiler is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.profiler.wait(timeout=20)  # py-spy writes its file when the process it samples exits

    def __enter__(self) -> "Server":
        return self.start(self.start_timeout)

    def __exit__(self, *exc: object) -> None:
        self.stop()


# --- client processes ----------------------------------------------------------------------------------------


class ClientProcess:
    """Part of the load in a client process of its own (spawned `target(*args, pipe)`), so that the process that
    measures neither runs out of descriptors nor reads its frames late behind thousands of others (and their
    garbage collections). Talks over a pipe: the child sends `(kind, value)` replies to one-word commands."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, child = context.Pipe()
        self.process = context.Process(target=target, args=(*args, child), daemon=True)
        self.process.start()

    async def reply(self, kind: str, timeout: float) -> Any:
        """The child's next `(kind, value)`; a late answer of another kind (an opening that outran its limit) is
        passed over."""
        deadline = time.monotonic() + timeout
        while True:
            if not await asyncio.to_thread(self.pipe.poll, max(0.0, deadline - time.monotonic())):
                raise TimeoutError
            got, value = self.pipe.recv()
            if got == kind:
                return value

    async def ask(self, command: str, timeout: float = 60) -> Any:
        self.pipe.send(command)
        return await self.reply(command, timeout)

    async def stop(self, timeout: float = 60) -> Any:
        """The child's answer to `stop` (None if it gave none), then the child is gone."""
        try:
            answer = await self.ask("stop", timeout)
        except (TimeoutError, OSError):
            answer = None
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
        return answer


# --- a lean HTTP client ---------------------------------------------------------------------------------------


class KeepAliveHttp:
    """HTTP/1.1 over raw asyncio streams with a keep-alive connection per request in flight, for benchmarks whose
    figure is the server's answer time: httpx spends milliseconds of the load generator's CPU per call, which at
    hundreds of calls per second delayed the moment a response was read (bench #3's long-polls). Bodies are read by
    Content-Length (the app's JSON answers); anything else is out of scope here."""

    # A connection idle longer than this is closed, not reused: uvicorn closes keep-alive connections idle for 5 s
    # (its default), and a request written on one it is closing is cut (findings log, 2026-11-28).
    IDLE_SECONDS = 4.0

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[tuple[asyncio.StreamReader, asyncio.StreamWriter, float]] = []

    async def connection(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """The most recently used idle connection still fresh and open, else a new one."""
        while self.idle:
            reader, writer, idle_since = self.idle.pop()
            if time.monotonic() - idle_since < self.IDLE_SECONDS and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_connection(self.host, self.port)

    async def request(
        self, method: str, path: str, headers: dict[str, str] | None = None, sent: asyncio.Event | None = None
    ) -> tuple[int, bytes]:
        """(status, body); `sent` is set once the request is written."""
        reader, writer = await self.connection()
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Content-Length: 0"]
        lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
        try:
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            if sent is not None:
                sent.set()
            status_line = await reader.readline()
            if not status_line:
                raise ConnectionError("closed by server")
            length, keep = 0, True
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("latin-1").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
                elif name.strip().lower() == "connection" and value.strip().lower() == "close":
                    keep = False
            body = await reader.readexactly(length)
        except BaseException:
            writer.close()
            raise
        if keep:
            self.idle.append((reader, writer, time.monotonic()))
        else:
            writer.close()
        return int(status_line.split()[1]), body

    def close(self) -> None:
        for _reader, writer, _idle_since in self.idle:
            writer.close()
        self.idle = []


# --- statistics ------------------------------------------------------------------------------------------------


def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100); NaN for no values."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * p / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "n": len(ms),
        "p50_ms": round(percentile(ms, 50), 2),
        "p95_ms": round(percentile(ms, 95), 2),
        "p99_ms": round(percentile(ms, 99), 2),
        "max_ms": round(max(ms), 2) if ms else float("nan"),
    }


@dataclass
class LoadResult:
    """What a closed-loop run measured: latencies of successful calls, failures, wall time, server CPU."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    server_cpu: float = 0.0

    @property
    def ok(self) -> int:
        return len(self.latencies)

    @property
    def rate(self) -> float:
        return self.ok / self.seconds if self.seconds else 0.0

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.server_cpu / self.ok if self.ok else float("nan")


async def closed_loop(
    call: Callable[[int], Awaitable[None]],
    *,
    workers: int,
    max_calls: int,
    max_seconds: float,
    progress: "Progress | None" = None,
    server_pid: int | None = None,
) -> LoadResult:
    """`workers` clients each await `call(worker)` back to back until `max_calls` or `max_seconds` is reached.

    A call that raises counts as an error (a few are kept as samples). Bounded by count and by time.
    """
    result = LoadResult()
    issued = 0
    loop = asyncio.get_running_loop()
    started = loop.time()
    stop_at = started + max_seconds
    cpu_before = cpu_seconds(server_pid) if server_pid else 0.0

    async def worker(index: int) -> None:
        nonlocal issued
        while issued < max_calls and loop.time() < stop_at:
            issued += 1
            begin = loop.time()
            try:
                await call(index)
            except Exception as exc:
                result.errors += 1
                if len(result.error_samples) < 5:
                    result.error_samples.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            result.latencies.append(loop.time() - begin)
            if progress is not None:
                progress.update(
                    len(result.latencies), f"{len(result.latencies) / (loop.time() - started):.0f}/s"
                )

    await asyncio.gather(*(worker(i) for i in range(workers)))
    result.seconds = loop.time() - started
    if server_pid:
        result.server_cpu = cpu_seconds(server_pid) - cpu_before
    return result


async def paced(
    count: int, per_second: float, action: Callable[[int], Awaitable[None]], max_seconds: float
) -> int:
    """Open loop: start `action(i)` every 1/per_second s regardless of how long earlier ones take."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    tasks: list[asyncio.Task[None]] = []
    for index in range(count):
        due = started + index / per_second
        if due - started > max_seconds:
            break
        delay = due - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(action(index)))
    # Whatever has not finished 30 s after the schedule ended is cancelled: the caller counts what completed.
    _, late = await asyncio.wait(tasks, timeout=max(0.0, started + max_seconds + 30 - loop.time()) or 0.1)
    for task in late:
        task.cancel()
    return len(tasks)


class KeepAliveClient:
    """A load generator's HTTP/1.1 client, for open-loop load on one loopback server at a fraction of httpx's CPU.

    At 50 creates/s on two cores httpx cost the generator ~12 ms of CPU per request, as much as the server's own
    create, so the generator took the cores the server needed (BENCHMARKS.md, reach). This sends each request as
    prebuilt bytes on one of `size` kept-alive connections and reads the status, headers and body (Content-Length
    or chunked) and nothing more; a connection that fails, is closed or idled KeepAliveHttp.IDLE_SECONDS (the
    server may be closing it) is opened afresh for the next request."""

    Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]

    def __init__(self, base_url: str, size: int) -> None:
        address = httpx.URL(base_url)
        self.host, self.port = address.host, address.port or 80
        self._idle: asyncio.Queue[tuple[KeepAliveClient.Connection, float] | None] = asyncio.Queue()
        for _ in range(size):
            self._idle.put_nowait(None)

    async def _connection(self) -> "KeepAliveClient.Connection | None":
        """A slot's connection if still fresh and open (None: open one); waits for a free slot."""
        slot = await self._idle.get()
        if slot is None:
            return None
        (reader, writer), idle_since = slot
        if time.monotonic() - idle_since < KeepAliveHttp.IDLE_SECONDS and not reader.at_eof():
            return reader, writer
        writer.close()
        return None

    async def post_json(self, path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes]:
        payload = json.dumps(body).encode()
        head = [f"POST {path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Content-Type: application/json"]
        head += [f"Content-Length: {len(payload)}", *(f"{name}: {value}" for name, value in headers.items())]
        message = ("\r\n".join(head) + "\r\n\r\n").encode() + payload
        connection = await self._connection()
        try:
            if connection is None:
                connection = await asyncio.open_connection(self.host, self.port)
            reader, writer = connection
            writer.write(message)
            status, body_bytes, keep = await self._response(reader)
        except BaseException:
            if connection is not None:
                connection[1].close()
            self._idle.put_nowait(None)
            raise
        if not keep:
            writer.close()
        self._idle.put_nowait((connection, time.monotonic()) if keep else None)
        return status, body_bytes

    async def _response(self, reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionError("the server closed the connection")
        status = int(status_line.split()[1])
        length, chunked, keep = 0, False, True
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name, value = name.strip().lower(), value.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value == b"chunked"
            elif name == b"connection":
                keep = value != b"close"
        if not chunked:
            return status, await reader.readexactly(length), keep
        parts = []
        while size := int((await reader.readline()).split(b";")[0], 16):
            parts.append(await reader.readexactly(size))
            await reader.readline()
        await reader.readline()
        return status, b"".join(parts), keep

    def close(self) -> None:
        while not self._idle.empty():
            slot = self._idle.get_nowait()
            if slot is not None:
                slot[0][1].close()


# --- progress and report ---------------------------------------------------------------------------------------


class Progress:
    """One status line per phase on stderr: rewritten in place on a terminal, throttled lines otherwise."""

    def __init__(self, bench: str) -> None:
        self.bench = bench
        self.phase = ""
        self.total: int | None = None
        self.tty = sys.stderr.isatty()
        self._last = 0.0

    def start(self, phase: str, total: int | None = None) -> "Progress":
        self.finish()
        self.phase, self.total, self._last = phase, total, 0.0
        self._write(f"{phase} ...", force=True)
        return self

    def update(self, done: int, extra: str = "") -> None:
        of = f"/{self.total}" if self.total else ""
        self._write(f"{self.phase}: {done}{of} {extra}".rstrip())

    def note(self, text: str) -> None:
        self.finish()
        sys.stderr.write(f"  [{self.bench}] {text}\n")

    def finish(self) -> None:
        if self.phase and self.tty:
            sys.stderr.write("\n")
        self.phase = ""

    def _write(self, text: str, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < (0.2 if self.tty else 5.0):
            return
        self._last = now
        line = f"  [{self.bench}] {text}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()


@dataclass
class Figure:
    """One row of BENCHMARKS.md: a measured value, its target, and its same-run baseline where it has one."""

    label: str
    value: float
    unit: str
    target: str
    met: bool | None
    baseline: float | None = None
    baseline_label: str = ""
    ratio: float | None = None

    def cell(self, number: float | None) -> str:
        if number is None:
            return "-"
        if float(number).is_integer() and abs(number) < 1e6:
            return f"{int(number):,}"
        if abs(number) >= 100:
            return f"{number:,.0f}"
        return f"{number:.3g}" if abs(number) < 10 else f"{number:.1f}"


@dataclass
class Report:
    name: str
    title: str
    figures: list[Figure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    load_before: float = 0.0
    load_after: float = 0.0
    cpu_probe_before_ms: float = 0.0  # cpu_probe_ms() as the benchmark began and ended (0: not probed)
    cpu_probe_after_ms: float = 0.0
    error: str = ""

    def add(self, *figures: Figure) -> None:
        self.figures.extend(figures)

    @property
    def met(self) -> bool:
        return not self.error and all(f.met is not False for f in self.figures)


@dataclass
class Context:
    """What `python -m bench` hands each benchmark."""

    progress: Progress
    quick: bool = False
    options: dict[str, Any] = field(default_factory=dict)


def write_results(reports: list[Report], info: dict[str, Any], path: Path | None = None) -> Path:
    """Merge these reports into bench/results/latest.json (one run of one benchmark keeps the others)."""
    path = path or RESULTS / "latest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    existing: dict[str, Any] = {}
    if path.exists():
        with contextlib.suppress(ValueError):
            existing = json.loads(path.read_text())
    benchmarks = existing.get("benchmarks", {})
    for report in reports:
        entry = asdict(report)
        entry["machine"] = info
        entry["date"] = info["date"]
        benchmarks[report.name] = entry
    path.write_text(json.dumps({"benchmarks": benchmarks}, indent=2, default=str) + "\n")
    return path


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


@contextlib.contextmanager
def timed() -> Iterator[Callable[[], float]]:
    started = time.monotonic()
    yield lambda: time.monotonic() - started


# --- BENCHMARKS.md -----------------------------------------------------------------------------------------------


def render_markdown(results: dict[str, Any], order: list[str], findings: str) -> str:
    """BENCHMARKS.md from latest.json: one table row per figure, then each benchmark's notes, then findings."""
    lines = [
        "# Benchmarks",
        "",
        "Written by `make bench` (`python -m bench`) from `bench/results/latest.json`; do not edit by hand "
        "(the analysis below the table comes from `bench/findings.md`).",
        "",
        "Every target is a ratio against a baseline measured in the same run, or a count noise cannot fake: "
        "absolute figures on a 2-core machine shared by the servers, PostgreSQL, Redis and the load generator "
        "are noisy (the load average before and after each benchmark is listed, and the CPU probe: the CPU "
        f"milliseconds `sum(range(10**6))` takes, {QUIET_CPU_PROBE_MS} on this machine at its usual speed, "
        "about twice that when its host lends it half a core). PostgreSQL with fsync on, Redis, everything on "
        "loopback.",
        "",
        "| # | figure | measured | target | baseline | ratio | met | machine | date |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names = [n for n in order if n in results] + [n for n in results if n not in order]
    for number, name in enumerate(names, 1):
        entry = results[name]
        info = entry.get("machine", {})
        where = f"{info.get('cores', '?')} cores, load {entry.get('load_before', '?')}→{entry.get('load_after', '?')}"
        if entry.get("cpu_probe_before_ms"):
            where += f", CPU probe {entry['cpu_probe_before_ms']:g}→{entry['cpu_probe_after_ms']:g} ms"
        if entry.get("error"):
            lines.append(
                f"| {number} | **{entry['title']}: failed** ({entry['error']}) | | | | | ✗ | {where} | {entry.get('date', '')} |"
            )
        for fig in entry.get("figures", []):
            figure = Figure(**fig)
            value = f"{figure.cell(figure.value)} {figure.unit}".strip()
            baseline = (
                f"{figure.cell(figure.baseline)} {figure.unit} ({figure.baseline_label})".strip()
                if figure.baseline is not None
                else "-"
            )
            ratio = f"{figure.ratio:.2f}x" if figure.ratio is not None else "-"
            met = {True: "✓", False: "✗", None: "-"}[figure.met]
            lines.append(
                f"| {number} | {figure.label} | {value} | {figure.target} | {baseline} | {ratio} | {met} "
                f"| {where} | {entry.get('date', '')} |"
            )
    any_entry = next(iter(results.values()), {})
    info = any_entry.get("machine", {})
    lines += [
        "",
        f"Machine: {info.get('cores', '?')} cores ({info.get('cpu', '?')}), {info.get('memory_gib', '?')} GiB, "
        f"Python {info.get('python', '?')}.",
        "",
        "## Per benchmark",
        "",
    ]
    for name in names:
        entry = results[name]
        lines.append(f"### {entry['title']} (`python -m bench {name}`, {entry.get('seconds', 0):.0f} s)")
        lines.append("")
        lines += [f"- {note}" for note in entry.get("notes", [])]
        if entry.get("details"):
            lines += [
                "",
                "<details><summary>raw figures</summary>",
                "",
                "```json",
                json.dumps(entry["details"], indent=1, default=str)[:6000],
                "```",
                "",
                "</details>",
            ]
        lines.append("")
    if findings.strip():
        lines += [findings.strip(), ""]
    return "\n".join(lines)
