"""Signed webhooks against a real loopback receiver: signatures verify, failures back off and retry, the last
failure dead-letters, and an admin replay sends the same delivery again."""

import hashlib
import hmac
import inspect
import json
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from elicitation.delivery import tasks, webhooks
from elicitation.models import Agent, AgentEvent, ElicitationRequest, WebhookDelivery
from elicitation.queue import transitions
from elicitation.queue.keys import webhook_secret
from reviewhub.celery import app as celery_app
from tests.answers import answer_of
from tests.conftest import Clock

# Deliveries are queued on commit, so the tests that make them need real transactions; the pure ones need no DB.
committing = pytest.mark.django_db(transaction=True)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Receiver:
    """A loopback HTTP server: answers POSTs with the scripted statuses in turn (then 200), recording each."""

    url: str
    calls: list[Received] = field(default_factory=list)
    script: list[int] = field(default_factory=list)
    delay: float = 0.0

    def wait_for(self, count: int, timeout: float = 5) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.calls) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.calls


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    state = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            state.calls.append(Received(self.path, dict(self.headers.items()), body))
            if state.delay:
                time.sleep(state.delay)
            code = state.script.pop(0) if state.script else 200
            self.send_response(code)
            if 300 <= code < 400:
                self.send_header("Location", "/elsewhere")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture(autouse=True)
def eager_celery() -> Iterator[None]:
    """The embedded default: tasks run inline. (The services leg has a broker but no worker in tests.)"""
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


@pytest.fixture
def complete(reviewer: Any) -> Callable[..., ElicitationRequest]:
    def complete_(request: ElicitationRequest, action: str = "accept") -> ElicitationRequest:
        transitions.claim_request(request.pk, user=reviewer)
        content = {"approve": True} if action == "accept" else None
        return transitions.respond(request.pk, user=reviewer, action=action, content=content)

    return complete_


def readme_verify_signature() -> Callable[..., bool]:
    """The README's verification snippet is this function's source: prove it runs with only the stdlib."""
    namespace: dict[str, Any] = {}
    source = textwrap.dedent(inspect.getsource(webhooks.verify_signature))
    exec(source, {"hmac": hmac, "hashlib": hashlib, "time": time}, namespace)
    return namespace["verify_signature"]


def only_delivery() -> WebhookDelivery:
    return WebhookDelivery.objects.select_related("event").get()


@committing
def test_a_completion_posts_the_signed_event_to_the_requests_callback(
    receiver: Receiver, make_request: Any, complete: Any, agent: Agent
) -> None:
    request = make_request(callback_url=receiver.url)
    complete(request)

    [call] = receiver.wait_for(1)
    delivery = only_delivery()
    event = AgentEvent.objects.get()
    body = json.loads(call.body)
    assert body == event.payload
    assert {**body, "result": answer_of(body["result"])} == {
        "type": "completed",
        "id": str(request.pk),
        "cursor": 1,
        "status": "completed",
        "result": {"action": "accept", "content": {"approve": True}},
    }
    assert call.headers["ReviewHub-Delivery"] == str(delivery.pk)
    assert call.headers["ReviewHub-Event"] == "completed"
    assert call.headers["Content-Type"] == "application/json"
    secret = webhook_secret(agent.pk, agent.key_prefix)
    verify = readme_verify_signature()
    assert verify(secret, call.headers["ReviewHub-Signature"], call.body)
    assert not verify(secret, call.headers["ReviewHub-Signature"], call.body.replace(b"accept", b"decline"))
    assert not verify("whsec_other", call.headers["ReviewHub-Signature"], call.body)
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None


@committing
def test_the_agents_callback_url_is_used_when_the_request_names_none(
    receiver: Receiver, make_request: Any, complete: Any, agent: Agent
) -> None:
    Agent.objects.filter(pk=agent.pk).update(callback_url=receiver.url)
    request = make_request()
    transitions.withdraw_request(request.pk, agent=Agent.objects.get(pk=agent.pk))

    [call] = receiver.wait_for(1)
    assert call.headers["ReviewHub-Event"] == "withdrawn"
    assert json.loads(call.body)["status"] == "withdrawn"


@committing
def test_no_callback_means_no_delivery(make_request: Any, complete: Any) -> None:
    complete(make_request())
    assert not WebhookDelivery.objects.exists()


