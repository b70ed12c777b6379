"""Real ASGI servers for tests: the one live-server harness (`LiveServer`), on loopback ports sharing the test
database, and what tests do with them."""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
from django.db import connection

from reviewhub.cli import ASGI_APPLICATION, SERVER_OPTIONS

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_database_env() -> dict[str, str]:
    """Point a subprocess at the database this test process uses (pytest-django's test database)."""
    db: dict[str, Any] = connection.settings_dict
    if connection.vendor == "sqlite":
        return {"SQLITE_PATH": str(db["NAME"]), "DATABASE_URL": ""}
    auth = db["USER"] or ""
    if db.get("PASSWORD"):
        auth += ":" + db["PASSWORD"]
    host = f"{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return {"DATABASE_URL": f"postgres://{auth}@{host}/{db['NAME']}"}


# A safety net for a server that hangs at start, not a deadline: a loaded machine is slower, not red. A server that
# fails to start exits, and the wait ends at once with its log.
READY_BOUND_SECONDS = 600.0


class LiveServer:
    """The one way tests start ReviewHub: uvicorn with reviewhub/cli.py's SERVER_OPTIONS (what `make run`, the image
    and docker-compose serve with) in a subprocess on a free loopback port, on this run's test database, with extra
    command-line `args` if given. `start()` waits until it answers HTTP (or exits: then it raises with the log);
    `stop()` always reaps it. With `own_session` the server leads a process group of its own, so `kill()` takes any
    children with it."""

    def __init__(
        self,
        env: dict[str, str] | None = None,
        port: int | None = None,
        args: list[str] | None = None,
        own_session: bool = False,
    ) -> None:
        self.port = port or free_port()
        self.args = args or []
        self.own_session = own_session
        self.env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PYTHONUNBUFFERED": "1",
            "PERIODIC_SWEEPS_IN_PROCESS": "false",
            "LOG_LEVEL": "WARNING",
            **test_database_env(),
            **(env or {}),
        }
        self.process: subprocess.Popen[bytes] | None = None
        handle, name = tempfile.mkstemp(prefix="rh-live-server-", suffix=".log")
        os.close(handle)
        self.log = Path(name)

    @property
    def log_path(self) -> Path:
        return self.log

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> "LiveServer":
        return self.launch().wait_ready()

    def launch(self) -> "LiveServer":
        """Spawn the process without waiting: start several, then wait for each (startup is slow under load)."""
        listen = ["--host", "127.0.0.1", "--port", str(self.port)]
        command = [sys.executable, "-m", "uvicorn", ASGI_APPLICATION, *listen, *SERVER_OPTIONS, *self.args]
        with self.log.open("ab") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                command,
                cwd=REPO,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=self.own_session,
            )
        return self

    def wait_ready(self) -> "LiveServer":
        """Until the server answers any HTTP status, it exits, or READY_BOUND_SECONDS pass."""
        assert self.process is not None
        give_up = time.monotonic() + READY_BOUND_SECONDS
        while time.monotonic() < give_up:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.logs()}")
            try:
                httpx.get(self.url + "/api/v1/events", timeout=5)  # 401 at once: no database, no Redis
                return self
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not answer within {READY_BOUND_SECONDS:.0f} s:\n{self.logs()}")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        if self.own_session:
            os.killpg(self.process.pid, signum)
        else:
            self.process.send_signal(signum)

    def kill(self) -> None:
        """Die like a crashed process: no graceful shutdown."""
        if self.alive:
            self.signal(signal.SIGKILL)
            assert self.process is not None
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if not self.alive:
            return
        self.signal(signal.SIGTERM)
        assert self.process is not None
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def threads(self) -> int:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
        raise RuntimeError("no thread count")


def answer_through_api(
    base_url: str, reviewer_token: str, request_id: Any, action: str = "accept", content: Any = None
) -> dict[str, Any]:
    """A scripted reviewer: claim, then respond, through the reviewer API of a live server."""
    headers = {"Authorization": f"Bearer {reviewer_token}"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=10) as http:
        claimed = http.post(f"/api/v1/review/requests/{request_id}/claim")
        assert claimed.status_code == 200, claimed.text
        body: dict[str, Any] = {"action": action}
        if content is not None:
            body["content"] = content
        answered = http.post(f"/api/v1/review/requests/{request_id}/respond", json=body)
        assert answered.status_code == 200, answered.text
        return dict(answered.json())


def closing_connection(function: Callable[..., T]) -> Callable[..., T]:
    """For work in a helper thread: its database connection is closed after, so none outlives the test (on
    PostgreSQL a leftover session would keep the test database from being dropped)."""

    def run(*args: Any, **kwargs: Any) -> T:
        try:
            return function(*args, **kwargs)
        finally:
            connection.close()

    return run


def start_all(*servers: LiveServer) -> None:
    for server in servers:
        server.launch()
    try:
        for server in servers:
            server.wait_ready()
    except BaseException:
        for server in servers:
            server.stop()
        raise


class RedisServer:
    """A private redis-server on a free loopback port, to kill and restart without touching the shared one."""

    def __init__(self) -> None:
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> "RedisServer":
        command = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no"]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        give_up = time.monotonic() + READY_BOUND_SECONDS
        while time.monotonic() < give_up and self.process.poll() is None:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return self
            time.sleep(0.05)
        self.kill()
        raise RuntimeError("redis-server did not start")

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)


async def eventually(check: Callable[[], bool], timeout: float = 30, what: str = "condition") -> None:
    """Poll `check` until it holds; fail the test after `timeout` seconds."""
    import asyncio

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not met within {timeout} s")
        await asyncio.sleep(0.05)
