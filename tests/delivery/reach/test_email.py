"""E-mail to reviewers through a real SMTP server on loopback: one per arrival with a deep link that carries no
credential, never twice, retried when the server refuses, digests for those who prefer them."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.delivery import notices
from elicitation.models import (
    Channel,
    ElicitationRequest,
    EmailMode,
    Notice,
    NoticeStatus,
    Queue,
    ReachRule,
    ReviewerReach,
)
from elicitation.queue import transitions
from tests.delivery.reach.conftest import Mailbox

LINK = re.compile(r"https?://\S+/requests/[0-9a-f-]{36}/")


@pytest.fixture
def members_by_email(queue: Queue, reviewer: User) -> User:
    reviewer.email = "alice@example.com"
    reviewer.save()
    ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")
    return reviewer


def test_an_arrival_is_mailed_through_smtp_with_a_deep_link(
    smtp_server: Mailbox,
    members_by_email: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        request = make_request(message="Approve transfer of 100 EUR to ACME?")
    [message] = smtp_server.wait_for(1)
    assert smtp_server.recipients == [["alice@example.com"]]
    assert "Payments" in message["Subject"]
    body = message.get_payload(decode=True).decode()
    assert "Approve transfer of 100 EUR to ACME?" in body
    assert LINK.findall(body) == [f"{settings.PUBLIC_URL}/requests/{request.pk}/"]
    notice = Notice.objects.get(request=request)
    assert notice.status == NoticeStatus.SENT and notice.sent_at is not None


def test_the_deep_link_carries_no_credential_and_still_asks_to_sign_in(
    smtp_server: Mailbox,
    members_by_email: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        make_request()
    body = smtp_server.wait_for(1)[0].get_payload(decode=True).decode()
    [link] = LINK.findall(body)
    assert "?" not in link and "token" not in link.lower() and "key" not in link.lower()
    response = Client().get(link.removeprefix(settings.PUBLIC_URL))
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


def test_nothing_is_mailed_for_a_request_that_rolls_back(
    smtp_server: Mailbox, members_by_email: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    # Without the commit (the test's transaction never commits), the on_commit send never runs.
    make_request()
    assert smtp_server.messages == []
    assert Notice.objects.count() == 0


def test_never_twice_for_the_same_request_and_reviewer(
    smtp_server: Mailbox,
    members_by_email: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        request = make_request()
    smtp_server.wait_for(1)
    # The fan-out running again (a retried task, a second worker) adds nobody and sends nothing.
    assert notices.record_notice_batches(request.pk, 0) == []
    for notice in Notice.objects.all():
        assert notices.send_notice(notice.pk) is None
    assert len(smtp_server.messages) == 1


def test_a_refused_message_is_retried_and_sent_once(
    clock: Any,
    smtp_server: Mailbox,
    members_by_email: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    smtp_server.refuse = 1
    with django_capture_on_commit_callbacks(execute=True):
        request = make_request()
    notice = Notice.objects.get(request=request)
    assert (notice.status, notice.attempts) == (NoticeStatus.PENDING, 1)
    assert "451" in notice.reason and smtp_server.messages == []
    assert notices.due_notice_batches() == []  # not before its backoff
    clock.advance(seconds=3600)
    assert notices.due_notice_batches() == [[notice.pk]]
    notices.send_notice(notice.pk)
    notices.send_notice(notice.pk)
    assert len(smtp_server.wait_for(1)) == 1
    notice.refresh_from_db()
    assert (notice.status, notice.attempts) == (NoticeStatus.SENT, 2)


def test_a_url_request_is_mailed_without_its_content(
    smtp_server: Mailbox,
    members_by_email: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        make_request(
            mode="url",
            requested_schema=None,
            url="https://bank.example.com/connect?session=s3cr3t",
            message="Connect the bank account 4242",
        )
    body = smtp_server.wait_for(1)[0].get_payload(decode=True).decode()
    assert "s3cr3t" not in body and "bank.example.com" not in body and "4242" not in body
    assert LINK.search(body)


def test_a_request_answered_before_sending_is_not_mailed(
    smtp_server: Mailbox, members_by_email: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request()
    # Recorded while open; the worker is slow to send.
    [[notice_id]] = notices.record_notice_batches(request.pk, 0)
    transitions.claim_request(request.pk, user=members_by_email)
    transitions.respond(request.pk, user=members_by_email, action="decline")
    assert notices.send_notice(notice_id) is None
    notice = Notice.objects.get(pk=notice_id)
    assert (notice.status, notice.reason) == (NoticeStatus.SKIPPED, "closed before sending")
    assert smtp_server.messages == []


def test_digest_readers_get_one_email_listing_what_is_still_open(
    clock: Any,
    smtp_server: Mailbox,
    members_by_email: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
    settings: Any,
) -> None:
    ReviewerReach.objects.create(user=members_by_email, email_mode=EmailMode.DIGEST)
    with django_capture_on_commit_callbacks(execute=True):
        first = make_request(message="First question")
        second = make_request(message="Second question")
        gone = make_request(message="Withdrawn question")
    transitions.withdraw_request(gone.pk, agent=gone.agent)
    assert smtp_server.messages == []
    assert notices.send_due_digests() == 0  # the window has not passed
    clock.advance(seconds=settings.REACH_DIGEST_SECONDS + 1)
    assert notices.send_due_digests() == 1
    assert notices.send_due_digests() == 0
    [message] = smtp_server.wait_for(1)
    body = message.get_payload(decode=True).decode()
    assert "First question" in body and "Second question" in body and "Withdrawn" not in body
    assert set(LINK.findall(body)) == {f"{settings.PUBLIC_URL}/requests/{r.pk}/" for r in (first, second)}
