"""Fan-out that scales: one task per window of arrivals, on the `notices` queue, recording them with routing's
reads once and one insert, whatever the window's size, and each notice sent from its channel's senders; one task
per batch of one channel for what `notify_tier` still records; a batch's mails over one SMTP connection, a refused
one failing alone; a hung SMTP server waited on once per batch, not once per mail; one Slack client per token in a
process; each notice still sent once when two workers take the same batch or record the same window, and a notice
whose first attempt was lost sent by the retry sweep after its lease."""

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, time
from time import monotonic, sleep
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from django.contrib.auth.models import User
from django.core import mail
from django.db import connection
from django.test.utils import CaptureQueriesContext

from elicitation.delivery import background, notices, reach_tasks, slack
from elicitation.models import (
    Channel,
    ElicitationRequest,
    Notice,
    NoticeStatus,
    Queue,
    ReachRule,
    ReviewerReach,
)
from reviewhub import celery_app
from tests.delivery.reach.conftest import FakeSlack, free_port
from tests.races import at_once


@dataclass
class Connections:
    """What the SMTP server saw: the client's address of each accepted message (one per connection)."""

    peers: list[Any] = field(default_factory=list)
    recipients: list[str] = field(default_factory=list)
    refuse: set[str] = field(default_factory=set)  # answer mail to these addresses with a temporary failure

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        if set(envelope.rcpt_tos) & self.refuse:
            return "451 Try again later"
        self.peers.append(session.peer)
        self.recipients.extend(envelope.rcpt_tos)
        return "250 Message accepted for delivery"


