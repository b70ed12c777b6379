"""Hosted-flow fixtures: an agent holding `flows:secrets`, a flow schema with a sensitive field, and helpers to open
and submit flows the way an agent and a reviewer's browser do."""

import base64
import json
import os
import re
import secrets
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from elicitation.models import Agent, Queue, Scope
from elicitation.queue import accounts
from tests.delivery import liveserver

FLOW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "api_token": {"type": "string", "title": "API token", "sensitive": True, "minLength": 8},
        "account": {"type": "string", "title": "Account name", "maxLength": 80},
    },
    "required": ["api_token"],
}
PUBLIC_URL = "https://reviewhub.example.com"
FLOW_PAGE = re.compile(r"^https://reviewhub\.example\.com/flows/(?P<id>[0-9a-f-]{36})/$")


def new_secret() -> str:
    """A value that occurs nowhere by chance, so any hit in a search is a leak."""
    return "S3cr3t-" + secrets.token_hex(16)


def api_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.fixture(autouse=True)
def _public_url(settings: Any) -> None:
    # Flow URLs are built on PUBLIC_URL (a real-looking origin, so URL validation accepts forwarded copies).
    settings.PUBLIC_URL = PUBLIC_URL


@pytest.fixture
def flows_agent_with_key(queue: Queue) -> tuple[Agent, str]:
    return accounts.create_agent(
        "vault-mcp", queue_slugs=[queue.slug], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
    )


@pytest.fixture
def flows_agent(flows_agent_with_key: tuple[Agent, str]) -> Agent:
    return flows_agent_with_key[0]


@pytest.fixture
def flows_client(flows_agent_with_key: tuple[Agent, str]) -> APIClient:
    return api_client(flows_agent_with_key[1])


@pytest.fixture
def open_flow(flows_client: APIClient, queue: Queue) -> Callable[..., dict[str, Any]]:
    def open_(**overrides: Any) -> dict[str, Any]:
        body = {
            "message": "The deploy tool needs your registry token.",
            "requestedSchema": FLOW_SCHEMA,
            "queue": queue.slug,
            **overrides,
        }
        response = flows_client.post("/api/v1/flows", body, format="json")
        assert response.status_code == 201, response.content
        data: dict[str, Any] = response.json()
        return data

    return open_


@pytest.fixture
def browser_for() -> Callable[[User], Client]:
    def make(user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


def flow_path(flow: dict[str, Any]) -> str:
    return f"/flows/{flow['id']}/"


def claim(client: Client, flow: dict[str, Any]) -> Any:
    """Press the flow page's Claim button (opening the page only shows it)."""
    return client.post(flow_path(flow), {"action": "claim"})


def submit(client: Client, flow: dict[str, Any], **values: Any) -> Any:
    """POST the flow page's form as a browser would (field names carry the form's prefix)."""
    data = {f"answer-{name}": value for name, value in values.items()}
    return client.post(flow_path(flow), {**data, "action": "accept"})


# --- a live server for the browser test -------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
LIVE_SETUP = """
import json
from django.contrib.auth.models import User
from elicitation.queue import accounts
from elicitation.models import Scope
queue = accounts.ensure_queues(["secrets"])[0]
reviewer = User.objects.create_user("rita", password=REVIEWER_PASSWORD)
queue.members.add(reviewer)
agent, key = accounts.create_agent(
    "vault-mcp", queue_slugs=["secrets"], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
)
print("LIVE-SETUP " + json.dumps({"agent_key": key}))
"""


@dataclass
class LiveServer:
    base_url: str
    database: Path
    log: Path
    agent_key: str
    reviewer: str
    reviewer_password: str

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.fixture(scope="module")
def flows_live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """uvicorn in a subprocess on a free loopback port, against its own SQLite file, embedded mode (eager webhooks,
    in-memory channel layer), logging at DEBUG to a file the test can search."""
    workdir = tmp_path_factory.mktemp("flows-live")
    port = liveserver.free_port()
    password = "pw-" + secrets.token_urlsafe(12)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL", "SQLITE_TEST_PATH"}
    }
    env.update(
        {
            "SQLITE_PATH": str(workdir / "live.sqlite3"),
            "SECRET_KEY": "live-" + secrets.token_hex(16),
            "FLOW_ENCRYPTION_KEYS": f"live1:{base64.b64encode(os.urandom(32)).decode()}",
            "PUBLIC_URL": f"http://127.0.0.1:{port}",
            "LOG_LEVEL": "DEBUG",
            "DEBUG": "false",
            "PERIODIC_SWEEPS_IN_PROCESS": "false",
            "REVIEWER_PASSWORD": password,
        }
    )
    python = sys.executable
    subprocess.run(
        [python, "manage.py", "migrate", "--noinput"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=liveserver.READY_BOUND_SECONDS,
    )
    setup = subprocess.run(
        [
            python,
            "manage.py",
            "shell",
            "-c",
            "import os; REVIEWER_PASSWORD = os.environ['REVIEWER_PASSWORD']\n" + LIVE_SETUP,
        ],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=liveserver.READY_BOUND_SECONDS,
    )
    (line,) = [item for item in setup.stdout.splitlines() if item.startswith("LIVE-SETUP ")]
    agent_key = json.loads(line.removeprefix("LIVE-SETUP "))["agent_key"]
    # Embedded mode whatever the test run's own leg: SQLite file of its own, no Redis.
    server = liveserver.LiveServer(env={**env, "DATABASE_URL": "", "REDIS_URL": ""}, port=port).start()
    try:
        yield LiveServer(server.url, workdir / "live.sqlite3", server.log, agent_key, "rita", password)
    finally:
        server.stop()
