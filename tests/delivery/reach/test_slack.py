"""Slack, end to end against a stand-in of its Web API on loopback (the real slack_sdk WebClient talks to it):
requests posted as Block Kit (URL and secret requests as a link only), signed interactions accepted and forged or
stale ones refused, unmapped users refused, answers reaching the waiting agent, messages updated when the request
is answered elsewhere."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from channels.db import database_sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from elicitation.delivery import slack
from elicitation.flows import hosted_flows
from elicitation.models import (
    Agent,
    Channel,
    ElicitationRequest,
    Notice,
    Queue,
    ReachRule,
    RequestEvent,
    ReviewerReach,
    Status,
)
from elicitation.queue import transitions
from tests.answers import answer_of
from tests.delivery.reach.conftest import FakeSlack, interaction_body, signed_headers

URL = "/api/v1/slack/interactions"
YES_NO = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}


@pytest.fixture
def channel_rule(queue: Queue, slack_api: FakeSlack) -> ReachRule:
    return ReachRule.objects.create(
        queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1"
    )


@pytest.fixture
def linked(reviewer: User) -> User:
    ReviewerReach.objects.create(user=reviewer, slack_user_id="U_ALICE")
    return reviewer


def post(payload: dict[str, Any], *, timestamp: int | None = None, secret: str | None = None) -> Any:
    body = interaction_body(payload)
    headers = signed_headers(body, timestamp) if secret is None else signed_headers(body, timestamp, secret)
    return Client().post(
        URL,
        body,
        content_type="application/x-www-form-urlencoded",
        headers=headers,
    )


def button(request: ElicitationRequest, action_id: str, user: str = "U_ALICE") -> dict[str, Any]:
    return {
        "type": "block_actions",
        "user": {"id": user},
        "channel": {"id": "C1"},
        "trigger_id": "trigger-1",
        "actions": [{"action_id": action_id, "value": str(request.pk)}],
    }


def posted(
    make_request: Callable[..., ElicitationRequest], capture: Any, **fields: Any
) -> ElicitationRequest:
    with capture(execute=True):
        return make_request(**fields)


# --- posting ------------------------------------------------------------------------------------------------------


def test_an_arrival_is_posted_to_the_queues_channel_as_block_kit(
    channel_rule: ReachRule,
    slack_api: FakeSlack,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    request = posted(
        make_request, django_capture_on_commit_callbacks, requested_schema=YES_NO, message="Deploy?"
    )
    [call] = slack_api.named("chat.postMessage")
    assert call.token == "xoxb-test-token"
    assert call.body["channel"] == "C1"
    assert call.body["blocks"] == slack.as_dicts(slack.message_blocks(request))
    assert "Deploy?" in json.dumps(call.body["blocks"])
    notice = Notice.objects.get(request=request, channel=Channel.SLACK)
    assert (notice.status, notice.slack_channel, notice.slack_ts) == ("sent", "C1", "1700000000.000001")


def test_a_url_request_and_a_hosted_secret_flow_are_posted_as_a_link_only(
    channel_rule: ReachRule,
    slack_api: FakeSlack,
    agent: Agent,
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    agent.scopes = ["requests", "flows:secrets"]
    agent.save()
    url_request = posted(
        make_request,
        django_capture_on_commit_callbacks,
        mode="url",
        requested_schema=None,
        url="https://bank.example.com/oauth?state=s3cr3t",
        message="Link bank account QZ-4242",  # not hex: a request's id in the link cannot contain it by chance
    )
    with django_capture_on_commit_callbacks(execute=True):
        flow = hosted_flows.create_hosted_flow(
            agent=agent,
            queue_slug=queue.slug,
            message="Paste the production API key for ACME",
            requested_schema={
                "type": "object",
                "properties": {"api_key": {"type": "string", "sensitive": True}},
            },
        )
    assert flow is not None
    calls = slack_api.named("chat.postMessage")
    assert len(calls) == 2
    for call in calls:
        sent = json.dumps(call.body)
        for secret_part in ("s3cr3t", "bank.example.com", "QZ-4242", "ACME", "API key", "api_key"):
            assert secret_part not in sent
        assert "/requests/" in sent  # the link to ReviewHub
    assert url_request.mode == "url"


# --- signatures ---------------------------------------------------------------------------------------------------


def test_a_signed_yes_from_a_linked_reviewer_answers_through_the_same_transitions(
    channel_rule: ReachRule,
    slack_api: FakeSlack,
    linked: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    request = posted(make_request, django_capture_on_commit_callbacks, requested_schema=YES_NO)
    with django_capture_on_commit_callbacks(execute=True):
        response = post(button(request, slack.YES))
    assert response.status_code == 200
    done = ElicitationRequest.objects.get(pk=request.pk)
    assert (done.status, done.action, done.content, done.answered_by) == (
        Status.COMPLETED,
        "accept",
        {"ok": True},
        linked,
    )
    trail = list(RequestEvent.objects.filter(request=request).values_list("kind", "actor_user"))
    assert trail[-2:] == [("claimed", linked.pk), ("completed", linked.pk)]
    [update] = slack_api.named("chat.update")
    assert update.body["ts"] == "1700000000.000001"
    assert "Answered by alice: accept" in json.dumps(update.body["blocks"])


def test_a_bad_signature_is_refused_and_nothing_changes(
    slack_api: FakeSlack, linked: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=YES_NO)
    response = post(button(request, slack.YES), secret="not-the-secret")
    assert response.status_code == 401 and response.json()["code"] == "bad_signature"
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_a_stale_timestamp_is_refused(
    clock: Any, slack_api: FakeSlack, linked: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=YES_NO)
    signed_at = int(clock.now().timestamp())
    clock.advance(minutes=6)
    response = post(button(request, slack.YES), timestamp=signed_at)
    assert response.status_code == 401
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_a_replayed_interaction_is_refused(
    slack_api: FakeSlack, linked: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=YES_NO)
    body = interaction_body(button(request, slack.NO))
    headers = signed_headers(body)
    first = Client().post(URL, body, content_type="application/x-www-form-urlencoded", headers=headers)
    again = Client().post(URL, body, content_type="application/x-www-form-urlencoded", headers=headers)
    assert (first.status_code, again.status_code) == (200, 401)
    assert again.json()["code"] == "replayed"


def test_a_signed_body_that_is_not_a_payload_is_a_400(slack_api: FakeSlack) -> None:
    body = b"payload=%7Bnot-json"
    response = Client().post(
        URL, body, content_type="application/x-www-form-urlencoded", headers=signed_headers(body)
    )
    assert response.status_code == 400


# --- who may answer -----------------------------------------------------------------------------------------------


def test_an_unmapped_slack_user_is_refused_with_an_ephemeral_message(
    slack_api: FakeSlack, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=YES_NO)
    response = post(button(request, slack.YES, user="U_STRANGER"))
    assert response.status_code == 200
    [ephemeral] = slack_api.named("chat.postEphemeral")
    assert (ephemeral.body["user"], ephemeral.body["channel"]) == ("U_STRANGER", "C1")
    assert "not a ReviewHub reviewer" in ephemeral.body["text"]
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING
    assert list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True)) == ["created"]


def test_a_slack_user_with_a_confirmed_matching_email_is_that_reviewer(
    slack_api: FakeSlack, reviewer: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    reviewer.email = "alice@example.com"
    reviewer.save()
    slack_api.users["U_A"] = {
        "id": "U_A",
        "is_email_confirmed": True,
        "profile": {"email": "Alice@Example.com"},
    }
    slack_api.users["U_B"] = {
        "id": "U_B",
        "is_email_confirmed": False,
        "profile": {"email": "alice@example.com"},
    }
    unconfirmed = make_request(requested_schema=YES_NO)
    post(button(unconfirmed, slack.YES, user="U_B"))
    assert ElicitationRequest.objects.get(pk=unconfirmed.pk).status == Status.PENDING
    confirmed = make_request(requested_schema=YES_NO)
    post(button(confirmed, slack.NO, user="U_A"))
    done = ElicitationRequest.objects.get(pk=confirmed.pk)
    assert (done.status, done.content, done.answered_by) == (Status.COMPLETED, {"ok": False}, reviewer)


def test_a_linked_user_who_is_not_on_the_queue_is_refused(
    slack_api: FakeSlack,
    make_reviewer: Callable[..., User],
    other_queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    outsider = make_reviewer("bob", other_queue)
    ReviewerReach.objects.create(user=outsider, slack_user_id="U_BOB")
    request = make_request(requested_schema=YES_NO)
    post(button(request, slack.YES, user="U_BOB"))
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING
    assert len(slack_api.named("chat.postEphemeral")) == 1


def test_a_request_someone_else_holds_is_not_taken_from_them(
    slack_api: FakeSlack,
    linked: User,
    make_reviewer: Callable[..., User],
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
) -> None:
    holder = make_reviewer("carol", queue)
    request = make_request(requested_schema=YES_NO)
    transitions.claim_request(request.pk, user=holder)
    post(button(request, slack.YES))
    still = ElicitationRequest.objects.get(pk=request.pk)
    assert (still.status, still.claimed_by) == (Status.CLAIMED, holder)
    [ephemeral] = slack_api.named("chat.postEphemeral")
    assert ephemeral.body["text"].startswith("Not answered")


# --- modals -------------------------------------------------------------------------------------------------------


FORM = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email", "title": "Contact"},
        "seats": {"type": "integer", "minimum": 1, "maximum": 5},
    },
    "required": ["email"],
}


def submission(request: ElicitationRequest, values: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "view_submission",
        "user": {"id": "U_ALICE"},
        "view": {
            "callback_id": slack.MODAL_CALLBACK,
            "private_metadata": str(request.pk),
            "blocks": [{"type": "input", "block_id": "q:email"}],
            "state": {"values": values},
        },
    }


def test_the_answer_button_opens_the_form_as_a_modal(
    slack_api: FakeSlack, linked: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=FORM)
    post(button(request, slack.OPEN_FORM))
    [opened] = slack_api.named("views.open")
    assert opened.body["trigger_id"] == "trigger-1"
    assert opened.body["view"]["private_metadata"] == str(request.pk)
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING  # opening claims nothing


def test_an_invalid_modal_is_sent_back_with_errors_and_claims_nothing(
    slack_api: FakeSlack, linked: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=FORM)
    response = post(
        submission(request, {"q:email": {"answer": {"type": "email_text_input", "value": "nope"}}})
    )
    assert response.status_code == 200
    assert response.json() == {
        "response_action": "errors",
        "errors": {"q:email": "must be a valid email address"},
    }
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_a_valid_modal_answers_the_request(
    slack_api: FakeSlack, linked: User, make_request: Callable[..., ElicitationRequest]
) -> None:
    request = make_request(requested_schema=FORM)
    values = {
        "q:email": {"answer": {"type": "email_text_input", "value": "ops@example.com"}},
        "q:seats": {"answer": {"type": "number_input", "value": "4"}},
    }
    response = post(submission(request, values))
    assert response.status_code == 200 and response.content == b""
    done = ElicitationRequest.objects.get(pk=request.pk)
    assert (done.status, done.content) == (Status.COMPLETED, {"email": "ops@example.com", "seats": 4})


# --- answered, withdrawn or expired elsewhere ---------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["answered", "withdrawn", "expired"])
def test_the_slack_message_is_updated_when_the_request_ends_elsewhere(
    ending: str,
    clock: Any,
    channel_rule: ReachRule,
    slack_api: FakeSlack,
    reviewer: User,
    make_request: Callable[..., ElicitationRequest],
    django_capture_on_commit_callbacks: Any,
) -> None:
    request = posted(make_request, django_capture_on_commit_callbacks, requested_schema=YES_NO)
    with django_capture_on_commit_callbacks(execute=True):
        if ending == "answered":
            transitions.claim_request(request.pk, user=reviewer)
            transitions.respond(request.pk, user=reviewer, action="decline")
        elif ending == "withdrawn":
            transitions.withdraw_request(request.pk, agent=request.agent)
        else:
            clock.advance(seconds=601)
            transitions.expire_overdue_requests()
    [update] = slack_api.named("chat.update")
    text = json.dumps(update.body["blocks"])
    expected = {"answered": "Answered by alice: decline", "withdrawn": "Withdrawn", "expired": "Expired"}[
        ending
    ]
    assert expected in text
    assert (update.body["channel"], update.body["ts"]) == ("C1", "1700000000.000001")


# --- the waiting agent hears the Slack answer ---------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_an_answer_given_in_slack_reaches_the_agent_over_its_websocket(
    slack_api: FakeSlack,
    linked: User,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    open_socket: Any,
) -> None:
    request = await database_sync_to_async(make_request)(requested_schema=YES_NO)
    socket = await open_socket(agent_with_key[1])
    await socket.send_json_to({"type": "subscribe", "ids": [str(request.pk)]})
    assert (await socket.receive_json_from(timeout=2))["status"] == "pending"
    response = await database_sync_to_async(post)(button(request, slack.YES))
    assert response.status_code == 200
    frame = await socket.receive_json_from(timeout=3)
    assert (frame["type"], frame["id"], answer_of(frame["result"])) == (
        "completed",
        str(request.pk),
        {"action": "accept", "content": {"ok": True}},
    )


def test_the_shipped_manifest_points_slack_at_the_interaction_endpoint() -> None:
    manifest = yaml.safe_load((Path(settings.BASE_DIR) / "docs" / "slack-app-manifest.yaml").read_text())
    assert manifest["settings"]["interactivity"]["request_url"] == "REVIEWHUB_URL" + reverse(
        "api-slack-interactions"
    )
    assert {"chat:write", "users:read", "users:read.email"} <= set(manifest["oauth_config"]["scopes"]["bot"])
