"""Member emails: urgent arrivals and near deadlines, batched so that a burst sends one message."""

from datetime import timedelta

import pytest
from django.core import mail

from elicitation.models import Queue, RequestEvent
from elicitation.ops import notifications, sweeper
from elicitation.queue import transitions


@pytest.fixture
def urgent_queue(queue: Queue, make_reviewer) -> Queue:
    queue.priority_threshold = 5
    queue.save()
    for name in ("dora", "erin"):
        user = make_reviewer(name, queue)
        user.email = f"{name}@example.test"
        user.save()
    make_reviewer("noemail", queue)  # members without an address are skipped, not an error
    return queue


def test_a_burst_of_fifty_urgent_requests_sends_exactly_one_message(
    make_request, urgent_queue, clock
) -> None:
    requests = [make_request(priority=5 + i % 3, message=f"Urgent #{i}") for i in range(50)]
    assert notifications.send_due_digests() == 0  # the window the first one opened is still running
    clock.advance(seconds=30)
    assert notifications.send_due_digests() == 0
    assert mail.outbox == []

    clock.advance(seconds=31)
    assert notifications.send_due_digests() == 1
    assert notifications.send_due_digests() == 0
    clock.advance(seconds=600)
    assert notifications.send_due_digests() == 0

    [message] = mail.outbox
    assert sorted(message.to) == ["dora@example.test", "erin@example.test"]
    assert "50 request(s)" in message.subject
    for request in requests:
        assert f"/requests/{request.pk}/" in message.body
    assert RequestEvent.objects.filter(kind="notified_urgent").count() == 50


def test_urgent_requests_arriving_during_the_window_join_the_same_digest(
    make_request, urgent_queue, clock
) -> None:
    first = make_request(priority=9, message="first")
    clock.advance(seconds=40)
    late = make_request(priority=9, message="late")
    clock.advance(seconds=21)

    assert notifications.send_due_digests() == 1
    [message] = mail.outbox
    assert f"/requests/{first.pk}/" in message.body
    assert f"/requests/{late.pk}/" in message.body


def test_a_second_burst_gets_its_own_message_a_window_later(make_request, urgent_queue, clock) -> None:
    make_request(priority=9)
    clock.advance(seconds=61)
    notifications.send_due_digests()
    second = make_request(priority=9, message="second burst")

    clock.advance(seconds=30)
    assert notifications.send_due_digests() == 0
    clock.advance(seconds=31)
    assert notifications.send_due_digests() == 1
    assert len(mail.outbox) == 2
    assert f"/requests/{second.pk}/" in mail.outbox[1].body


def test_requests_below_the_threshold_send_nothing(make_request, urgent_queue, clock) -> None:
    for _ in range(5):
        make_request(priority=4)
    clock.advance(seconds=61)
    assert notifications.send_due_digests() == 0
    assert mail.outbox == []


def test_a_queue_without_threshold_never_mails_about_arrivals(
    make_request, queue, make_reviewer, clock
) -> None:
    user = make_reviewer("carol", queue)
    user.email = "carol@example.test"
    user.save()
    make_request(priority=100)
    clock.advance(seconds=61)
    assert notifications.send_due_digests() == 0


def test_urgent_requests_handled_within_the_window_are_not_mailed(
    make_request, urgent_queue, reviewer, agent, clock
) -> None:
    request = make_request(priority=9)
    transitions.withdraw_request(request.pk, agent=agent)
    clock.advance(seconds=61)
    assert notifications.send_due_digests() == 0
    assert mail.outbox == []


def test_a_near_deadline_sends_one_warning_for_pending_requests_only(
    make_request, urgent_queue, reviewer, clock
) -> None:
    # 600 s lifetime: 10 % is 60 s, raised to the 5-minute floor, which is within half the lifetime.
    waiting = make_request(priority=0)
    claimed = make_request(priority=0)
    transitions.claim_request(claimed.pk, user=reviewer)
    clock.advance(seconds=299)
    assert notifications.send_due_digests() == 0

    clock.advance(seconds=2)
    assert notifications.send_due_digests() == 1
    [message] = mail.outbox
    assert "Deadlines near" in message.body
    assert f"/requests/{waiting.pk}/" in message.body
    assert f"/requests/{claimed.pk}/" not in message.body

    clock.advance(seconds=120)
    assert notifications.send_due_digests() == 0


def test_requests_too_short_lived_for_email_get_no_deadline_warning(
    make_request, urgent_queue, clock
) -> None:
    make_request(expires_in=90)
    clock.advance(seconds=80)
    assert notifications.send_due_digests() == 0
    assert mail.outbox == []


def test_members_without_email_are_never_mailed_and_nothing_is_marked(
    make_request, queue, make_reviewer, clock
) -> None:
    queue.priority_threshold = 1
    queue.save()
    make_reviewer("quiet", queue)
    make_request(priority=3)
    clock.advance(seconds=61)
    assert notifications.send_due_digests() == 0
    assert not RequestEvent.objects.filter(kind__startswith="notified").exists()


@pytest.mark.parametrize(
    ("lifetime", "warning"),
    [
        (timedelta(hours=1), timedelta(minutes=6)),
        (timedelta(minutes=10), timedelta(minutes=5)),
        (timedelta(minutes=2), timedelta(minutes=1)),
        (timedelta(hours=24), timedelta(hours=2, minutes=24)),
    ],
)
def test_deadline_warning_is_ten_percent_at_least_five_minutes_at_most_half(lifetime, warning, clock) -> None:
    start = clock.current
    assert notifications.deadline_warning(start, start + lifetime) == warning


def test_the_in_process_sweep_sends_the_digest(make_request, urgent_queue, clock) -> None:
    make_request(priority=9)
    clock.advance(seconds=61)

    results = sweeper.run_sweeps_once()

    assert results["send_notification_digests"] == 1
    assert len(mail.outbox) == 1


def test_a_failing_mail_server_marks_nothing_and_the_next_sweep_retries(
    make_request, urgent_queue, clock, monkeypatch
) -> None:
    make_request(priority=9)
    clock.advance(seconds=61)

    def refuse(self, fail_silently: bool = False) -> int:
        raise OSError("connection refused")

    with monkeypatch.context() as patched:
        patched.setattr("django.core.mail.EmailMessage.send", refuse)
        assert notifications.send_due_digests() == 0
        assert not RequestEvent.objects.filter(kind="notified_urgent").exists()

    assert notifications.send_due_digests() == 1
