"""The Python client against a live server: elicit end to end, typed results, clear errors, idempotent retries."""

import asyncio
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from elicitation.models import ElicitationRequest
from elicitation.queue import accounts
from reviewhub_client import (
    AsyncReviewHubClient,
    AuthenticationError,
    ConflictError,
    NotFoundError,
    RequestWithdrawn,
    ReviewHubClient,
    ValidationError,
    WaitTimeout,
)
from reviewhub_client import (
    ElicitationRequest as ClientRequest,
)
from tests.answers import answer_of
from tests.client.conftest import ScriptedReviewer, Setup
from tests.conftest import FORM_SCHEMA
from tests.delivery.liveserver import LiveServer, answer_through_api, closing_connection

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_client_package_imports_without_django() -> None:
    import subprocess

    code = "import sys, reviewhub_client; assert not [m for m in sys.modules if m.startswith('django')]"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=str(__import__("pathlib").Path.cwd()))


def test_elicit_returns_the_reviewers_answer_end_to_end(
    live: LiveServer, setup: Setup, scripted_reviewer: Callable[..., ScriptedReviewer]
) -> None:
    def approve(request: dict[str, Any]) -> dict[str, Any]:
        assert request["message"] == "Transfer 100 EUR?"
        return {"action": "accept", "content": {"approve": True, "note": "fine"}}

    scripted_reviewer(live.url, setup.reviewer_token, approve)
    reviewer_user = setup.reviewer
    with ReviewHubClient(live.url, setup.key) as hub:
        started = time.monotonic()
        result = hub.elicit("Transfer 100 EUR?", FORM_SCHEMA, timeout=20, context={"tool": "transfer"})
        elapsed = time.monotonic() - started

    assert (result.action, result.content) == ("accept", {"approve": True, "note": "fine"})
    assert result.accepted
    stored = ElicitationRequest.objects.get(message="Transfer 100 EUR?")
    assert (stored.status, stored.answered_by, stored.context) == (
        "completed",
        reviewer_user,
        {"tool": "transfer"},
    )
    assert elapsed < 10


async def test_the_async_client_elicits_and_gets_a_decline_without_content(
    live: LiveServer, setup: Setup, scripted_reviewer: Callable[..., ScriptedReviewer]
) -> None:
    scripted_reviewer(live.url, setup.reviewer_token, lambda request: {"action": "decline"})
    async with AsyncReviewHubClient(live.url, setup.key) as hub:
        results = await asyncio.gather(
            *(hub.elicit(f"Question {n}?", FORM_SCHEMA, timeout=20) for n in range(3))
        )
    assert [(result.action, result.content) for result in results] == [("decline", None)] * 3


def test_create_get_wait_and_events_give_typed_results(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, setup.key) as hub:
        created = hub.create("Ship it?", FORM_SCHEMA, priority=5, expires_in=600)
        assert isinstance(created, ClientRequest)
        assert (created.status, created.queue, created.mode, created.priority) == (
            "pending",
            "default",
            "form",
            5,
        )
        assert created.is_open and created.result is None and created.deadline is not None

        answer_through_api(live.url, setup.reviewer_token, created.id, "accept", {"approve": False})

        answer = ("accept", {"approve": False})
        waited = hub.wait(created.id, timeout=10)  # answered before the wait began
        assert (waited.action, waited.content) == answer
        waited = hub.wait(created.id, timeout=10)  # and asked again on the same socket
        assert (waited.action, waited.content) == answer
        fetched = hub.get(created.id)
        assert fetched.status == "completed" and fetched.result is not None
        assert (fetched.result.action, fetched.result.content) == answer
        assert answer_of(fetched.to_dict()["result"]) == {"action": "accept", "content": {"approve": False}}
        page = hub.events(after=0)
        assert [(e.type, e.id, e.cursor) for e in page.events] == [("completed", created.id, 1)]
        assert page.cursor == 1
        assert hub.events(after=1).events == []
        assert [r.id for r in hub.list_requests("closed")] == [created.id]


