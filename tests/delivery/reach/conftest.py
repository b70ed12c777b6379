"""Fixtures of the reach tests (autouse: eager Celery): a real SMTP server on loopback (aiosmtpd), a stand-in for Slack's Web API on
loopback that the real slack_sdk WebClient talks to and that records what it receives, signed interaction
bodies, and eager Celery (the services leg has a broker but no worker in tests)."""

import hashlib
import hmac
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlparse

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from reviewhub import celery_app

SIGNING_SECRET = "test-signing-secret"


@pytest.fixture(autouse=True)
def eager_celery() -> Iterator[None]:
    before = celery_app.conf.task_always_eager
    celery_app.conf.task_always_eager = True
    yield
    celery_app.conf.task_always_eager = before


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Mailbox:
    messages: list[Message] = field(default_factory=list)
    recipients: list[list[str]] = field(default_factory=list)
    refuse: int = 0  # answer the next N messages with a temporary failure

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Message]:
        give_up = time.monotonic() + timeout
        while len(self.messages) < count and time.monotonic() < give_up:
            time.sleep(0.01)
        return self.messages


class _Handler:
    def __init__(self, box: Mailbox) -> None:
        self.box = box

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if self.box.refuse > 0:
            self.box.refuse -= 1
            return "451 Try again later"
        content = envelope.original_content or b""
        self.box.messages.append(message_from_bytes(content))
        self.box.recipients.append(list(envelope.rcpt_tos))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp_server(settings: Any) -> Iterator[Mailbox]:
    """A real SMTP server on 127.0.0.1; Django's SMTP backend sends to it."""
    box = Mailbox()
    port = free_port()
    controller = Controller(_Handler(box), hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.EMAIL_USE_TLS = False
    settings.EMAIL_TIMEOUT = 5
    yield box
    controller.stop()


@dataclass
class SlackCall:
    method: str
    body: dict[str, Any]
    token: str


@dataclass
class FakeSlack:
    """Slack's Web API as far as ReviewHub uses it; `users` answers users.info by Slack user id."""

    url: str = ""
    calls: list[SlackCall] = field(default_factory=list)
    users: dict[str, dict[str, Any]] = field(default_factory=dict)
    fail_next: int = 0
    counter: int = 0

    def named(self, method: str) -> list[SlackCall]:
        return [call for call in self.calls if call.method == method]

    def answer(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.fail_next > 0:
            self.fail_next -= 1
            return {"ok": False, "error": "ratelimited"}
        if method == "chat.postMessage":
            self.counter += 1
            return {"ok": True, "channel": body.get("channel"), "ts": f"1700000000.{self.counter:06d}"}
        if method == "users.info":
            user = self.users.get(str(body.get("user")))
            return {"ok": True, "user": user} if user else {"ok": False, "error": "user_not_found"}
        return {"ok": True}


def _make_handler(state: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _serve(self) -> None:
            parsed = urlparse(self.path)
            method = parsed.path.rsplit("/", 1)[-1]
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body: dict[str, Any] = {k: v[0] for k, v in parse_qs(parsed.query).items()}
            if raw:
                if "json" in (self.headers.get("Content-Type") or ""):
                    body.update(json.loads(raw))
                else:
                    body.update({k: v[0] for k, v in parse_qs(raw.decode()).items()})
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
            state.calls.append(SlackCall(method, body, token))
            reply = json.dumps(state.answer(method, body)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        do_GET = _serve
        do_POST = _serve

    return Handler


@pytest.fixture
def slack_api(settings: Any) -> Iterator[FakeSlack]:
    """The Slack Web API on loopback; settings point slack_sdk's WebClient at it."""
    state = FakeSlack()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
    state.url = f"http://127.0.0.1:{server.server_address[1]}/api/"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    settings.SLACK_API_URL = state.url
    settings.SLACK_BOT_TOKEN = "xoxb-test-token"
    settings.SLACK_SIGNING_SECRET = SIGNING_SECRET
    yield state
    server.shutdown()
    server.server_close()


def signed_headers(body: bytes, timestamp: int | None = None, secret: str = SIGNING_SECRET) -> dict[str, str]:
    """The headers Slack sends: X-Slack-Request-Timestamp and the v0 HMAC-SHA256 signature of the body."""
    stamp = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": f"v0={digest}"}


def interaction_body(payload: dict[str, Any]) -> bytes:
    return urlencode({"payload": json.dumps(payload)}).encode()


PostInteraction = Callable[..., Any]
