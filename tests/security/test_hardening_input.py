"""Input that would poison stored data: lone UTF-16 surrogates and JSON nested too deep are refused at the door
with a 400 naming the field, nothing is stored, and a row poisoned before the door existed breaks nobody's page."""

import io
import json
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from rest_framework.test import APIClient

from elicitation.models import Draft, ElicitationRequest, HostedFlow, Queue
from elicitation.queue import receipts, rules, transitions, untrusted_json
from tests.conftest import FORM_SCHEMA

LONE = "\ud800"
CHOICE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve?"},
        "note": {"type": "string", "title": "Note", "description": "Why"},
        "pick": {"type": "string", "enum": ["a", "b"]},
        "level": {"type": "string", "oneOf": [{"const": "lo", "title": "Low"}]},
    },
    "required": ["approve"],
}


def post_json(client: APIClient, path: str, body: Any) -> Any:
    # json.dumps writes a lone surrogate as the escape "\ud800": the very bytes an attacker sends.
    return client.post(path, data=json.dumps(body), content_type="application/json")


def create_body(queue: Queue, **overrides: Any) -> dict[str, Any]:
    return {
        "message": "Approve?",
        "requestedSchema": json.loads(json.dumps(CHOICE_SCHEMA)),
        "queue": queue.slug,
        **overrides,
    }


def poisoned(body: dict[str, Any], path: list[Any], value: Any) -> dict[str, Any]:
    node = body
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return body


CREATE_CASES = [
    (["message"], f"Approve {LONE}?", "message"),
    (
        ["requestedSchema", "properties", "note", "title"],
        f"No{LONE}te",
        "requestedSchema.properties.note.title",
    ),
    (
        ["requestedSchema", "properties", "note", "description"],
        LONE,
        "requestedSchema.properties.note.description",
    ),
    (
        ["requestedSchema", "properties", "pick", "enum"],
        ["a", f"b{LONE}"],
        "requestedSchema.properties.pick.enum[1]",
    ),
    (
        ["requestedSchema", "properties", "level", "oneOf"],
        [{"const": "lo", "title": f"L{LONE}"}],
        "requestedSchema.properties.level.oneOf[0].title",
    ),
    (["context"], {"tool": {"args": ["ok", f"x{LONE}"]}}, "context.tool.args[1]"),
    (["context"], {"\udc00key": "v"}, "context.\\udc00key"),
    (["elicitationId"], f"e{LONE}", "elicitationId"),
]


@pytest.mark.django_db
@pytest.mark.parametrize(("path", "value", "field"), CREATE_CASES)
def test_a_lone_surrogate_anywhere_in_a_new_request_is_refused_naming_the_field(
    agent_client: APIClient, queue: Queue, path: list[Any], value: Any, field: str
) -> None:
    response = post_json(agent_client, "/api/v1/requests", poisoned(create_body(queue), path, value))

    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == "invalid"
    assert field in body["fields"], body
    assert "surrogate" in body["fields"][field]
    assert ElicitationRequest.objects.count() == 0


@pytest.mark.django_db
def test_a_valid_surrogate_pair_is_an_ordinary_character(agent_client: APIClient, queue: Queue) -> None:
    response = post_json(agent_client, "/api/v1/requests", create_body(queue, message="Ship it \U0001f680?"))

    assert response.status_code == 201, response.content
    assert ElicitationRequest.objects.get().message == "Ship it \U0001f680?"


@pytest.mark.django_db
def test_json_nested_deeper_than_the_limit_is_refused_naming_where(
    agent_client: APIClient, queue: Queue, settings: Any
) -> None:
    deep: Any = "bottom"
    for _ in range(settings.MAX_JSON_DEPTH + 5):
        deep = {"a": deep}

    response = post_json(agent_client, "/api/v1/requests", create_body(queue, context=deep))

    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "invalid"
    [(field, reason)] = body["fields"].items()
    assert field.startswith("context.a.a")
    assert f"deeper than {settings.MAX_JSON_DEPTH}" in reason
    assert ElicitationRequest.objects.count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("depth", [1_000, 30_000])
def test_json_deep_enough_to_exhaust_the_parser_is_a_400_not_a_recursion_error(
    agent_client: APIClient, queue: Queue, depth: int
) -> None:
    text = '{"message": "x", "queue": "payments", "context": ' + '{"a": ' * depth + "1" + "}" * depth + "}"

    response = agent_client.post("/api/v1/requests", data=text, content_type="application/json")

    assert response.status_code == 400
    assert response.json()["code"] == "invalid"
    assert "deeper than" in response.json()["fields"]["$"]
    assert ElicitationRequest.objects.count() == 0


@pytest.mark.django_db
def test_a_lone_surrogate_in_a_draft_is_refused_and_the_draft_kept(
    make_request: Callable[..., ElicitationRequest], reviewer_client: APIClient
) -> None:
    request = make_request()
    assert reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim").status_code == 200
    path = f"/api/v1/review/requests/{request.pk}/drafts"
    assert post_json(reviewer_client, path, {"question": "note", "value": "first"}).status_code == 200

    response = post_json(reviewer_client, path, {"question": "note", "value": f"sec{LONE}ond"})

    assert response.status_code == 400
    assert response.json()["fields"] == {"value": "contains a lone UTF-16 surrogate (invalid Unicode)."}
    assert Draft.objects.get(request=request, question_id="note").value == "first"


