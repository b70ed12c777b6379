"""The agent API: create (with idempotency), read, withdraw, the event feed, and every error class."""

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from elicitation.models import ElicitationRequest, Status
from elicitation.queue import accounts, transitions
from tests.answers import answer_of
from tests.conftest import FORM_SCHEMA

pytestmark = pytest.mark.django_db


def create_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "message": "Approve transfer of 100 EUR?",
        "mode": "form",
        "requestedSchema": FORM_SCHEMA,
        "queue": "payments",
    }
    body.update(overrides)
    return body


def post(client: APIClient, body: Any, **headers: str) -> Any:
    return client.post("/api/v1/requests", body, format="json", **headers)


def test_it_creates_a_form_request(agent_client: APIClient) -> None:
    response = post(agent_client, create_body(priority=5, context={"tool": "transfer"}))
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["status"] == "pending"
    assert data["queue"] == "payments"
    assert data["priority"] == 5
    assert data["result"] is None
    assert ElicitationRequest.objects.get(pk=data["id"]).context == {"tool": "transfer"}


def test_it_creates_a_url_request_keeping_the_elicitation_id(agent_client: APIClient) -> None:
    body = create_body(mode="url", url="https://billing.example.com/connect", elicitationId="el-1")
    del body["requestedSchema"]
    response = post(agent_client, body)
    assert response.status_code == 201, response.json()
    assert response.json()["elicitationId"] == "el-1"


def test_an_idempotent_retry_returns_the_same_request(agent_client: APIClient) -> None:
    first = post(agent_client, create_body(), HTTP_IDEMPOTENCY_KEY="abc")
    again = post(agent_client, create_body(), HTTP_IDEMPOTENCY_KEY="abc")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert ElicitationRequest.objects.count() == 1


def test_the_same_key_with_another_body_is_a_409(agent_client: APIClient) -> None:
    post(agent_client, create_body(), HTTP_IDEMPOTENCY_KEY="abc")
    response = post(agent_client, create_body(message="Something else"), HTTP_IDEMPOTENCY_KEY="abc")
    assert response.status_code == 409
    assert response.json()["code"] == "idempotency_conflict"
    assert ElicitationRequest.objects.count() == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (create_body(message=""), "message"),
        (create_body(message="x" * 5000), "message"),
        (create_body(queue="no such queue"), "queue"),
        (create_body(mode="telepathy"), "mode"),
        ({k: v for k, v in create_body().items() if k != "requestedSchema"}, "requestedSchema"),
        (create_body(url="https://example.com"), "url"),
        (create_body(mode="url", requestedSchema=None), "requestedSchema"),
        (create_body(priority="high"), "priority"),
        (create_body(expiresIn=0), "expiresIn"),
        (create_body(callbackUrl="javascript:alert(1)"), "callbackUrl"),
        (create_body(context=["not", "an", "object"]), "context"),
        (create_body(requested_schema={}), "requested_schema"),
        (
            create_body(requestedSchema={"type": "object", "properties": {"a": {"type": "object"}}}),
            "requestedSchema.properties.a",
        ),
        (create_body(requestedSchema={"type": "array"}), "requestedSchema"),
    ],
)
def test_bad_bodies_get_400_naming_the_field(
    agent_client: APIClient, body: dict[str, Any], field: str
) -> None:
    response = post(agent_client, body)
    assert response.status_code == 400, response.json()
    fields = response.json()["fields"]
    assert any(key == field or key.startswith(field + ".") for key in fields), fields
    assert ElicitationRequest.objects.count() == 0


def test_a_url_request_must_use_http_or_https(agent_client: APIClient) -> None:
    body = create_body(mode="url", url="javascript:alert(1)")
    del body["requestedSchema"]
    response = post(agent_client, body)
    assert response.status_code == 400
    assert "url" in response.json()["fields"]


def test_malformed_json_is_a_400(agent_client: APIClient) -> None:
    response = agent_client.post("/api/v1/requests", data="{nope", content_type="application/json")
    assert response.status_code == 400


def test_a_body_over_the_limit_is_a_413_and_stores_nothing(agent_client: APIClient, settings: Any) -> None:
    body = create_body(context={"blob": "x" * (settings.MAX_BODY_BYTES + 10)})
    response = agent_client.post("/api/v1/requests", data=json.dumps(body), content_type="application/json")
    assert response.status_code == 413
    assert ElicitationRequest.objects.count() == 0


@pytest.mark.parametrize("header", [None, "Bearer nope", "Bearer rh_deadbeef_wrong", "Basic abc"])
def test_missing_or_wrong_keys_get_401(header: str | None, agent: Any) -> None:
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    assert post(client, create_body()).status_code == 401
    assert client.get("/api/v1/events").status_code == 401


