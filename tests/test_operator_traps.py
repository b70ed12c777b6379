"""Operator traps, closed, through the real entry points: `make run PORT=…` serves its links and OAuth metadata on
that port and prints the same demo credentials after a restart; docker compose's web healthcheck passes against a
server configured as the compose file configures it.

Every process here runs on loopback with its database in tmp_path, and is reaped by the test that started it."""

import base64
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.delivery.liveserver import REPO, LiveServer, free_port
from tests.test_deployment import SECRETS, compose, web_environment

METADATA = "/.well-known/oauth-authorization-server"


class MakeRun:
    """`make run` as a developer types it (the install step taken as done, the interpreter the tests run on), on a
    SQLite database in `data`. `start()` waits until the server answers its OAuth metadata."""

    def __init__(self, data: Path, port: int, **env: str) -> None:
        self.port = port
        self.env = {
            **{name: value for name, value in os.environ.items() if name not in ("PUBLIC_URL", "DEBUG")},
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "SQLITE_PATH": str(data / "reviewhub.sqlite3"),
            "DATABASE_URL": "",
            "REDIS_URL": "",
            "PERIODIC_SWEEPS_IN_PROCESS": "false",
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "WARNING",
            **env,
        }
        self.log = data / f"make-run-{port}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 600) -> dict[str, Any]:
        make = shutil.which("make")
        assert make is not None
        command = [make, "-s", "-o", ".venv/.installed", "run", f"PORT={self.port}"]
        command.append(f"BIN={Path(sys.executable).parent}")
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(
                command, cwd=REPO, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        deadline = time.monotonic() + timeout  # migrating a fresh database is slow on a loaded machine
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"make run exited with {self.process.returncode}:\n{self.output()}")
            try:
                response = httpx.get(f"http://127.0.0.1:{self.port}{METADATA}", timeout=2)
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            assert response.status_code == 200, response.text
            return dict(response.json())
        self.stop()
        raise AssertionError(f"make run did not serve on {self.port}:\n{self.output()}")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)  # make, its shell and the server: one session
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def printed(self, prefix: str) -> str:
        [line] = [line for line in self.output().splitlines() if line.startswith(prefix)]
        return line.removeprefix(prefix)


def authenticates(base_url: str, key: str) -> bool:
    response = httpx.get(f"{base_url}/api/v1/events", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return response.status_code == 200


@pytest.mark.slow
def test_make_run_serves_on_its_port_and_keeps_the_demo_credentials_across_runs(tmp_path: Path) -> None:
    first = MakeRun(tmp_path, free_port())
    try:
        metadata = first.start()
        origin = f"http://127.0.0.1:{first.port}"
        assert metadata["issuer"] == origin
        for endpoint in ("authorization_endpoint", "token_endpoint", "registration_endpoint"):
            assert metadata[endpoint].startswith(origin + "/"), metadata
        agent_key = first.printed("AGENT_KEY=")
        admin_login = first.printed("Admin login: ")
        assert authenticates(origin, agent_key)
        assert f"ReviewHub on {origin}/" in first.output()
        assert "[error]" not in first.output() and "[warning]" not in first.output()  # doctor: nothing to say
    finally:
        first.stop()

    # A restart on another port, with PUBLIC_URL set (it wins) and a Slack API nothing answers: doctor reports it
    # and the run goes on.
    port = free_port()
    second = MakeRun(
        tmp_path,
        port,
        PUBLIC_URL=f"http://localhost:{port}",
        SLACK_BOT_TOKEN="xoxb-unreachable",
        SLACK_API_URL=f"http://127.0.0.1:{free_port()}/api/",
    )
    try:
        metadata = second.start()
        assert metadata["issuer"] == f"http://localhost:{second.port}"
        assert second.printed("AGENT_KEY=") == agent_key
        assert second.printed("Admin login: ") == admin_login
        assert authenticates(f"http://127.0.0.1:{second.port}", agent_key)
        assert "[error] SLACK_API_URL: Slack's Web API at" in second.output()
    finally:
        second.stop()
    assert (tmp_path / "reviewhub.sqlite3-demo-credentials.json").stat().st_mode & 0o777 == 0o600


@pytest.fixture
def compose_web(tmp_path: Path) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    """The web service as docker compose starts it with nothing but the required secrets set (production mode,
    compose's ALLOWED_HOSTS and PUBLIC_URL), on a free loopback port and a SQLite file instead of PostgreSQL."""
    flow_key = "k1:" + base64.b64encode(b"\x07" * 32).decode()
    environment = web_environment({**SECRETS, "FLOW_ENCRYPTION_KEYS": flow_key})
    environment.update(
        {
            "SECRET_KEY": "a-secret-key-long-enough-for-production-use-0123456789",
            "API_KEY_PEPPER": "a-pepper-of-its-own-0123456789",
            "DEBUG": "false",
            "DATABASE_URL": "",
            "REDIS_URL": "",
            "SQLITE_PATH": str(tmp_path / "db.sqlite3"),
        }
    )
    server = LiveServer(env=environment)
    try:
        yield server.start(), environment
    finally:
        server.stop()


def healthcheck(server: LiveServer, **env: str) -> subprocess.CompletedProcess[str]:
    """The web service's healthcheck command, aimed at this server's port instead of the container's 8000."""
    [code] = [part for part in compose()["services"]["web"]["healthcheck"]["test"] if "urlopen" in part]
    assert code.count("127.0.0.1:8000") == 1
    code = code.replace("127.0.0.1:8000", f"127.0.0.1:{server.port}")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.slow
def test_the_compose_healthcheck_passes_against_the_web_service_as_configured(
    compose_web: tuple[LiveServer, dict[str, str]],
) -> None:
    server, environment = compose_web

    assert healthcheck(server, PUBLIC_URL=environment["PUBLIC_URL"]).returncode == 0
    # The losing side: asked for a host ALLOWED_HOSTS does not list (as the bare 127.0.0.1 did), it fails.
    refused = healthcheck(server, PUBLIC_URL="http://elsewhere.example:8000")
    assert refused.returncode != 0 and "400" in refused.stderr