@pytest.mark.django_db
def test_a_lone_surrogate_in_an_answer_is_refused_and_the_request_stays_claimed(
    make_request: Callable[..., ElicitationRequest], reviewer_client: APIClient
) -> None:
    request = make_request()
    assert reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim").status_code == 200

    response = post_json(
        reviewer_client,
        f"/api/v1/review/requests/{request.pk}/respond",
        {"action": "accept", "content": {"approve": True, "note": f"ok{LONE}"}},
    )

    assert response.status_code == 400
    assert "content.note" in response.json()["fields"]
    request.refresh_from_db()
    assert (request.status, request.content) == ("claimed", None)


@pytest.mark.django_db
def test_a_lone_surrogate_in_a_hosted_flow_is_refused(make_agent: Callable[..., Any], queue: Queue) -> None:
    _, key = make_agent("flows", queue, scopes=["requests", "flows:secrets"])
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    schema = {
        "type": "object",
        "properties": {"token": {"type": "string", "title": f"T{LONE}", "sensitive": True}},
    }

    response = post_json(
        client,
        "/api/v1/flows",
        {"message": "Paste the token", "requestedSchema": schema, "queue": queue.slug},
    )

    assert response.status_code == 400
    assert "requestedSchema.properties.token.title" in response.json()["fields"]
    assert HostedFlow.objects.count() == 0
    assert ElicitationRequest.objects.count() == 0


# --- a row stored before the door existed -----------------------------------------------------------------------


@pytest.fixture
def poisoned_request(make_request: Callable[..., ElicitationRequest]) -> ElicitationRequest:
    """A request whose JSON columns hold lone surrogates, written past the API as an old release stored them.
    PostgreSQL's jsonb refuses such text outright, so there the poison could never be stored."""
    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL cannot store a lone surrogate; only the embedded database could")
    request = make_request()
    questions = json.loads(json.dumps(request.questions))
    questions[1]["title"] = f"No{LONE}te"
    schema = json.loads(json.dumps(FORM_SCHEMA))
    schema["properties"]["note"]["title"] = f"No{LONE}te"
    ElicitationRequest.objects.filter(pk=request.pk).update(
        questions=questions, requested_schema=schema, context={"k\udc00": f"v{LONE}"}
    )
    return request


@pytest.mark.django_db
def test_a_poisoned_row_breaks_no_listing_or_page_for_anyone(
    poisoned_request: ElicitationRequest,
    make_request: Callable[..., ElicitationRequest],
    agent_client: APIClient,
    reviewer_client: APIClient,
    reviewer: User,
    queue: Queue,
) -> None:
    healthy = make_request(message="The healthy one")
    page = Client()
    page.force_login(reviewer)

    agent_list = agent_client.get("/api/v1/requests")
    agent_detail = agent_client.get(f"/api/v1/requests/{poisoned_request.pk}")
    queue_api = reviewer_client.get(f"/api/v1/review/queues/{queue.slug}/requests")
    queue_page = page.get(f"/queues/{queue.slug}/")
    request_page = page.get(f"/requests/{poisoned_request.pk}/")
    claimed = reviewer_client.post(f"/api/v1/review/queues/{queue.slug}/claim-next")

    for response in (agent_list, agent_detail, queue_api, queue_page, request_page, claimed):
        assert response.status_code == 200, response.content[:300]
    assert str(poisoned_request.pk) in agent_list.content.decode()
    assert str(healthy.pk) in queue_api.content.decode()
    assert "\ufffd" in agent_detail.json()["context"]["k\ufffd"]
    assert "No\ufffdte".encode() in request_page.content
    assert b"The healthy one" in queue_page.content


@pytest.mark.django_db
def test_a_poisoned_row_can_still_be_answered_and_its_receipt_names_the_text_as_shown(
    poisoned_request: ElicitationRequest, reviewer: User
) -> None:
    transitions.claim_request(poisoned_request.pk, user=reviewer)
    transitions.respond(poisoned_request.pk, user=reviewer, action="decline")
    answered = ElicitationRequest.objects.get(pk=poisoned_request.pk)
    receipt = answered.result_meta[receipts.RECEIPT_META]
    claims = jwt.decode(receipt, options={"verify_signature": False})
    shown = untrusted_json.scrub(
        {"message": answered.message, "schema": answered.requested_schema, "context": answered.context}
    )
    assert (answered.status, answered.action) == ("completed", "decline")
    assert claims["digest"] == rules.request_digest(shown["message"], shown["schema"], shown["context"])


@pytest.mark.django_db
def test_repair_text_finds_and_repairs_a_poisoned_row_and_leaves_others_alone(
    poisoned_request: ElicitationRequest, make_request: Callable[..., ElicitationRequest]
) -> None:
    healthy = make_request(message="Fine \U0001f680", context={"tool": "deploy"})
    before_healthy = ElicitationRequest.objects.values().get(pk=healthy.pk)

    dry = io.StringIO()
    call_command("repair_text", "--dry-run", stdout=dry)
    assert f"ElicitationRequest {poisoned_request.pk}: context, questions, requested_schema" in dry.getvalue()
    assert "would repair 1 row(s)" in dry.getvalue()
    assert LONE in ElicitationRequest.objects.get(pk=poisoned_request.pk).questions[1]["title"]

    out = io.StringIO()
    call_command("repair_text", stdout=out)

    repaired = ElicitationRequest.objects.get(pk=poisoned_request.pk)
    assert repaired.context == {"k\ufffd": "v\ufffd"}
    assert repaired.questions[1]["title"] == "No\ufffdte"
    assert repaired.requested_schema["properties"]["note"]["title"] == "No\ufffdte"
    assert repaired.message == poisoned_request.message
    assert ElicitationRequest.objects.values().get(pk=healthy.pk) == before_healthy
    again = io.StringIO()
    call_command("repair_text", stdout=again)
    assert "repaired 0 row(s)" in again.getvalue()
