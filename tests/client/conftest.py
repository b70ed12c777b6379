"""Client tests run the real client against a real server: a uvicorn subprocess on loopback, on the test DB."""

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User

from elicitation.models import Agent, Queue
from elicitation.queue import accounts
from tests.delivery.liveserver import LiveServer


@pytest.fixture(scope="module")
def live(django_db_setup: None) -> Iterator[LiveServer]:
    # A short socket recheck: revocations made by the tests (not through the server) are found by it.
    server = LiveServer(env={"AGENT_SOCKET_RECHECK_SECONDS": "2"}).start()
    yield server
    server.stop()


@dataclass
class Setup:
    queue: Queue
    agent: Agent
    key: str
    reviewer: User
    reviewer_token: str


@pytest.fixture
def setup(transactional_db: None) -> Setup:
    """The client's default queue, an agent posting to it, and a reviewer with an API token."""
    queue = accounts.ensure_queues(["default"])[0]
    agent, key = accounts.create_agent("client-agent", queue_slugs=["default"])
    reviewer = User.objects.create_user("rita", password="pw-rita")
    queue.members.add(reviewer)
    return Setup(queue, agent, key, reviewer, accounts.create_reviewer_token(reviewer))


@dataclass
class ScriptedReviewer:
    """A reviewer in a thread: claims whatever arrives in a queue and answers it with `decide(request)`."""

    base_url: str
    token: str
    decide: Callable[[dict[str, Any]], dict[str, Any]]
    queue: str = "default"
    answered: list[str] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.base_url, headers=headers, timeout=10) as http:
            while not self.stop.is_set():
                try:
                    claimed = http.post(f"/api/v1/review/queues/{self.queue}/claim-next")
                except httpx.TransportError:
                    time.sleep(0.1)
                    continue
                if claimed.status_code != 200:
                    time.sleep(0.05)
                    continue
                request = claimed.json()
                answered = http.post(
                    f"/api/v1/review/requests/{request['id']}/respond", json=self.decide(request)
                )
                assert answered.status_code == 200, answered.text
                self.answered.append(request["id"])


@pytest.fixture
def scripted_reviewer() -> Iterator[Callable[..., ScriptedReviewer]]:
    started: list[tuple[ScriptedReviewer, threading.Thread]] = []

    def start(
        base_url: str, token: str, decide: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> ScriptedReviewer:
        reviewer = ScriptedReviewer(base_url, token, decide)
        thread = threading.Thread(target=reviewer.run, daemon=True)
        thread.start()
        started.append((reviewer, thread))
        return reviewer

    yield start
    for reviewer, thread in started:
        reviewer.stop.set()
        thread.join(timeout=10)
