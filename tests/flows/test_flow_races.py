"""Races with real threads and connections (SQLite here, PostgreSQL in the services leg): a value is handed out
exactly once, a flow is submitted exactly once, and a submission racing an expiry or a withdrawal gives the agent
one consistent outcome."""

import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import close_old_connections, connection
from django.test import Client

from elicitation.flows import hosted_flows
from elicitation.models import (
    Agent,
    AgentEvent,
    ElicitationRequest,
    FlowStatus,
    HostedFlow,
    RequestEvent,
    Status,
)
from elicitation.queue import transitions
from elicitation.queue.errors import DomainError
from tests.flows.conftest import claim, new_secret, submit

pytestmark = pytest.mark.django_db(transaction=True)


def run_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    results: list[Any] = [None] * count
    start = threading.Barrier(count)

    def runner(index: int) -> None:
        try:
            start.wait()
            results[index] = work(index)
        except Exception as exc:  # a thread's failure is part of the result
            results[index] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=runner, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    return results


def outcome(result: Any) -> str:
    return type(result).__name__ if isinstance(result, Exception) else "ok"


def submitted_flow(open_flow: Callable[..., dict[str, Any]], reviewer: User, secret: str) -> dict[str, Any]:
    flow = open_flow()
    client = Client()
    client.force_login(reviewer, backend="django.contrib.auth.backends.ModelBackend")
    assert submit(client, flow, api_token=secret).status_code == 303
    return flow


def test_concurrent_retrieves_hand_the_value_out_exactly_once(
    open_flow: Callable[..., dict[str, Any]], reviewer: User, flows_agent: Agent
) -> None:
    secret = new_secret()
    flow = submitted_flow(open_flow, reviewer, secret)
    results = run_threads(6, lambda _: hosted_flows.retrieve_hosted_flow(flow["id"], agent=flows_agent))
    winners = [r for r in results if isinstance(r, dict)]
    assert winners == [{"api_token": secret}], results
    assert Counter(outcome(r) for r in results) == {"ok": 1, "FlowGone": 5}
    assert RequestEvent.objects.filter(request_id=flow["requestId"], kind="flow_retrieved").count() == 1
    assert HostedFlow.objects.get(pk=flow["id"]).ciphertext is None


def test_a_double_submission_stores_exactly_one_value(
    open_flow: Callable[..., dict[str, Any]], reviewer: User, flows_agent: Agent
) -> None:
    flow = open_flow()
    hosted_flows.claim_flow(flow["id"], reviewer)
    values = [new_secret(), new_secret(), new_secret()]
    results = run_threads(
        3,
        lambda i: hosted_flows.complete_hosted_flow(
            flow["id"], user=reviewer, content={"api_token": values[i]}
        ),
    )
    assert Counter(outcome(r) for r in results)["ok"] == 1, results
    assert all(isinstance(r, DomainError) for r in results if outcome(r) != "ok")
    winner = values[[outcome(r) for r in results].index("ok")]
    assert hosted_flows.retrieve_hosted_flow(flow["id"], agent=flows_agent) == {"api_token": winner}
    assert AgentEvent.objects.filter(request_id=flow["requestId"]).count() == 1


@pytest.mark.parametrize("rival", ["expire", "withdraw"])
def test_a_submission_racing_the_end_of_the_request_has_one_outcome(
    open_flow: Callable[..., dict[str, Any]],
    reviewer: User,
    flows_agent: Agent,
    rival: str,
) -> None:
    flow = open_flow()
    hosted_flows.claim_flow(flow["id"], reviewer)
    secret = new_secret()

    def work(index: int) -> Any:
        if index == 0:
            return hosted_flows.complete_hosted_flow(flow["id"], user=reviewer, content={"api_token": secret})
        if rival == "expire":
            return transitions.expire_request(flow["requestId"], actor_user=reviewer)  # a supervisor's expiry
        return transitions.withdraw_request(flow["requestId"], agent=flows_agent)

    results = run_threads(2, work)
    assert Counter(outcome(r) for r in results)["ok"] == 1, results
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    row = hosted_flows.settle_flow(flow["id"])
    events = list(AgentEvent.objects.filter(request_id=flow["requestId"]).values_list("kind", flat=True))
    if outcome(results[0]) == "ok":
        assert (request.status, request.action, row.status) == (
            Status.COMPLETED,
            "accept",
            FlowStatus.SUBMITTED,
        )
        assert events == ["completed"]
        assert hosted_flows.retrieve_hosted_flow(flow["id"], agent=flows_agent) == {"api_token": secret}
    else:
        assert request.status in (Status.EXPIRED, Status.WITHDRAWN)
        assert (row.status, row.ciphertext) == (FlowStatus.EXPIRED, None)
        assert events == ["expired" if rival == "expire" else "withdrawn"]


def test_two_members_claiming_the_flow_at_once_bind_exactly_one(
    open_flow: Callable[..., dict[str, Any]], make_reviewer: Callable[..., User], queue: Any
) -> None:
    flow = open_flow()
    members = [make_reviewer(f"m{i}", queue) for i in range(4)]

    def claim_on_page(index: int) -> int:
        client = Client()
        client.force_login(members[index], backend="django.contrib.auth.backends.ModelBackend")
        return int(claim(client, flow).status_code)

    results = run_threads(len(members), claim_on_page)
    assert sorted(results) == [303, 403, 403, 403], results
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    assert request.claimed_by in members