def test_a_revoked_key_gets_401_immediately(agent_client: APIClient, agent: Any) -> None:
    assert post(agent_client, create_body()).status_code == 201
    accounts.revoke_agent(agent)
    assert post(agent_client, create_body()).status_code == 401


def test_reading_a_request_returns_the_mcp_result_once_answered(
    agent_client: APIClient, reviewer: Any
) -> None:
    request_id = post(agent_client, create_body()).json()["id"]
    transitions.claim_request(request_id, user=reviewer)
    transitions.respond(request_id, user=reviewer, action="accept", content={"approve": True, "note": "ok"})
    data = agent_client.get(f"/api/v1/requests/{request_id}").json()
    assert data["status"] == "completed"
    assert answer_of(data["result"]) == {"action": "accept", "content": {"approve": True, "note": "ok"}}


def test_a_read_after_the_deadline_says_overdue_and_changes_nothing_until_the_sweeper_expires_it(
    agent_client: APIClient, clock: Any
) -> None:
    request_id = post(agent_client, create_body(expiresIn=5)).json()["id"]
    clock.advance(seconds=6)
    data = agent_client.get(f"/api/v1/requests/{request_id}").json()
    assert (data["status"], data["overdue"], data["result"]) == ("pending", True, None)
    assert ElicitationRequest.objects.get(pk=request_id).status == "pending"  # GET never writes
    assert transitions.expire_overdue_requests() == 1
    data = agent_client.get(f"/api/v1/requests/{request_id}").json()
    assert (data["status"], data["overdue"], data["result"]) == ("expired", False, {"action": "cancel"})


def test_another_agents_request_is_a_404(agent_client: APIClient, make_agent: Any, queue: Any) -> None:
    _, other_key = make_agent("agent-b", queue)
    other = APIClient()
    other.credentials(HTTP_AUTHORIZATION=f"Bearer {other_key}")
    request_id = post(agent_client, create_body()).json()["id"]
    assert other.get(f"/api/v1/requests/{request_id}").status_code == 404
    assert other.post(f"/api/v1/requests/{request_id}/cancel").status_code == 404
    assert ElicitationRequest.objects.get(pk=request_id).status == Status.PENDING


def test_cancel_withdraws_and_a_second_cancel_is_409(agent_client: APIClient) -> None:
    request_id = post(agent_client, create_body()).json()["id"]
    first = agent_client.post(f"/api/v1/requests/{request_id}/cancel")
    assert (first.status_code, first.json()["status"]) == (200, "withdrawn")
    second = agent_client.post(f"/api/v1/requests/{request_id}/cancel")
    assert second.status_code == 409
    assert second.json()["status"] == "withdrawn"


def test_cancel_after_the_reviewer_answered_is_409_and_keeps_the_answer(
    agent_client: APIClient, reviewer: Any
) -> None:
    request_id = post(agent_client, create_body()).json()["id"]
    transitions.claim_request(request_id, user=reviewer)
    transitions.respond(request_id, user=reviewer, action="decline")
    assert agent_client.post(f"/api/v1/requests/{request_id}/cancel").status_code == 409
    assert ElicitationRequest.objects.get(pk=request_id).action == "decline"


def test_the_event_feed_pages_by_cursor(agent_client: APIClient, reviewer: Any) -> None:
    ids = [post(agent_client, create_body()).json()["id"] for _ in range(3)]
    for request_id in ids:
        transitions.claim_request(request_id, user=reviewer)
        transitions.respond(request_id, user=reviewer, action="cancel")
    feed = agent_client.get("/api/v1/events?after=0").json()
    assert [e["id"] for e in feed["events"]] == ids
    assert feed["cursor"] == 3
    later = agent_client.get("/api/v1/events?after=2").json()
    assert [e["cursor"] for e in later["events"]] == [3]
    assert agent_client.get("/api/v1/events?after=3").json() == {"events": [], "cursor": 3}


@pytest.mark.parametrize("query", ["after=-1", "after=x", "wait=soon"])
def test_bad_feed_parameters_are_400(agent_client: APIClient, query: str) -> None:
    assert agent_client.get(f"/api/v1/events?{query}").status_code == 400


def test_url_flow_completion_ignores_unknown_ids(agent_client: APIClient) -> None:
    response = agent_client.post(
        "/api/v1/requests/url-complete", {"elicitationId": "never-seen"}, format="json"
    )
    assert response.status_code == 202


def test_the_openapi_schema_documents_the_agent_endpoints(client: Any) -> None:
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert "/api/v1/requests" in paths
    assert "/api/v1/requests/{request_id}" in paths
    assert "wait" in {p["name"] for p in paths["/api/v1/requests/{request_id}"]["get"]["parameters"]}