def test_the_feed_long_polls_until_an_event_arrives(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, setup.key) as hub:
        created = hub.create("Ship it?", FORM_SCHEMA)
        timer = threading.Timer(
            0.5, answer_through_api, (live.url, setup.reviewer_token, created.id, "cancel")
        )
        timer.start()
        started = time.monotonic()
        page = hub.events(after=0, wait=20)
        timer.join()
    assert 0.4 < time.monotonic() - started < 5
    assert [e.id for e in page.events] == [created.id]
    cancelled = page.events[0].result
    assert cancelled is not None and (cancelled.action, cancelled.content) == ("cancel", None)


def test_a_wait_times_out_and_elicit_withdraws_what_nobody_answered(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, setup.key) as hub:
        created = hub.create("Anyone?", FORM_SCHEMA)
        with pytest.raises(WaitTimeout) as waited:
            hub.wait(created.id, timeout=0.5)
        assert waited.value.request_id == created.id
        assert hub.get(created.id).status == "pending"  # a plain wait leaves it open

        with pytest.raises(WaitTimeout):
            hub.elicit("Still nobody?", FORM_SCHEMA, timeout=0.5)
    withdrawn = ElicitationRequest.objects.get(message="Still nobody?")
    assert withdrawn.status == "withdrawn"  # the turn ended: reviewers no longer see it


def test_waiting_on_a_withdrawn_request_raises_and_cancelling_an_answered_one_conflicts(
    live: LiveServer, setup: Setup
) -> None:
    with ReviewHubClient(live.url, setup.key) as hub:
        withdrawn = hub.create("Never mind", FORM_SCHEMA)
        assert hub.cancel(withdrawn.id).status == "withdrawn"
        with pytest.raises(RequestWithdrawn):
            hub.wait(withdrawn.id, timeout=5)

        answered = hub.create("Answered", FORM_SCHEMA)
        answer_through_api(live.url, setup.reviewer_token, answered.id, "decline")
        with pytest.raises(ConflictError) as conflict:
            hub.cancel(answered.id)
        assert conflict.value.status == 409


def test_invalid_input_raises_validation_error_with_fields(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, setup.key) as hub:
        with pytest.raises(ValidationError) as invalid:
            hub.create("Bad schema", {"type": "object", "properties": {"x": {"type": "object"}}})
        assert invalid.value.status == 400
        assert any(name.startswith("requestedSchema") for name in invalid.value.fields)

        with pytest.raises(ValidationError) as unknown_queue:
            hub.create("Where?", FORM_SCHEMA, queue="nowhere")
        assert "queue" in unknown_queue.value.fields


def test_unknown_ids_raise_not_found_for_get_and_wait(live: LiveServer, setup: Setup) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    with ReviewHubClient(live.url, setup.key) as hub:
        with pytest.raises(NotFoundError):
            hub.get(missing)
        with pytest.raises(NotFoundError):
            hub.wait(missing, timeout=5)


def test_a_wrong_key_raises_authentication_error(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, "rh_00000000_not-a-key") as hub:
        with pytest.raises(AuthenticationError) as refused:
            hub.create("Hello?", FORM_SCHEMA)
        assert refused.value.status == 401
        with pytest.raises(AuthenticationError):
            hub.wait("00000000-0000-4000-8000-000000000000", timeout=5)


def test_no_key_at_all_is_refused_before_any_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REVIEWHUB_AGENT_KEY", raising=False)
    with pytest.raises(AuthenticationError):
        ReviewHubClient("http://127.0.0.1:9")


def test_a_revoked_key_fails_a_socket_wait_promptly(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, setup.key) as hub:
        created = hub.create("Revoke me", FORM_SCHEMA)
        timer = threading.Timer(0.5, closing_connection(accounts.revoke_agent), (setup.agent,))
        timer.start()
        started = time.monotonic()
        with pytest.raises(AuthenticationError):
            hub.wait(created.id, timeout=20)
        timer.join()
    # The revocation's push comes from this test process, not the server: the socket's recheck finds it.
    assert time.monotonic() - started < 10


