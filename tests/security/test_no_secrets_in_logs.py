"""No credential reaches a log line: a full create → sign in → claim → answer → read flow runs with every logger
at DEBUG, and neither the agent key, the reviewer token, the password nor the session id appears anywhere."""

import logging
from collections.abc import Iterator
from typing import Any

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from elicitation.flows.redaction import RedactSecretsFilter
from elicitation.models import Queue
from elicitation.queue import accounts
from reviewhub.asgi import application
from tests.conftest import FORM_SCHEMA

pytestmark = pytest.mark.django_db(transaction=True)


class Capture(logging.Handler):
    """Formats every record the way a handler would (message, traceback, stack), raw or through the redaction
    filter every configured handler carries."""

    def __init__(self, redact: bool) -> None:
        super().__init__(level=logging.DEBUG)
        self.lines: list[str] = []
        if redact:
            self.addFilter(RedactSecretsFilter())
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        text = self.format(record)
        if record.stack_info:
            text += "\n" + record.stack_info
        extra = {
            key: value
            for key, value in vars(record).items()
            if key not in logging.LogRecord("", 0, "", 0, "", (), None).__dict__
        }
        self.lines.append(text + " " + repr(extra))


@pytest.fixture
def captured() -> Iterator[tuple[Capture, Capture]]:
    raw, redacted = Capture(redact=False), Capture(redact=True)
    root = logging.getLogger()
    saved = {
        name: logging.getLogger(name).level
        for name in ("", "django", "django.request", "django.channels.server")
    }
    root.addHandler(raw)
    root.addHandler(redacted)
    for name in saved:
        logging.getLogger(name).setLevel(logging.DEBUG)
    try:
        yield raw, redacted
    finally:
        root.removeHandler(raw)
        root.removeHandler(redacted)
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


async def agent_socket_round(key: str, request_id: str) -> list[dict[str, Any]]:
    communicator = WebsocketCommunicator(
        application,
        "/ws/agent/",
        headers=[(b"authorization", f"Bearer {key}".encode()), (b"host", b"testserver")],
    )
    connected, _ = await communicator.connect()
    assert connected
    await communicator.send_json_to({"type": "subscribe", "ids": [request_id]})
    await communicator.send_json_to({"type": "resume", "after": 0})
    frames = []
    while not await communicator.receive_nothing(timeout=0.5):
        frames.append(await communicator.receive_json_from(timeout=5))
    await communicator.disconnect()
    return frames


def test_a_full_flow_logs_no_credential_at_any_level(
    captured: tuple[Capture, Capture], queue: Queue, settings: Any
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    _agent, agent_key = accounts.create_agent("agent-a", queue_slugs=[queue.slug])
    user = User.objects.create_user("alice", password="alice-password-123")
    queue.members.add(user)
    reviewer_token = accounts.create_reviewer_token(user, name="script")

    agent_api = APIClient()
    agent_api.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_key}")
    created = agent_api.post(
        "/api/v1/requests",
        {
            "message": "Approve?",
            "requestedSchema": FORM_SCHEMA,
            "queue": queue.slug,
            "callbackUrl": "http://127.0.0.1:9/hook",  # nothing listens: the failed delivery is logged too
        },
        format="json",
        HTTP_IDEMPOTENCY_KEY="flow-1",
    )
    assert created.status_code == 201
    request_id = created.json()["id"]

    browser = Client()
    wrong = browser.post("/accounts/login/", {"username": "alice", "password": "not-" + "alice-password-123"})
    assert wrong.status_code == 200
    signed_in = browser.post("/accounts/login/", {"username": "alice", "password": "alice-password-123"})
    assert signed_in.status_code == 302
    session_id = browser.cookies["sessionid"].value
    assert browser.get(f"/requests/{request_id}/").status_code == 200
    assert browser.post(f"/requests/{request_id}/", {"action": "claim"}).status_code == 302

    token_api = APIClient()
    token_api.credentials(HTTP_AUTHORIZATION=f"Bearer {reviewer_token}")
    assert token_api.get(f"/api/v1/review/requests/{request_id}").status_code == 200
    invalid = token_api.post(
        f"/api/v1/review/requests/{request_id}/respond", {"action": "accept", "content": {}}, format="json"
    )
    assert invalid.status_code in (400, 409)
    session_api = APIClient()
    session_api.cookies["sessionid"] = session_id
    answered = session_api.post(
        f"/api/v1/review/requests/{request_id}/respond",
        {"action": "accept", "content": {"approve": True}},
        format="json",
    )
    assert answered.status_code == 200, answered.content

    assert agent_api.get(f"/api/v1/requests/{request_id}").json()["result"]["action"] == "accept"
    assert agent_api.get("/api/v1/events", {"after": 0}).status_code == 200
    from asgiref.sync import async_to_sync

    frames = async_to_sync(agent_socket_round)(agent_key, request_id)
    assert any(frame.get("status") == "completed" for frame in frames), frames
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_key[:-4]}zzzz")
    assert bad.get("/api/v1/requests").status_code == 401

    raw, redacted = captured
    assert redacted.lines, "nothing was logged: the capture is not wired"
    secrets = {
        "agent key": agent_key,
        "agent key body": agent_key.split("_", 2)[2],
        "reviewer token": reviewer_token,
        "reviewer token body": reviewer_token.split("_", 2)[2],
        "password": "alice-password-123",
        "session id": session_id,
    }
    for handler in (raw, redacted):
        text = "\n".join(handler.lines)
        leaked = [name for name, secret in secrets.items() if secret in text]
        assert leaked == [], ("raw records" if handler is raw else "redacted lines", leaked)