@committing
def test_a_500_is_retried_with_backoff_until_it_succeeds_under_one_delivery_id(
    receiver: Receiver, make_request: Any, complete: Any, clock: Clock, settings: Any
) -> None:
    settings.WEBHOOK_BACKOFF_BASE_SECONDS = 2
    receiver.script = [500, 503]
    complete(make_request(callback_url=receiver.url))

    receiver.wait_for(1)
    first = only_delivery()
    assert (first.status, first.attempts, first.last_error) == ("pending", 1, "HTTP 500")
    assert first.next_attempt_at is not None
    assert clock.now() <= first.next_attempt_at <= clock.now() + timedelta(seconds=2)  # ceiling 2 s

    assert tasks.retry_due_webhooks() <= 1  # maybe not due yet: jitter may have chosen up to 2 s
    clock.advance(seconds=2)
    tasks.retry_due_webhooks()
    receiver.wait_for(2)
    second = only_delivery()
    assert (second.status, second.attempts, second.last_status_code) == ("pending", 2, 503)
    assert second.next_attempt_at is not None
    assert second.next_attempt_at <= clock.now() + timedelta(seconds=4)  # ceiling doubled

    clock.advance(seconds=4)
    tasks.retry_due_webhooks()
    calls = receiver.wait_for(3)
    final = only_delivery()
    assert (final.status, final.attempts, final.last_error) == ("delivered", 3, "")
    assert len(calls) == 3
    assert {call.headers["ReviewHub-Delivery"] for call in calls} == {str(final.pk)}
    assert len({call.body for call in calls}) == 1

    clock.advance(hours=1)
    assert tasks.retry_due_webhooks() == 0  # delivered is final
    assert len(receiver.calls) == 3


@committing
def test_a_delivery_is_dead_after_the_attempt_limit_and_a_replay_sends_it_again(
    receiver: Receiver, make_request: Any, complete: Any, clock: Clock, settings: Any
) -> None:
    settings.WEBHOOK_MAX_ATTEMPTS = 3
    receiver.script = [500] * 3
    complete(make_request(callback_url=receiver.url))
    for _ in range(3):
        clock.advance(minutes=11)  # past any backoff
        tasks.retry_due_webhooks()

    dead = only_delivery()
    assert (dead.status, dead.attempts, dead.next_attempt_at) == ("dead", 3, None)
    assert len(receiver.wait_for(3)) == 3
    clock.advance(hours=1)
    assert tasks.retry_due_webhooks() == 0
    assert len(receiver.calls) == 3

    replayed = tasks.replay(dead)

    calls = receiver.wait_for(4)
    assert len(calls) == 4
    assert calls[-1].headers["ReviewHub-Delivery"] == str(dead.pk)  # same id: receivers can deduplicate
    replayed.refresh_from_db()
    assert (replayed.status, replayed.attempts, replayed.last_error) == ("delivered", 1, "")


@committing
def test_redirects_are_never_followed(
    receiver: Receiver, make_request: Any, complete: Any, settings: Any
) -> None:
    receiver.script = [302]
    complete(make_request(callback_url=receiver.url))

    time.sleep(0.2)
    assert [call.path for call in receiver.calls] == ["/hook"]  # not /elsewhere
    delivery = only_delivery()
    assert delivery.status == "pending"
    assert "redirect" in delivery.last_error


@committing
def test_a_callback_that_is_not_http_is_dead_at_once(make_request: Any, complete: Any, agent: Agent) -> None:
    Agent.objects.filter(pk=agent.pk).update(callback_url="ftp://127.0.0.1/hook")
    complete(make_request())

    delivery = only_delivery()
    assert (delivery.status, delivery.attempts) == ("dead", 1)
    assert "http" in delivery.last_error


@committing
def test_with_private_addresses_refused_a_loopback_callback_is_never_posted(
    receiver: Receiver, make_request: Any, complete: Any, settings: Any
) -> None:
    settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES = False  # the production default
    complete(make_request(callback_url=receiver.url))

    time.sleep(0.2)
    assert receiver.calls == []
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts) == ("dead", 1)
    assert "non-public address (127.0.0.1)" in delivery.last_error


@pytest.mark.parametrize(
    ("url", "refused"),
    [
        ("http://127.0.0.1:8000/hook", "127.0.0.1"),
        ("http://10.1.2.3/hook", "10.1.2.3"),
        ("http://192.168.0.10/hook", "192.168.0.10"),
        ("http://169.254.169.254/latest/meta-data", "169.254.169.254"),
        ("http://[::1]/hook", "::1"),
        ("http://[fd00::1]/hook", "fd00::1"),
        ("https://93.184.216.34/hook", None),
    ],
)
def test_non_public_callback_addresses_are_named(url: str, refused: str | None) -> None:
    assert webhooks.resolve_callback(url)[1] == refused


@committing
def test_an_unreachable_receiver_is_recorded_and_retried(
    make_request: Any, complete: Any, clock: Clock
) -> None:
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    complete(make_request(callback_url=f"http://127.0.0.1:{port}/hook"))

    delivery = only_delivery()
    assert (delivery.status, delivery.attempts, delivery.last_status_code) == ("pending", 1, None)
    assert "ConnectError" in delivery.last_error