@pytest.fixture(autouse=True)
def fresh_peer_watch(monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer these tests make silent stays paused for this test only."""
    monkeypatch.setattr(notices, "peers", notices.PeerWatch())


@pytest.fixture
def smtp_connections(settings: Any) -> Iterator[Connections]:
    seen = Connections()
    port = free_port()
    controller = Controller(seen, hostname="127.0.0.1", port=port)
    controller.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", port
    settings.EMAIL_USE_TLS, settings.EMAIL_TIMEOUT = False, 5
    yield seen
    controller.stop()


@pytest.fixture
def members(make_reviewer: Callable[..., User], queue: Queue) -> Callable[[int], list[User]]:
    def make(count: int) -> list[User]:
        people = [make_reviewer(f"member{i}", queue) for i in range(count)]
        for person in people:
            person.email = f"{person.username}@example.com"
            person.save()
        ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")
        return people

    return make


def sent_to(request: ElicitationRequest, channel: str = Channel.EMAIL) -> list[str]:
    return sorted(
        Notice.objects.filter(request=request, channel=channel, status=NoticeStatus.SENT).values_list(
            "recipient", flat=True
        )
    )


# --- one task per (channel, batch), on the notices queue ----------------------------------------------------------


def test_an_arrival_is_one_task_per_batch_of_one_channel(
    members: Callable[[int], list[User]],
    queue: Queue,
    slack_api: FakeSlack,
    make_request: Callable[..., ElicitationRequest],
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.NOTICE_BATCH_SIZE = 5
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1")
    members(12)
    queued: list[list[int]] = []
    monkeypatch.setitem(celery_app.conf, "task_always_eager", False)  # as with a broker
    monkeypatch.setattr(reach_tasks.send_notices, "delay", queued.append)
    request = make_request()

    assert reach_tasks.notify_tier(str(request.pk), 0) == 13
    # The e-mails in three tasks of their own; the first batch (the Slack post) sent by the task that recorded it.
    assert [len(batch) for batch in queued] == [5, 5, 2]
    queued_channels = Notice.objects.filter(pk__in=[pk for batch in queued for pk in batch]).values("channel")
    assert {row["channel"] for row in queued_channels} == {Channel.EMAIL}
    assert mail.outbox == []
    assert [call.body["channel"] for call in slack_api.named("chat.postMessage")] == ["C1"]
    assert sent_to(request, Channel.SLACK) == ["slack:C1"]
    recorded = Notice.objects.filter(request=request, channel=Channel.EMAIL).values_list("pk", flat=True)
    assert sorted(pk for batch in queued for pk in batch) == sorted(recorded)


def test_notices_have_a_queue_of_their_own_and_sweeps_and_answers_do_not() -> None:
    def queue_of(task: str) -> str:
        return str(celery_app.amqp.router.route({}, task, (), {})["queue"].name)

    for task in (
        "notify_arrivals",
        "notify_tier",
        "send_notices",
        "send_notice",
        "update_slack_messages",
        "send_reach_digests",
    ):
        assert queue_of(f"elicitation.delivery.reach_tasks.{task}") == "notices"
    for task in (
        "elicitation.delivery.reach_tasks.retry_due_notices",
        "elicitation.delivery.reach_tasks.run_escalation_chain",
        "elicitation.delivery.tasks.deliver_webhook",
        "elicitation.ops.tasks.expire_overdue_requests",
    ):
        assert queue_of(task) == "celery"
    # A worker started without -Q consumes both.
    assert set(celery_app.amqp.queues) == {"celery", "notices"}


# --- one task per window of arrivals -----------------------------------------------------------------------------


def recorded_while_counting(arrivals: list[tuple[Any, int]]) -> tuple[list[Notice], int]:
    with CaptureQueriesContext(connection) as queries:
        taken = notices.record_arrivals(arrivals)
    return taken, len(queries.captured_queries)


def test_a_window_of_arrivals_is_recorded_with_as_many_queries_as_one_arrival(
    members: Callable[[int], list[User]],
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1")
    people = members(3)
    alone, *window = [make_request() for _ in range(6)]

    taken_alone, queries_alone = recorded_while_counting([(str(alone.pk), 0)])
    taken, queries = recorded_while_counting([(str(request.pk), 0) for request in window])
    assert queries == queries_alone  # routing's reads once per queue and tier; one insert for all
    assert len(taken_alone) == 4 and len(taken) == 5 * 4
    for request in window:
        told = Notice.objects.filter(request=request)
        assert sorted(told.values_list("recipient", flat=True)) == sorted(
            ["slack:C1", *(f"user:{person.pk}" for person in people)]
        )
    # Recorded as taken by the recorder, with a lease; each with what its message says.
    for notice in taken:
        assert notice.status == NoticeStatus.SENDING and notice.next_attempt_at is not None
        assert notice.attempts == 0 and notice.request.queue == queue
        assert Notice.objects.get(pk=notice.pk).status == NoticeStatus.SENDING


def test_each_request_of_a_window_is_routed_by_its_own_priority_and_each_reader_by_their_preferences(
    clock: Any,
    members: Callable[[int], list[User]],
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    asleep, digest, awake = members(3)
    clock.current = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    ReviewerReach.objects.create(user=asleep, quiet_start=time(11, 0), quiet_end=time(13, 0))
    ReviewerReach.objects.create(user=digest, email_mode="digest")
    ReachRule.objects.create(
        queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="URGENT", min_priority=5
    )
    low, high = make_request(priority=1), make_request(priority=9)

    taken = notices.record_arrivals([(str(low.pk), 0), (str(high.pk), 0)])
    assert sorted((n.request_id == high.pk, n.recipient) for n in taken) == sorted(
        [(False, f"user:{awake.pk}"), (True, f"user:{awake.pk}"), (True, "slack:URGENT")]
    )
    held = Notice.objects.exclude(status=NoticeStatus.SENDING)
    assert sorted((n.user_id, n.status, n.reason) for n in held) == sorted(
        [
            (asleep.pk, NoticeStatus.SKIPPED, "quiet hours"),
            (asleep.pk, NoticeStatus.SKIPPED, "quiet hours"),
            (digest.pk, NoticeStatus.DIGEST, ""),
            (digest.pk, NoticeStatus.DIGEST, ""),
        ]
    )


def test_a_window_tells_nobody_twice_about_a_request_told_before(
    members: Callable[[int], list[User]],
    make_request: Callable[..., ElicitationRequest],
) -> None:
    people = members(2)
    request = make_request()
    assert len(notices.record_arrivals([(str(request.pk), 0)])) == 2
    # The same arrival again (a task delivered twice), twice in one window, and as tier 1 to the same people.
    assert notices.record_arrivals([(str(request.pk), 0), (str(request.pk), 0), (str(request.pk), 1)]) == []
    assert Notice.objects.filter(request=request).count() == len(people)


def test_a_window_sends_every_notice_once_from_its_channels_senders(
    members: Callable[[int], list[User]],
    queue: Queue,
    slack_api: FakeSlack,
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1")
    people = members(2)
    window = [make_request() for _ in range(3)]

    assert reach_tasks.notify_arrivals([[str(request.pk), 0] for request in window]) == 3 * 3
    posted = slack_api.named("chat.postMessage")
    assert [call.body["channel"] for call in posted] == ["C1"] * 3
    for request in window:
        assert sum(str(request.pk) in str(call.body) for call in posted) == 1
    assert sorted(smtp_connections.recipients) == sorted(3 * [person.email for person in people])
    for request in window:
        assert sent_to(request) == sorted(f"user:{person.pk}" for person in people)
        assert sent_to(request, Channel.SLACK) == ["slack:C1"]
    slack_notice = Notice.objects.filter(channel=Channel.SLACK).first()
    assert slack_notice is not None and (slack_notice.attempts, slack_notice.reason) == (1, "")
    assert slack_notice.slack_ts.startswith("1700000000.")


def test_a_notice_a_window_took_is_left_to_it_until_its_lease_runs_out(
    clock: Any,
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    [person] = members(1)
    request = make_request()
    # Recorded, then its sender was lost with its process before sending.
    [taken] = notices.record_arrivals([(str(request.pk), 0)])
    assert notices.send_notices([taken.pk]) == {}  # another worker's batch may not take it
    assert notices.due_notice_batches() == []
    assert smtp_connections.recipients == []
    clock.advance(seconds=notices.SENDING_LEASE.total_seconds() + 1)
    assert reach_tasks.retry_due_notices() == 1
    assert smtp_connections.recipients == [person.email]
    assert sent_to(request) == [f"user:{person.pk}"]


def test_a_notice_that_waited_for_a_sender_is_not_sent_for_a_request_closed_meanwhile(
    clock: Any,
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    members(1)
    request = make_request()
    [taken] = notices.record_arrivals([(str(request.pk), 0)])
    ElicitationRequest.objects.filter(pk=request.pk).update(status="withdrawn")
    clock.advance(seconds=notices.RECHECK_AFTER.total_seconds() + 1)  # a backlog held it
    assert notices.send_taken(taken) is None
    assert smtp_connections.recipients == []
    skipped = Notice.objects.get(pk=taken.pk)
    assert (skipped.status, skipped.reason) == (NoticeStatus.SKIPPED, "closed before sending")


def test_a_notice_whose_sender_came_after_the_retry_sweep_took_it_is_not_sent_again(
    clock: Any,
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    [person] = members(1)
    request = make_request()
    [taken] = notices.record_arrivals([(str(request.pk), 0)])
    clock.advance(seconds=notices.SENDING_LEASE.total_seconds() + 1)  # its sender waited past the lease
    assert reach_tasks.retry_due_notices() == 1
    assert notices.send_taken(taken) is None  # the sender comes at last: the sweep has sent it
    assert smtp_connections.recipients == [person.email]
    assert sent_to(request) == [f"user:{person.pk}"]


def test_a_notice_whose_sender_waited_past_its_lease_with_no_sweep_meanwhile_goes_out_once(
    clock: Any,
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    [person] = members(1)
    request = make_request()
    [taken] = notices.record_arrivals([(str(request.pk), 0)])
    clock.advance(seconds=notices.SENDING_LEASE.total_seconds() + 1)  # no sweep ran meanwhile
    assert notices.send_taken(taken) is None
    assert smtp_connections.recipients == [person.email]
    assert notices.due_notice_batches() == []
    assert sent_to(request) == [f"user:{person.pk}"]


@pytest.mark.django_db(transaction=True)
def test_two_workers_recording_the_same_window_tell_each_person_once(
    members: Callable[[int], list[User]],
    queue: Queue,
    slack_api: FakeSlack,
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    window = [make_request() for _ in range(4)]  # before the rules: their commits queue nothing
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1")
    people = members(3)
    arrived = [[str(request.pk), 0] for request in window]
    at_once(lambda: reach_tasks.notify_arrivals(arrived), lambda: reach_tasks.notify_arrivals(arrived))
    assert wait_until(lambda: background.unfinished() == 0)
    assert sorted(smtp_connections.recipients) == sorted(len(window) * [person.email for person in people])
    assert len(slack_api.named("chat.postMessage")) == len(window)
    for request in window:
        assert sent_to(request) == sorted(f"user:{person.pk}" for person in people)


def wait_until(condition: Callable[[], bool], seconds: float = 30) -> bool:
    give_up = monotonic() + seconds
    while not condition():
        if monotonic() > give_up:
            return False
        sleep(0.01)
    return True


# --- e-mail: one connection per batch -----------------------------------------------------------------------------


def test_a_batch_of_mails_goes_over_one_smtp_connection(
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    people = members(4)
    request = make_request()
    [batch] = notices.record_notice_batches(request.pk, 0)

    assert notices.send_notices(batch) == {}
    assert sorted(smtp_connections.recipients) == sorted(person.email for person in people)
    assert len(set(smtp_connections.peers)) == 1
    assert sent_to(request) == sorted(f"user:{person.pk}" for person in people)


def test_a_refused_mail_fails_alone_and_the_rest_go_through_on_the_same_connection(
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    first, refused, third = members(3)
    smtp_connections.refuse = {refused.email}
    request = make_request()
    [batch] = notices.record_notice_batches(request.pk, 0)

    retries = notices.send_notices(batch)
    assert smtp_connections.recipients == [first.email, third.email]
    assert len(set(smtp_connections.peers)) == 1
    failed = Notice.objects.get(request=request, user=refused)
    assert list(retries) == [failed.pk] and retries[failed.pk] > 0
    assert (failed.status, failed.attempts) == (NoticeStatus.PENDING, 1) and "451" in failed.reason
    assert sent_to(request) == sorted([f"user:{first.pk}", f"user:{third.pk}"])


def test_a_hung_smtp_server_is_waited_on_once_per_batch(
    members: Callable[[int], list[User]],
    make_request: Callable[..., ElicitationRequest],
    settings: Any,
) -> None:
    # Takes connections and never greets them.
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(16)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def take_connections() -> None:
        hung.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(hung.accept()[0])
            except TimeoutError:
                continue

    taker = threading.Thread(target=take_connections, daemon=True)
    taker.start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", hung.getsockname()[1], 1
    try:
        members(3)
        request = make_request()
        [batch] = notices.record_notice_batches(request.pk, 0)
        retries = notices.send_notices(batch)
    finally:
        stop.set()
        taker.join()
        for conn in accepted:
            conn.close()
        hung.close()
    assert len(accepted) == 1  # one connection tried, not one per mail
    assert sorted(retries) == sorted(batch)
    first, *rest = Notice.objects.filter(pk__in=batch).order_by("pk")
    assert (first.status, first.attempts) == (NoticeStatus.PENDING, 1) and "timed out" in first.reason
    for notice in rest:
        assert (notice.status, notice.attempts) == (NoticeStatus.PENDING, 1) and "not tried" in notice.reason


class HungPosts:
    """Makes the fake Slack take each chat.postMessage and not answer until `released` is set."""

    def __init__(self, slack_api: FakeSlack) -> None:
        self.released = threading.Event()
        self.asked = 0
        self._answer = slack_api.answer
        slack_api.answer = self.answer  # type: ignore[method-assign]

    def answer(self, method: str, body: dict[str, Any]) -> dict[str, Any]:
        if method == "chat.postMessage":
            self.asked += 1
            self.released.wait(30)
        return self._answer(method, body)


def test_a_slack_that_did_not_answer_is_left_alone_for_a_while_then_tried_once(
    clock: Any,
    slack_api: FakeSlack,
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
    settings: Any,
) -> None:
    settings.SLACK_TIMEOUT_SECONDS = 1
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1")
    first, second, third = ([notices.record_notice_batches(make_request().pk, 0)[0][0]] for _ in range(3))
    hung = HungPosts(slack_api)
    try:
        assert list(notices.send_notices(first)) == first  # the client gave up after its timeout
        assert list(notices.send_notices(second)) == second  # failed at once: no second thread held a timeout
        assert hung.asked == 1
    finally:
        hung.released.set()
    assert "timed out" in Notice.objects.get(pk=first[0]).reason
    assert "not tried" in Notice.objects.get(pk=second[0]).reason

    clock.advance(seconds=notices.PEER_PAUSE.total_seconds() + 1)  # Slack answers again by now
    assert notices.send_notices(third) == {}  # the one call that finds out
    assert Notice.objects.get(pk=third[0]).status == NoticeStatus.SENT
    clock.advance(seconds=settings.NOTICE_BACKOFF_CAP_SECONDS)
    assert notices.send_notices(first + second) == {}
    assert Notice.objects.filter(status=NoticeStatus.SENT).count() == 3
    assert hung.asked == 4


def test_while_one_notice_finds_out_whether_a_peer_is_back_the_others_still_wait() -> None:
    watch, then = notices.PeerWatch(), datetime(2026, 1, 1, tzinfo=UTC)
    watch.admit(Channel.SLACK, then)  # never silent: every call goes out
    watch.silent(Channel.SLACK, then)
    with pytest.raises(notices.PeerSilent):
        watch.admit(Channel.SLACK, then + notices.PEER_PAUSE / 2)
    watch.admit(Channel.EMAIL, then)  # the other channel is not held back

    after = then + notices.PEER_PAUSE
    watch.admit(Channel.SLACK, after)  # the one that finds out
    with pytest.raises(notices.PeerSilent):
        watch.admit(Channel.SLACK, after)
    watch.silent(Channel.SLACK, after)  # still silent: paused again
    with pytest.raises(notices.PeerSilent):
        watch.admit(Channel.SLACK, after + notices.PEER_PAUSE / 2)

    later = after + notices.PEER_PAUSE
    watch.admit(Channel.SLACK, later)
    watch.answered(Channel.SLACK)  # back: everyone goes out again
    watch.admit(Channel.SLACK, later)
    watch.admit(Channel.SLACK, later)


# --- Slack: one client per token ----------------------------------------------------------------------------------


def test_the_slack_client_is_made_once_per_token_and_shared(slack_api: FakeSlack, settings: Any) -> None:
    first = slack.client()
    assert slack.client() is first
    assert first.ssl is not None  # its TLS context too: CA certificates loaded once, not per post
    made_in_threads: list[Any] = []
    threads = [threading.Thread(target=lambda: made_in_threads.append(slack.client())) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(made is first for made in made_in_threads)
    settings.SLACK_BOT_TOKEN = "xoxb-another-workspace"
    assert slack.client() is not first and slack.client().token == "xoxb-another-workspace"


def test_a_batch_of_slack_posts_tells_each_linked_reviewer_once(
    slack_api: FakeSlack,
    make_reviewer: Callable[..., User],
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    people = [make_reviewer(f"linked{i}", queue) for i in range(3)]
    for index, person in enumerate(people):
        ReviewerReach.objects.create(user=person, slack_user_id=f"U{index}")
    ReachRule.objects.create(queue=queue, channel=Channel.SLACK, audience="members")
    request = make_request()
    [batch] = notices.record_notice_batches(request.pk, 0)

    assert notices.send_notices(batch) == {}
    assert notices.send_notices(batch) == {}  # a second delivery of the same task sends nothing
    assert sorted(call.body["channel"] for call in slack_api.named("chat.postMessage")) == ["U0", "U1", "U2"]
    assert sent_to(request, Channel.SLACK) == sorted(f"user:{person.pk}" for person in people)


# --- told once, whatever happens to the tasks ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_two_workers_sending_the_same_batch_send_each_mail_once(
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    request = make_request()  # before the rule: its own commit queues nothing to the background senders
    people = members(6)
    [batch] = notices.record_notice_batches(request.pk, 0)
    at_once(lambda: notices.send_notices(batch), lambda: notices.send_notices(batch))
    assert sorted(smtp_connections.recipients) == sorted(person.email for person in people)
    assert sent_to(request) == sorted(f"user:{person.pk}" for person in people)


def test_a_notice_whose_first_attempt_was_lost_is_sent_by_the_retry_sweep_after_its_lease(
    clock: Any,
    members: Callable[[int], list[User]],
    smtp_connections: Connections,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    [person] = members(1)
    request = make_request()
    # Recorded, then its task was lost (a dropped job, a process stopped before sending it).
    [batch] = notices.record_notice_batches(request.pk, 0)
    assert notices.due_notice_batches() == []  # the first attempt may still be on its way
    clock.advance(seconds=notices.SENDING_LEASE.total_seconds() + 1)
    assert notices.due_notice_batches() == [batch]

    assert reach_tasks.retry_due_notices() == 1  # eager here: the batch is sent in place
    assert smtp_connections.recipients == [person.email]
    assert notices.due_notice_batches() == []
    assert sent_to(request) == [f"user:{person.pk}"]
