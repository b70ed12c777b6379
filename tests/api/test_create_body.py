"""A create's body is mapped once (elicitation/api/create_body.py) for every door: REST's `POST /api/v1/requests`
and `POST /api/v1/flows`, and the MCP tools `ask_reviewer` and `collect_secret`. The same body stores the same
request whichever door it came through, and the same bad body is refused with the same error body."""

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.test import Client

from elicitation.api.create_body import create_arguments, flow_arguments, idempotency_key
from elicitation.models import Agent, ElicitationRequest, HostedFlow, Queue, Scope
from elicitation.queue.errors import InvalidInput
from tests.security.test_door_contract import ALLOWED, Outcome, assert_mcp, call_tool

pytestmark = pytest.mark.django_db(transaction=True)  # the MCP door reads from threads of its own

YES_NO: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}
SECRET: dict[str, Any] = {
    "type": "object",
    "properties": {"token": {"type": "string", "title": "Token", "sensitive": True}},
    "required": ["token"],
}
FORM_BODY: dict[str, Any] = {
    "message": "Ship 1.4?",
    "queue": "payments",
    "requestedSchema": YES_NO,
    "priority": 7,
    "expiresIn": 900,
    "context": {"ticket": "OPS-1"},
}
URL_BODY: dict[str, Any] = {
    "message": "Approve the refund",
    "queue": "payments",
    "mode": "url",
    "url": "https://billing.example.com/refunds/42",
    "elicitationId": "elicit-42",
    "priority": -3,
}
FLOW_BODY: dict[str, Any] = {
    "message": "The deploy token, please",
    "queue": "payments",
    "requestedSchema": SECRET,
    "priority": 2,
    "expiresIn": 600,
    "context": {"service": "deploy"},
}


@pytest.fixture
def agent_key(make_agent: Any, queue: Queue) -> str:
    _, key = make_agent("agent-a", queue, scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS])
    return str(key)


REFUSED = Outcome("invalid", 400)
FORBIDDEN = Outcome("forbidden", 403)


def stored(request: ElicitationRequest) -> dict[str, Any]:
    """What a door made of the body, as the row holds it (ids and times aside, and a flow's own URL and id)."""
    is_flow = HostedFlow.objects.filter(request=request).exists()
    return {
        "queue": request.queue.slug,
        "agent": request.agent_id,
        "mode": request.mode,
        "message": request.message,
        "requested_schema": request.requested_schema,
        "questions": request.questions,
        "url": request.url if not is_flow else "(the flow's own page)",
        "elicitation_id": request.elicitation_id if not is_flow else "(the flow's id)",
        "context": request.context,
        "priority": request.priority,
        "deadline_after": (request.deadline - request.created_at) // timedelta(seconds=1),
        "status": request.status,
    }


def rest_post(key: str, path: str, body: Any) -> Any:
    return Client(HTTP_AUTHORIZATION=f"Bearer {key}").post(path, body, content_type="application/json")


# --- the mapping itself -------------------------------------------------------------------------------------------


def test_a_request_body_maps_to_every_argument_of_create_request() -> None:
    assert create_arguments(
        {**URL_BODY, "context": {"a": 1}, "callbackUrl": "https://hooks.example.com/rh"}
    ) == {
        "queue_slug": "payments",
        "message": "Approve the refund",
        "mode": "url",
        "requested_schema": None,
        "url": "https://billing.example.com/refunds/42",
        "elicitation_id": "elicit-42",
        "context": {"a": 1},
        "callback_url": "https://hooks.example.com/rh",
        "priority": -3,
        "expires_in": None,
    }
    defaults = create_arguments({"message": "m", "queue": "payments", "requestedSchema": YES_NO})
    assert (defaults["mode"], defaults["priority"], defaults["url"], defaults["context"]) == (
        "form",
        0,
        "",
        None,
    )


def test_a_flow_body_maps_to_every_argument_of_create_hosted_flow() -> None:
    assert flow_arguments(FLOW_BODY) == {
        "queue_slug": "payments",
        "message": "The deploy token, please",
        "requested_schema": SECRET,
        "context": {"service": "deploy"},
        "callback_url": "",
        "priority": 2,
        "expires_in": 600,
        "elicitation_id": "",
    }


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"message": "m", "queue": "payments", "mode": "url"}, {"url": "is required in url mode"}),
        ({**FORM_BODY, "url": "https://example.com/"}, {"url": "only allowed in url mode"}),
        ({**FORM_BODY, "expiresIn": 0}, {"expiresIn": "Ensure this value is greater than or equal to 1."}),
        ({**FORM_BODY, "colour": "red"}, {"colour": "unknown field"}),
        (["not", "an", "object"], {"$": "Invalid data. Expected a dictionary, but got list."}),
    ],
)
def test_a_refused_body_is_the_domains_invalid_error_naming_its_fields(
    body: Any, fields: dict[str, str]
) -> None:
    with pytest.raises(InvalidInput) as refused:
        create_arguments(body)
    assert (refused.value.detail, refused.value.fields) == ("The request is not valid.", fields)