# --- retries keep one request: a flaky proxy in front of the live server -------------------------------------------


class FlakyProxy:
    """Forwards to the live server; the first create is forwarded but its response lost (503, or a dropped
    connection), the worst case for a retry."""

    def __init__(self, target: str, failure: str) -> None:
        self.target = target
        self.failure = failure
        self.create_keys: list[str | None] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.forward("POST")

            def do_GET(self) -> None:
                self.forward("GET")

            def forward(self, method: str) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in {"host", "content-length"}
                }
                upstream = httpx.request(
                    method, proxy.target + self.path, content=body, headers=headers, timeout=30
                )
                first_create = method == "POST" and self.path == "/api/v1/requests" and not proxy.create_keys
                if method == "POST" and self.path == "/api/v1/requests":
                    proxy.create_keys.append(self.headers.get("Idempotency-Key"))
                if first_create and proxy.failure == "drop":
                    self.close_connection = True
                    return  # the request was processed; the agent never hears back
                status = 503 if first_create else upstream.status_code
                payload = b'{"code":"unavailable","detail":"try again"}' if first_create else upstream.content
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def flaky_proxy(live: LiveServer) -> Iterator[Callable[[str], FlakyProxy]]:
    proxies: list[FlakyProxy] = []

    def make(failure: str) -> FlakyProxy:
        proxies.append(FlakyProxy(live.url, failure))
        return proxies[-1]

    yield make
    for proxy in proxies:
        proxy.close()


@pytest.mark.parametrize("failure", ["503", "drop"])
def test_a_create_retried_after_a_lost_response_queues_one_request(
    flaky_proxy: Callable[[str], FlakyProxy], setup: Setup, failure: str
) -> None:
    proxy = flaky_proxy(failure)
    with ReviewHubClient(proxy.url, setup.key, use_websocket=False) as hub:
        created = hub.create("Exactly once?", FORM_SCHEMA)
        other = hub.create("A second question", FORM_SCHEMA)

    assert len(proxy.create_keys) == 3  # the lost attempt, its retry, and the next create
    assert proxy.create_keys[0] == proxy.create_keys[1] is not None
    assert proxy.create_keys[2] != proxy.create_keys[0]  # a new key per create call
    assert ElicitationRequest.objects.filter(message="Exactly once?").count() == 1
    assert created.id == str(ElicitationRequest.objects.get(message="Exactly once?").pk)
    assert other.id != created.id


def test_long_poll_alone_gets_the_answer_when_sockets_are_off(live: LiveServer, setup: Setup) -> None:
    with ReviewHubClient(live.url, setup.key, use_websocket=False) as hub:
        created = hub.create("Polled?", FORM_SCHEMA)
        timer = threading.Timer(
            0.5, answer_through_api, (live.url, setup.reviewer_token, created.id, "decline")
        )
        timer.start()
        started = time.monotonic()
        waited = hub.wait(created.id, timeout=20)
        assert (waited.action, waited.content) == ("decline", None)
        timer.join()
    assert time.monotonic() - started < 5


def test_the_example_agent_prints_the_humans_answer(
    live: LiveServer, setup: Setup, scripted_reviewer: Callable[..., ScriptedReviewer]
) -> None:
    import os
    import subprocess
    from pathlib import Path

    scripted_reviewer(
        live.url, setup.reviewer_token, lambda request: {"action": "accept", "content": {"approve": True}}
    )
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "REVIEWHUB_URL": live.url, "REVIEWHUB_AGENT_KEY": setup.key, "PYTHONPATH": str(repo)}
    finished = subprocess.run(
        [sys.executable, str(repo / "examples" / "agent.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 0, finished.stderr
    assert "waiting for the answer" in finished.stdout
    assert "Answer: accept" in finished.stdout
    assert "approve: True" in finished.stdout