@committing
def test_a_slow_receiver_holds_the_reviewers_answer_only_briefly(
    receiver: Receiver, make_request: Any, complete: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhooks, "EAGER_TIMEOUT_SECONDS", 0.3)
    receiver.delay = 3
    started = time.monotonic()
    completed = complete(make_request(callback_url=receiver.url))

    assert time.monotonic() - started < 2
    assert completed.status == "completed"  # the answer stands whatever the webhook does
    delivery = only_delivery()
    assert (delivery.status, delivery.attempts) == ("pending", 1)
    assert "Timeout" in delivery.last_error


@committing
def test_a_broker_outage_while_queueing_leaves_the_delivery_to_the_sweep(
    receiver: Receiver, make_request: Any, complete: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broker_down(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("broker unavailable")

    monkeypatch.setattr(tasks.deliver_webhook, "delay", broker_down)
    completed = complete(make_request(callback_url=receiver.url))

    assert completed.status == "completed"
    assert receiver.calls == []
    assert only_delivery().status == "pending"
    monkeypatch.undo()

    assert tasks.retry_due_webhooks() == 1
    assert len(receiver.wait_for(1)) == 1
    assert only_delivery().status == "delivered"


@committing
def test_with_a_broker_a_failed_attempt_schedules_the_next_by_countdown(
    receiver: Receiver, make_request: Any, complete: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    receiver.script = [500, 500]
    scheduled: list[tuple[Any, float]] = []
    monkeypatch.setattr(tasks.deliver_webhook, "delay", lambda *args: None)  # leave the first to the "worker"
    complete(make_request(callback_url=receiver.url))
    delivery = only_delivery()

    monkeypatch.setattr(
        tasks.deliver_webhook,
        "apply_async",
        lambda args, countdown: scheduled.append((args, countdown)),
    )
    # Called directly, as a worker runs it (not eager).
    assert tasks.deliver_webhook(str(delivery.pk)) == "pending"

    delivery.refresh_from_db()
    assert delivery.attempts == 1
    [(args, countdown)] = scheduled
    assert args == (str(delivery.pk),)
    assert 0 <= countdown <= 2
    assert delivery.next_attempt_at is not None


@committing
def test_an_attempt_in_flight_is_not_started_twice(
    receiver: Receiver, make_request: Any, complete: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tasks.deliver_webhook, "delay", lambda *args: None)
    complete(make_request(callback_url=receiver.url))
    delivery = only_delivery()

    assert webhooks.claim_attempt(str(delivery.pk)) is True
    assert webhooks.claim_attempt(str(delivery.pk)) is False  # the sweep and a countdown task racing
    assert webhooks.attempt_delivery(str(delivery.pk), timeout=1).status == "skipped"
    assert receiver.calls == []


def test_backoff_doubles_from_the_base_up_to_the_cap_with_full_jitter(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.WEBHOOK_BACKOFF_BASE_SECONDS = 2
    settings.WEBHOOK_BACKOFF_CAP_SECONDS = 600
    monkeypatch.setattr(webhooks.random, "uniform", lambda low, high: (low, high))
    assert [webhooks.retry_delay(n) for n in range(1, 11)] == [
        (0, 2.0),
        (0, 4.0),
        (0, 8.0),
        (0, 16.0),
        (0, 32.0),
        (0, 64.0),
        (0, 128.0),
        (0, 256.0),
        (0, 512.0),
        (0, 600.0),
    ]


@pytest.mark.parametrize(
    "header",
    [
        "",
        "v1=abc",
        "t=notanumber,v1=abc",
        "t=1,t=2,v1=abc",
        "garbage",
    ],
)
def test_malformed_signature_headers_do_not_verify(header: str) -> None:
    assert readme_verify_signature()("whsec_x", header, b"{}") is False


def test_a_signature_verifies_only_within_the_tolerance_and_with_any_matching_v1() -> None:
    verify = readme_verify_signature()
    body = b'{"type":"completed"}'
    header = webhooks.signature_header("whsec_s", body, timestamp=1_000_000)

    assert verify("whsec_s", header, body, now=1_000_000 + 299)
    assert not verify("whsec_s", header, body, now=1_000_000 + 301)  # a replay of an old delivery
    assert not verify("whsec_s", header, body, now=1_000_000 - 301)
    rotated = header + ",v1=" + "0" * 64
    assert verify("whsec_s", "t=1000000,v1=" + "0" * 64 + "," + header.split(",")[1], body, now=1_000_000)
    assert verify("whsec_s", rotated, body, now=1_000_000)