def test_an_idempotency_key_longer_than_the_column_is_refused() -> None:
    assert idempotency_key({}) is None
    assert idempotency_key({"Idempotency-Key": "k" * 200}) == "k" * 200
    with pytest.raises(InvalidInput) as refused:
        idempotency_key({"Idempotency-Key": "k" * 201})
    assert refused.value.fields == {"Idempotency-Key": "at most 200 characters"}


# --- every door: the same row, the same refusal ------------------------------------------------------------------


@pytest.mark.parametrize("body", [FORM_BODY, URL_BODY], ids=["form", "url"])
def test_rest_and_mcp_store_the_same_request_for_the_same_body(agent_key: str, body: dict[str, Any]) -> None:
    response = rest_post(agent_key, "/api/v1/requests", body)
    assert response.status_code == 201, response.content
    created = assert_mcp(async_to_sync(call_tool)(agent_key, "ask_reviewer", body), ALLOWED)

    rows = [
        ElicitationRequest.objects.get(pk=response.json()["id"]),
        ElicitationRequest.objects.get(pk=created["id"]),
    ]
    assert stored(rows[0]) == stored(rows[1])
    assert stored(rows[0])["priority"] == body["priority"]  # the body's own values, not defaults


def test_rest_and_mcp_open_the_same_hosted_flow_for_the_same_body(agent_key: str) -> None:
    response = rest_post(agent_key, "/api/v1/flows", FLOW_BODY)
    assert response.status_code == 201, response.content
    outcome = assert_mcp(async_to_sync(call_tool)(agent_key, "collect_secret", FLOW_BODY), ALLOWED)

    flows = [HostedFlow.objects.get(pk=response.json()["id"]), HostedFlow.objects.get(pk=outcome["flowId"])]
    assert stored(flows[0].request) == stored(flows[1].request)
    assert flows[0].questions == flows[1].questions and flows[0].requested_schema == SECRET


BAD_REQUESTS = {
    "url mode without a url": {"message": "m", "queue": "payments", "mode": "url"},
    "a url in form mode": {**FORM_BODY, "url": "https://example.com/"},
    "a url a browser opens elsewhere": {**URL_BODY, "url": "javascript:alert(1)"},
    "a message over the limit": {**FORM_BODY, "message": "x" * (settings.MAX_MESSAGE_LENGTH + 1)},
    "a queue that is not a slug": {**FORM_BODY, "queue": "pay ments"},
    "an unknown queue": {**FORM_BODY, "queue": "nowhere"},
}


@pytest.mark.parametrize("body", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_rest_and_mcp_refuse_the_same_bad_body_with_the_same_error(
    agent_key: str, body: dict[str, Any]
) -> None:
    response = rest_post(agent_key, "/api/v1/requests", body)
    assert response.status_code == 400, response.content
    rest_body = response.json()
    assert rest_body["code"] == "invalid" and rest_body["fields"]

    assert_mcp(async_to_sync(call_tool)(agent_key, "ask_reviewer", body), REFUSED, rest_body)
    assert ElicitationRequest.objects.count() == 0


BAD_FLOWS = {
    "a schema that is no object": {**FLOW_BODY, "requestedSchema": {"type": "string"}},
    "a message over the limit": {**FLOW_BODY, "message": "x" * (settings.MAX_MESSAGE_LENGTH + 1)},
    "an unknown queue": {**FLOW_BODY, "queue": "nowhere"},
}


@pytest.mark.parametrize("body", BAD_FLOWS.values(), ids=BAD_FLOWS.keys())
def test_rest_and_mcp_refuse_the_same_bad_flow_body_with_the_same_error(
    agent_key: str, body: dict[str, Any]
) -> None:
    response = rest_post(agent_key, "/api/v1/flows", body)
    assert response.status_code == 400, response.content

    assert_mcp(async_to_sync(call_tool)(agent_key, "collect_secret", body), REFUSED, response.json())
    assert ElicitationRequest.objects.count() == HostedFlow.objects.count() == 0


def test_an_agent_without_the_flows_scope_is_refused_at_both_flow_doors(
    make_agent: Any, queue: Queue
) -> None:
    _, key = make_agent("agent-b", queue)
    response = rest_post(key, "/api/v1/flows", FLOW_BODY)
    assert response.status_code == 403

    assert_mcp(async_to_sync(call_tool)(key, "collect_secret", FLOW_BODY), FORBIDDEN, response.json())
    assert Agent.objects.count() == 1 and HostedFlow.objects.count() == 0
