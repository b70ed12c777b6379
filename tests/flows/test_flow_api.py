"""POST /api/v1/flows, GET /api/v1/flows/{id}, POST /api/v1/flows/{id}/retrieve: scope, ownership, one-time reads."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from elicitation.flows import hosted_flows
from elicitation.models import (
    Agent,
    AgentEvent,
    ElicitationRequest,
    FlowStatus,
    HostedFlow,
    Mode,
    Queue,
    RequestEvent,
    Scope,
    Status,
)
from elicitation.queue import accounts, transitions
from tests.answers import answer_of
from tests.flows.conftest import FLOW_PAGE, FLOW_SCHEMA, api_client, new_secret, submit

pytestmark = pytest.mark.django_db


def retrieve(client: APIClient, flow: dict[str, Any]) -> Any:
    return client.post(f"/api/v1/flows/{flow['id']}/retrieve")


def test_opening_a_flow_creates_a_url_request_pointing_at_our_own_page(
    open_flow: Callable[..., dict[str, Any]], flows_agent: Agent
) -> None:
    flow = open_flow(priority=5, context={"tool": "deploy"}, elicitationId="el-1")
    match = FLOW_PAGE.match(flow["url"])
    assert match is not None and match["id"] == flow["id"]
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    assert (request.mode, request.url, request.agent, request.priority) == (
        Mode.URL,
        flow["url"],
        flows_agent,
        5,
    )
    # The form lives on the flow, not on the request, so no reviewer page offers it as a draftable form.
    assert request.requested_schema is None and request.questions == []
    assert HostedFlow.objects.get(pk=flow["id"]).questions[0]["sensitive"] is True
    assert flow["status"] == "open" and flow["requestStatus"] == "pending"
    assert flow["elicitation"] == {
        "mode": "url",
        "message": request.message,
        "url": flow["url"],
        "elicitationId": "el-1",
    }


def test_the_flow_url_carries_nothing_but_the_flow_id(open_flow: Callable[..., dict[str, Any]]) -> None:
    flow = open_flow()
    assert "?" not in flow["url"] and "#" not in flow["url"]
    assert flow["url"] == f"https://reviewhub.example.com/flows/{flow['id']}/"


def test_it_requires_the_flows_secrets_scope_to_open(
    agent_client: APIClient, queue: Queue, agent: Agent
) -> None:
    assert not agent.has_scope(Scope.FLOWS_SECRETS)
    response = agent_client.post(
        "/api/v1/flows",
        {"message": "token?", "requestedSchema": FLOW_SCHEMA, "queue": queue.slug},
        format="json",
    )
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"
    assert not HostedFlow.objects.exists() and not ElicitationRequest.objects.exists()


def test_it_requires_the_flows_secrets_scope_to_retrieve(
    open_flow: Callable[..., dict[str, Any]], flows_agent: Agent, flows_client: APIClient
) -> None:
    flow = open_flow()
    flows_agent.scopes = [Scope.REQUESTS]
    flows_agent.save(update_fields=["scopes"])
    assert retrieve(flows_client, flow).status_code == 403
    assert flows_client.get(f"/api/v1/flows/{flow['id']}").status_code == 403


def test_it_refuses_anonymous_callers(open_flow: Callable[..., dict[str, Any]]) -> None:
    flow = open_flow()
    assert retrieve(APIClient(), flow).status_code == 401
    assert APIClient().post("/api/v1/flows", {}, format="json").status_code == 401


@pytest.mark.parametrize(
    ("schema", "field"),
    [
        ({"type": "object", "properties": {}}, "requestedSchema.properties"),
        (
            {"type": "object", "properties": {"pin": {"type": "integer", "sensitive": True}}},
            "requestedSchema.properties.pin.sensitive",
        ),
        ({"type": "object", "properties": {"x": {"type": "object"}}}, "requestedSchema.properties.x.type"),
    ],
)
def test_it_rejects_schemas_outside_the_subset(
    flows_client: APIClient, queue: Queue, schema: dict[str, Any], field: str
) -> None:
    response = flows_client.post(
        "/api/v1/flows", {"message": "m", "requestedSchema": schema, "queue": queue.slug}, format="json"
    )
    assert response.status_code == 400
    assert field in response.json()["fields"]
    assert not HostedFlow.objects.exists()


def test_it_rejects_unknown_queues_and_fields(flows_client: APIClient, queue: Queue) -> None:
    unknown_queue = flows_client.post(
        "/api/v1/flows", {"message": "m", "requestedSchema": FLOW_SCHEMA, "queue": "nope"}, format="json"
    )
    assert unknown_queue.status_code == 400 and "queue" in unknown_queue.json()["fields"]
    typo = flows_client.post(
        "/api/v1/flows",
        {"message": "m", "requestedSchema": FLOW_SCHEMA, "queue": queue.slug, "url": "https://x.test"},
        format="json",
    )
    assert typo.status_code == 400 and "url" in typo.json()["fields"]


def test_an_idempotent_retry_returns_the_same_flow(flows_client: APIClient, queue: Queue) -> None:
    body = {"message": "m", "requestedSchema": FLOW_SCHEMA, "queue": queue.slug}
    first = flows_client.post("/api/v1/flows", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    again = flows_client.post("/api/v1/flows", body, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert HostedFlow.objects.count() == 1


def test_an_idempotency_key_used_for_a_plain_request_is_a_conflict(
    flows_client: APIClient, queue: Queue
) -> None:
    schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    body = {"message": "m", "requestedSchema": schema, "queue": queue.slug}
    plain = flows_client.post("/api/v1/requests", body, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert plain.status_code == 201
    flow = flows_client.post("/api/v1/flows", body, format="json", HTTP_IDEMPOTENCY_KEY="k-2")
    assert flow.status_code == 409
    assert not HostedFlow.objects.exists()


def test_retrieve_before_submission_is_a_conflict_naming_the_status(
    open_flow: Callable[..., dict[str, Any]], flows_client: APIClient
) -> None:
    flow = open_flow()
    response = retrieve(flows_client, flow)
    assert response.status_code == 409
    assert response.json()["status"] == "open"


def test_retrieve_returns_the_values_once_and_destroys_the_ciphertext(
    open_flow: Callable[..., dict[str, Any]],
    flows_client: APIClient,
    reviewer: User,
    browser_for: Callable[[User], Client],
) -> None:
    flow = open_flow()
    secret = new_secret()
    assert submit(browser_for(reviewer), flow, api_token=secret, account="acme").status_code == 303
    row = HostedFlow.objects.get(pk=flow["id"])
    assert (
        row.status == FlowStatus.SUBMITTED and row.ciphertext and secret.encode() not in bytes(row.ciphertext)
    )

    first = retrieve(flows_client, flow)
    assert first.status_code == 200
    assert first.json() == {"id": flow["id"], "content": {"api_token": secret, "account": "acme"}}
    assert first["Cache-Control"] == "no-store"
    row.refresh_from_db()
    assert (row.status, row.ciphertext, row.nonce) == (FlowStatus.RETRIEVED, None, None)
    assert row.retrieved_at is not None
    assert RequestEvent.objects.filter(request_id=flow["requestId"], kind="flow_retrieved").count() == 1

    second = retrieve(flows_client, flow)
    assert second.status_code == 410
    assert second.json()["status"] == "retrieved"


def test_another_agents_retrieve_is_not_found(
    open_flow: Callable[..., dict[str, Any]],
    queue: Queue,
    reviewer: User,
    browser_for: Callable[[User], Client],
    flows_client: APIClient,
) -> None:
    flow = open_flow()
    submit(browser_for(reviewer), flow, api_token=new_secret())
    _, other_key = accounts.create_agent("intruder", queue_slugs=[queue.slug], scopes=[Scope.FLOWS_SECRETS])
    intruder = api_client(other_key)
    assert retrieve(intruder, flow).status_code == 404
    assert intruder.get(f"/api/v1/flows/{flow['id']}").status_code == 404
    # The intruder's attempt destroyed nothing: the owner still reads the value.
    assert retrieve(flows_client, flow).status_code == 200


def test_an_unknown_flow_is_not_found(flows_client: APIClient) -> None:
    response = flows_client.post("/api/v1/flows/00000000-0000-4000-8000-000000000000/retrieve")
    assert response.status_code == 404


def test_an_expired_flow_is_gone(
    open_flow: Callable[..., dict[str, Any]], flows_client: APIClient, clock: Any
) -> None:
    flow = open_flow(expiresIn=60)
    clock.advance(seconds=61)
    response = retrieve(flows_client, flow)
    assert response.status_code == 410
    assert response.json()["status"] == "expired"
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).status == Status.EXPIRED
    # The agent heard about it like any expiry: cancel, and no content.
    event = AgentEvent.objects.get(request_id=flow["requestId"])
    assert (event.kind, event.payload["result"]) == ("expired", {"action": "cancel"})


def test_flow_state_reports_progress_but_never_values(
    open_flow: Callable[..., dict[str, Any]],
    flows_client: APIClient,
    reviewer: User,
    browser_for: Callable[[User], Client],
) -> None:
    flow = open_flow()
    secret = new_secret()
    submit(browser_for(reviewer), flow, api_token=secret)
    state = flows_client.get(f"/api/v1/flows/{flow['id']}")
    assert state.status_code == 200
    assert (state.json()["status"], state.json()["requestStatus"]) == ("submitted", "completed")
    assert secret not in state.content.decode()


def test_the_request_result_is_accept_without_content(
    open_flow: Callable[..., dict[str, Any]],
    flows_client: APIClient,
    reviewer: User,
    browser_for: Callable[[User], Client],
) -> None:
    flow = open_flow()
    submit(browser_for(reviewer), flow, api_token=new_secret())
    request = flows_client.get(f"/api/v1/requests/{flow['requestId']}").json()
    assert request["status"] == "completed"
    assert answer_of(request["result"]) == {"action": "accept"}
    feed = flows_client.get("/api/v1/events?after=0").json()["events"]
    assert [(e["type"], e["id"], answer_of(e["result"])) for e in feed] == [
        ("completed", flow["requestId"], {"action": "accept"})
    ]


def test_unretrieved_values_are_purged_after_the_retention_period(
    open_flow: Callable[..., dict[str, Any]],
    flows_client: APIClient,
    reviewer: User,
    browser_for: Callable[[User], Client],
    clock: Any,
    settings: Any,
) -> None:
    settings.FLOW_RETENTION_SECONDS = 3600
    kept, purged = open_flow(expiresIn=7200), open_flow(expiresIn=7200)
    client = browser_for(reviewer)
    submit(client, purged, api_token=new_secret())
    clock.advance(seconds=1800)
    submit(client, kept, api_token=new_secret())
    clock.advance(seconds=1801)
    assert hosted_flows.purge_expired_flows(clock.now()) == 1
    assert hosted_flows.purge_expired_flows(clock.now()) == 0  # idempotent
    row = HostedFlow.objects.get(pk=purged["id"])
    assert (row.status, row.ciphertext, row.nonce) == (FlowStatus.PURGED, None, None)
    assert RequestEvent.objects.filter(request_id=purged["requestId"], kind="flow_purged").exists()
    assert retrieve(flows_client, purged).status_code == 410
    assert retrieve(flows_client, kept).status_code == 200


def test_retrieve_purges_a_value_past_retention_even_without_the_sweep(
    open_flow: Callable[..., dict[str, Any]],
    flows_client: APIClient,
    reviewer: User,
    browser_for: Callable[[User], Client],
    clock: Any,
    settings: Any,
) -> None:
    settings.FLOW_RETENTION_SECONDS = 60
    flow = open_flow()
    submit(browser_for(reviewer), flow, api_token=new_secret())
    clock.advance(seconds=61)
    response = retrieve(flows_client, flow)
    assert (response.status_code, response.json()["status"]) == (410, "purged")
    assert HostedFlow.objects.get(pk=flow["id"]).ciphertext is None


def test_the_purge_sweep_closes_flows_whose_request_ended_without_a_value(
    open_flow: Callable[..., dict[str, Any]], flows_agent: Agent
) -> None:
    flow = open_flow()
    transitions.withdraw_request(flow["requestId"], agent=flows_agent)
    assert hosted_flows.purge_expired_flows() == 1
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.EXPIRED


def test_the_purge_task_runs_the_sweep(
    open_flow: Callable[..., dict[str, Any]], flows_agent: Agent, settings: Any
) -> None:
    from elicitation.flows import tasks

    flow = open_flow()
    transitions.withdraw_request(flow["requestId"], agent=flows_agent)
    assert tasks.purge_expired_flows.apply().get() == 1  # runs the task body locally, broker or not
    assert "purge-expired-flows" in settings.CELERY_BEAT_SCHEDULE
