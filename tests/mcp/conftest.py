"""End-to-end MCP fixtures: a live ReviewHub (uvicorn on a loopback port, on pytest-django's SQLite file database),
an agent key, and a scripted reviewer answering through the reviewer API.

`mcp` is imported unguarded on purpose: without the `reviewhub[mcp]` extra these tests fail at collection instead
of being skipped (`make test` installs `.[dev,mcp]`).
"""

import asyncio
import os
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import mcp  # noqa: F401 - fail, never skip, when the optional extra is missing
import pytest
from django.contrib.auth.models import User
from mcp import StdioServerParameters

from elicitation.models import Queue
from elicitation.queue import accounts
from reviewhub_client import AsyncReviewHubClient
from tests.delivery.liveserver import LiveServer, test_database_env

REPO = Path(__file__).resolve().parents[2]
SERVERS = Path(__file__).resolve().parent / "servers"
QUEUE = "mcp-review"


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a child process that must see this test run's database and code."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        **test_database_env(),
        "PERIODIC_SWEEPS_IN_PROCESS": "false",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        "PYTHONUNBUFFERED": "1",
        "LOG_LEVEL": "WARNING",
        **extra,
    }


class LiveReviewHub(LiveServer):
    """The live server as the MCP tests run it: Django, the agent API and /mcp/, with the in-process sweeper."""

    def __init__(self, **env: str) -> None:
        super().__init__(
            env={
                "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                # The in-process sweeper expires overdue requests, as in the embedded deployment.
                "PERIODIC_SWEEPS_IN_PROCESS": "true",
                "SWEEP_INTERVAL_SECONDS": "1",
                # ask_reviewer's progress beat: a second, so a test can outwait a short host timeout quickly.
                "MCP_PROGRESS_INTERVAL_SECONDS": "1",
                **env,
            }
        )


# Package scope: its sweeper writes to the shared test database every second, so it must be gone before
# other packages' tests (the browser tests backdate deadlines and expect no sweep to act on them).
@pytest.fixture(scope="package")
def live_reviewhub(django_db_setup: None) -> Iterator[LiveReviewHub]:
    server = LiveReviewHub().start()
    yield server
    server.stop()


@dataclass
class Hub:
    """What one test needs to talk to the live ReviewHub: its URL, an agent key, a reviewer token, the queue."""

    url: str
    agent_key: str
    agent_id: int
    reviewer_token: str
    queue: str
    server: LiveReviewHub


@pytest.fixture
def hub(live_reviewhub: LiveReviewHub, transactional_db: None) -> Hub:
    queue = Queue.objects.create(
        slug=QUEUE, name="MCP review", lease_seconds=60, default_deadline_seconds=600
    )
    agent, key = accounts.create_agent("mcp-agent", queue_slugs=[QUEUE])
    reviewer = User.objects.create_user("mcp-reviewer")  # token only: no password hashing per test
    queue.members.add(reviewer)
    return Hub(
        url=live_reviewhub.url,
        agent_key=key,
        agent_id=agent.pk,
        reviewer_token=accounts.create_reviewer_token(reviewer, "mcp tests"),
        queue=QUEUE,
        server=live_reviewhub,
    )


class ScriptedReviewer:
    """A person at the reviewer API: waits for the next request in the queue, claims it, answers it."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.seen: list[dict[str, Any]] = []

    def _client(self) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {self.hub.reviewer_token}"}
        return httpx.AsyncClient(base_url=self.hub.url + "/api/v1/review", headers=headers, timeout=10)

    async def claim_next(self, timeout: float = 60) -> dict[str, Any]:
        async with self._client() as client:
            deadline = asyncio.get_running_loop().time() + timeout
            while True:
                response = await client.post(f"/queues/{self.hub.queue}/claim-next")
                if response.status_code == 200:
                    claimed: dict[str, Any] = response.json()
                    self.seen.append(claimed)
                    return claimed
                assert response.status_code == 204, response.text
                if asyncio.get_running_loop().time() > deadline:
                    raise AssertionError("no request reached the reviewer queue")
                await asyncio.sleep(0.05)

    async def claim_specific(self, request_id: str) -> dict[str, Any]:
        async with self._client() as client:
            response = await client.post(f"/requests/{request_id}/claim")
            assert response.status_code == 200, response.text
            claimed: dict[str, Any] = response.json()
            self.seen.append(claimed)
            return claimed

    async def respond(self, request_id: str, action: str, content: dict[str, Any] | None = None) -> None:
        body: dict[str, Any] = {"action": action}
        if content is not None:
            body["content"] = content
        async with self._client() as client:
            response = await client.post(f"/requests/{request_id}/respond", json=body)
            assert response.status_code == 200, response.text

    async def answer_next(
        self, action: str, content: dict[str, Any] | None = None, timeout: float = 60
    ) -> dict[str, Any]:
        claimed = await self.claim_next(timeout)
        await self.respond(claimed["id"], action, content)
        return claimed


@pytest.fixture
def scripted_reviewer(hub: Hub) -> ScriptedReviewer:
    return ScriptedReviewer(hub)


def agent_api(hub: Hub) -> httpx.Client:
    return httpx.Client(
        base_url=hub.url + "/api/v1", headers={"Authorization": f"Bearer {hub.agent_key}"}, timeout=10
    )


@pytest.fixture
async def reviewhub_client(hub: Hub) -> AsyncIterator[AsyncReviewHubClient]:
    async with AsyncReviewHubClient(hub.url, hub.agent_key) as client:
        yield client


def approvals_stdio(**env: str) -> StdioServerParameters:
    """The example approvals server as a stdio subprocess (a fresh process per connection)."""
    return StdioServerParameters(
        command=sys.executable, args=[str(SERVERS / "approvals.py")], env=env or None, cwd=str(REPO)
    )


def agent_requests(hub: Hub, status: str = "all") -> list[dict[str, Any]]:
    with agent_api(hub) as api:
        rows: list[dict[str, Any]] = api.get("/requests", params={"status": status}).json()
        return rows
