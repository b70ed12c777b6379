"""An agent's create never waits on reach. Embedded (eager tasks), notices are sent by the process's background
senders after the create's commit: a Slack that is slow or hangs costs the create nothing, the notice still
arrives, and a hung peer costs only its own notices, not the other channel's.

The Slack stand-in holds every chat.postMessage until the test releases it, so "the create returned before Slack
answered" is an order of events, not a race against a clock."""

import threading
import time
from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.delivery import background, notices
from elicitation.models import Channel, Notice, NoticeStatus, Queue, ReachRule
from tests.delivery.reach.conftest import FakeSlack, Mailbox

pytestmark = pytest.mark.django_db(transaction=True)

# Generous: the background senders share two cores with the rest of the suite.
SETTLE_SECONDS = 30
YES_NO = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}


class HeldPosts:
    """Makes the fake Slack hold each chat.postMessage until `released` is set (or `hold_seconds` pass)."""

    def __init__(self, slack: FakeSlack, hold_seconds: float) -> None:
        self.hold_seconds = hold_seconds
        self.asked = threading.Event()
        self.released = threading.Event()
        self.answered_at: float | None = None
        self._answer = slack.answer
        slack.answer = self.answer  # type: ignore[method-assign]

    def answer(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if method == "chat.postMessage":
            self.asked.set()
            self.released.wait(self.hold_seconds)
            self.answered_at = time.monotonic()
        return self._answer(method, body)


@pytest.fixture(autouse=True)
def fresh_peer_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Slack these tests hang stays paused for this test only."""
    monkeypatch.setattr(notices, "peers", notices.PeerWatch())


@pytest.fixture
def held_slack(slack_api: FakeSlack, queue: Queue) -> Iterator[HeldPosts]:
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1")
    held = HeldPosts(slack_api, hold_seconds=SETTLE_SECONDS)
    yield held
    held.released.set()
    # The background senders finish before the test's rows are flushed.
    wait_until(lambda: background.unfinished() == 0)


@pytest.fixture
def mailed_member(queue: Queue, reviewer: User) -> User:
    reviewer.email = "alice@example.com"
    reviewer.save()
    # Created after the Slack rule: a sender that went channel by channel would post to Slack first.
    ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")
    return reviewer


def wait_until(condition: Any, seconds: float = SETTLE_SECONDS) -> bool:
    give_up = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > give_up:
            return False
        time.sleep(0.02)
    return True


def create(client: APIClient) -> tuple[str, float]:
    body = {"queue": "payments", "message": "Deploy?", "mode": "form", "requestedSchema": YES_NO}
    response = client.post("/api/v1/requests", body, format="json")
    returned_at = time.monotonic()
    assert response.status_code == 201, response.content
    return response.json()["id"], returned_at


def notice(request_id: str, channel: str) -> Notice | None:
    """The request's notice on that channel, once the background sender has recorded it."""
    return Notice.objects.filter(request_id=UUID(request_id), channel=channel).first()


def status(request_id: str, channel: str) -> str:
    found = notice(request_id, channel)
    return found.status if found else "not recorded yet"


def test_the_create_returns_before_a_slow_slack_answers_and_the_post_still_arrives(
    held_slack: HeldPosts, slack_api: FakeSlack, agent_client: APIClient, settings: Any
) -> None:
    settings.SLACK_TIMEOUT_SECONDS = 60  # the client waits as long as Slack takes
    request_id, returned_at = create(agent_client)
    assert held_slack.answered_at is None  # the agent had its 201 while Slack had not answered
    assert held_slack.asked.wait(SETTLE_SECONDS)  # a background sender is at Slack, held there

    held_slack.released.set()
    assert wait_until(lambda: status(request_id, Channel.SLACK) == NoticeStatus.SENT)
    assert held_slack.answered_at is not None and held_slack.answered_at > returned_at
    sent = Notice.objects.get(request_id=UUID(request_id), channel=Channel.SLACK)
    assert (sent.slack_channel, sent.slack_ts, sent.attempts) == ("C1", "1700000000.000001", 1)
    assert len(slack_api.named("chat.postMessage")) == 1


def test_a_held_slack_does_not_hold_up_the_email_of_the_same_arrival(
    held_slack: HeldPosts,
    mailed_member: User,
    smtp_server: Mailbox,
    agent_client: APIClient,
    settings: Any,
) -> None:
    settings.SLACK_TIMEOUT_SECONDS = 60
    request_id, _ = create(agent_client)
    assert len(smtp_server.wait_for(1, timeout=SETTLE_SECONDS)) == 1
    assert held_slack.answered_at is None  # the mail got through while Slack still held its post
    assert smtp_server.recipients == [["alice@example.com"]]

    held_slack.released.set()
    assert wait_until(lambda: status(request_id, Channel.SLACK) == NoticeStatus.SENT)
    assert status(request_id, Channel.EMAIL) == NoticeStatus.SENT


def test_a_hung_slack_costs_the_create_nothing_and_only_its_own_notice(
    held_slack: HeldPosts,
    mailed_member: User,
    smtp_server: Mailbox,
    agent_client: APIClient,
    settings: Any,
) -> None:
    settings.SLACK_TIMEOUT_SECONDS = 3  # Slack never answers: the client gives up after 3 s
    request_id, _ = create(agent_client)
    # Read as the 201 arrives: a create that had waited on the hung Slack would find its attempt over already.
    at_201 = notice(request_id, Channel.SLACK)
    assert at_201 is None or at_201.attempts == 0

    def slack_attempt_failed() -> bool:
        found = notice(request_id, Channel.SLACK)
        return found is not None and found.status == NoticeStatus.PENDING and found.attempts == 1

    assert wait_until(slack_attempt_failed)
    failed = Notice.objects.get(request_id=UUID(request_id), channel=Channel.SLACK)
    assert "timed out" in failed.reason and failed.next_attempt_at is not None and failed.slack_ts == ""
    assert held_slack.answered_at is None  # still hung: the attempt ended on ReviewHub's side
    assert len(smtp_server.wait_for(1, timeout=SETTLE_SECONDS)) == 1
    assert wait_until(lambda: status(request_id, Channel.EMAIL) == NoticeStatus.SENT)
