"""Real processes for fault tests: uvicorn and Celery workers on loopback, sharing the test database and this
test's Redis. Every process is started by a test and always reaped by it (SIGKILL as a last resort)."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from django.db import connection

from tests.delivery.liveserver import READY_BOUND_SECONDS, LiveServer

REPO = Path(__file__).resolve().parents[2]


def test_database_url() -> str:
    """The database pytest-django made for this run (test_rh_sec), as a URL for subprocesses."""
    db: dict[str, Any] = connection.settings_dict
    auth = db["USER"] or ""
    if db.get("PASSWORD"):
        auth += ":" + db["PASSWORD"]
    return f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


# Every connection a fault-test process opens carries this name, so a test that kills connections kills only
# those, never the test run's own or another fixture's server's.
APPLICATION_NAME = "reviewhub-fault-process"


def base_env(**extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONUNBUFFERED": "1",
        "PERIODIC_SWEEPS_IN_PROCESS": "false",
        "LOG_LEVEL": "WARNING",
        "DATABASE_URL": f"{test_database_url()}?application_name={APPLICATION_NAME}",
        **extra,
    }


class Process:
    """One subprocess with its log in a temp file; `stop()` always reaps it."""

    def __init__(self, command: list[str], env: dict[str, str], name: str) -> None:
        self.command = command
        self.env = env
        self.log = tempfile.NamedTemporaryFile(prefix=f"rh-sec-{name}-", suffix=".log", delete=False)  # noqa: SIM115 - kept open for the process lifetime
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> "Process":
        self.process = subprocess.Popen(
            self.command,
            cwd=REPO,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, so kill() takes any children with it
        )
        return self

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Die like a crash: SIGKILL to the whole group, no shutdown handlers."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=8)
        except subprocess.TimeoutExpired:
            self.kill()

    def logs(self) -> str:
        return Path(self.log.name).read_text(errors="replace")[-6000:]


class Daphne(LiveServer):
    """The live server in a process group of its own, its connections named APPLICATION_NAME."""

    def __init__(self, **env: str) -> None:
        database_url = f"{test_database_url()}?application_name={APPLICATION_NAME}"
        super().__init__(env={"DATABASE_URL": database_url, **env}, own_session=True)


class CeleryWorker(Process):
    """`celery -A reviewhub worker`, one process (solo pool) so SIGKILL leaves no orphan child mid-task."""

    def __init__(self, name: str, **env: str) -> None:
        command = [sys.executable, "-m", "tests.faults.worker_main", "-A", "reviewhub", "worker"]
        command += ["--pool=solo", "--concurrency=1", "--without-gossip", "--without-mingle"]
        command += ["--without-heartbeat", "-n", f"{name}@%h", "--loglevel=INFO"]
        super().__init__(command, base_env(**env), name)

    def wait_ready(self) -> "CeleryWorker":
        give_up = time.monotonic() + READY_BOUND_SECONDS
        while time.monotonic() < give_up:
            if not self.alive:
                raise RuntimeError(f"worker exited early:\n{self.logs()}")
            if " ready." in self.logs():
                return self
            time.sleep(0.2)
        raise RuntimeError(f"worker not ready:\n{self.logs()}")
