"""Slack and a request whose accept needs a passkey (a rule's `step_up: passkey`): its message offers Decline and a
link to the page (test_slack_blocks.py); a button of a message an older ReviewHub posted (Answer…, Yes) answers
nothing and says where to approve, leaving no claim; Decline needs no passkey."""

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User

from elicitation.delivery import slack
from elicitation.models import ElicitationRequest, Queue, RequestEvent, ReviewerReach, Status
from elicitation.queue import rules
from tests.delivery.reach.conftest import FakeSlack
from tests.delivery.reach.test_slack import YES_NO, button, post
from tests.security.test_step_up import PAY, STEP_UP_RULE


@pytest.fixture
def step_up_queue(queue: Queue, reviewer: User, slack_api: FakeSlack) -> Queue:
    """The queue with a step-up rule for payments, and the reviewer linked to their Slack account."""
    ReviewerReach.objects.create(user=reviewer, slack_user_id="U_ALICE")
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    return queue


def told(slack_api: FakeSlack) -> str:
    [message] = slack_api.named("chat.postEphemeral")
    return str(message.body["text"])


def still_open(request: ElicitationRequest) -> bool:
    request.refresh_from_db()
    unclaimed = not RequestEvent.objects.filter(request=request, kind__in=["claimed", "completed"]).exists()
    return request.status == Status.PENDING and unclaimed


def test_an_older_messages_answer_button_opens_no_form_and_points_to_the_page(
    step_up_queue: Queue, slack_api: FakeSlack, make_request: Callable[..., ElicitationRequest]
) -> None:
    # Two questions: a message an older ReviewHub posted offered "Answer…".
    request = make_request(context=PAY)
    assert post(button(request, slack.OPEN_FORM)).status_code == 200
    assert slack_api.named("views.open") == []
    text = told(slack_api)
    assert text.startswith("Not answered: This request needs a passkey")
    assert f"/requests/{request.pk}/" in text
    assert still_open(request)


def test_an_older_messages_yes_is_refused_by_respond_and_leaves_no_claim(
    step_up_queue: Queue, slack_api: FakeSlack, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(context=PAY, requested_schema=YES_NO)
    assert post(button(request, slack.YES)).status_code == 200
    assert told(slack_api).startswith("Not answered: This request needs a passkey")
    assert still_open(request)


def test_decline_needs_no_passkey(
    step_up_queue: Queue, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(context=PAY, requested_schema=YES_NO)
    assert post(button(request, slack.DECLINE)).status_code == 200
    request.refresh_from_db()
    assert (request.status, request.action, request.answered_by) == (Status.COMPLETED, "decline", reviewer)
