"""The flow page /flows/<id>/: who may open and submit it, what it sends, and what submitting does."""

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from elicitation.flows import hosted_flows
from elicitation.models import (
    Action,
    Agent,
    AgentEvent,
    Draft,
    ElicitationRequest,
    FlowStatus,
    HostedFlow,
    Queue,
    RequestEvent,
    Status,
)
from elicitation.queue import transitions
from tests.answers import answer_of
from tests.flows.conftest import claim, flow_path, new_secret, submit

pytestmark = pytest.mark.django_db

OpenFlow = Callable[..., dict[str, Any]]
BrowserFor = Callable[[User], Client]


def forward(agent: Agent, queue: Queue, flow: dict[str, Any]) -> ElicitationRequest:
    """What an MCP client relaying the server's URL elicitation creates: a plain URL-mode request."""
    request, _ = transitions.create_request(
        agent=agent, queue_slug=queue.slug, message="Open this link", mode="url", url=flow["url"]
    )
    return request


# --- who may open it -------------------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_log_in(open_flow: OpenFlow) -> None:
    flow = open_flow()
    for response in (
        Client().get(flow_path(flow)),
        Client().post(flow_path(flow), {"answer-api_token": "x"}),
    ):
        assert response.status_code == 302
        assert response["Location"] == f"/accounts/login/?next=/flows/{flow['id']}/"
        assert response["Cache-Control"] == "no-store"
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).status == Status.PENDING


def test_a_queue_member_opening_it_sees_it_without_claiming_and_claims_with_the_button(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor
) -> None:
    flow = open_flow()
    client = browser_for(reviewer)
    response = client.get(flow_path(flow))
    assert response.status_code == 200
    assert b"data-flow-claim" in response.content and b'type="password"' not in response.content
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    assert (request.status, request.claimed_by) == (Status.PENDING, None)
    assert claim(client, flow).status_code == 303
    request.refresh_from_db()
    assert (request.status, request.claimed_by) == (Status.CLAIMED, reviewer)
    assert b'type="password"' in client.get(flow_path(flow)).content
    kinds = list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True))
    assert kinds == ["created", "viewed", "claimed", "viewed"]


def test_a_reviewer_outside_the_queue_is_refused_on_open_and_submit(
    open_flow: OpenFlow, make_reviewer: Callable[..., User], other_queue: Queue, browser_for: BrowserFor
) -> None:
    flow = open_flow()
    outsider = browser_for(make_reviewer("mallory", other_queue))
    assert outsider.get(flow_path(flow)).status_code == 403
    response = submit(outsider, flow, api_token=new_secret())
    assert response.status_code == 403
    assert response["Cache-Control"] == "no-store"
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.OPEN
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).status == Status.PENDING


def test_a_member_is_refused_while_another_reviewer_holds_the_claim(
    open_flow: OpenFlow,
    reviewer: User,
    make_reviewer: Callable[..., User],
    queue: Queue,
    browser_for: BrowserFor,
) -> None:
    flow = open_flow()
    assert claim(browser_for(reviewer), flow).status_code == 303
    colleague = browser_for(make_reviewer("carol", queue))
    assert colleague.get(flow_path(flow)).status_code == 403
    assert submit(colleague, flow, api_token=new_secret()).status_code == 403
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    assert (request.status, request.claimed_by) == (Status.CLAIMED, reviewer)
    assert HostedFlow.objects.get(pk=flow["id"]).ciphertext is None


def test_a_claim_whose_lease_ran_out_can_be_taken_by_another_member(
    open_flow: OpenFlow,
    reviewer: User,
    make_reviewer: Callable[..., User],
    queue: Queue,
    browser_for: BrowserFor,
    clock: Any,
) -> None:
    flow = open_flow()
    browser_for(reviewer).get(flow_path(flow))
    clock.advance(seconds=queue.lease_seconds + 1)
    carol = make_reviewer("carol", queue)
    assert submit(browser_for(carol), flow, api_token=new_secret()).status_code == 303
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).answered_by == carol


def test_an_unknown_or_tampered_flow_id_is_not_found(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor
) -> None:
    flow = open_flow()
    client = browser_for(reviewer)
    flipped = flow["id"][:-1] + ("0" if flow["id"][-1] != "0" else "1")
    response = client.get(f"/flows/{flipped}/")
    assert response.status_code == 404
    assert response["Cache-Control"] == "no-store"
    assert client.get(f"/flows/{flow['id']}x/").status_code == 404
    assert client.get("/flows/not-a-uuid/").status_code == 404
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).status == Status.PENDING


def test_an_expired_flow_is_gone(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor, clock: Any
) -> None:
    flow = open_flow(expiresIn=30)
    client = browser_for(reviewer)
    assert client.get(flow_path(flow)).status_code == 200
    clock.advance(seconds=31)
    assert client.get(flow_path(flow)).status_code == 410
    assert submit(client, flow, api_token=new_secret()).status_code == 410
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.EXPIRED
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).status == Status.EXPIRED


# --- what the page sends ----------------------------------------------------------------------------------------


def test_the_page_is_never_cached_framed_or_referred_and_runs_no_script(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor
) -> None:
    flow = open_flow()
    response = browser_for(reviewer).get(flow_path(flow))
    assert response["Cache-Control"] == "no-store"
    assert response["Referrer-Policy"] == "no-referrer"
    csp = response["Content-Security-Policy"]
    assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp
    assert "unsafe-inline" not in csp and "script-src" not in csp  # default-src 'none' forbids every script
    assert response["X-Frame-Options"] == "DENY"
    html = response.content.decode()
    assert "<script" not in html and "style=" not in html and "<style" not in html


def test_sensitive_fields_are_password_inputs_without_autocomplete(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor
) -> None:
    flow, client = open_flow(), browser_for(reviewer)
    claim(client, flow)
    html = client.get(flow_path(flow)).content.decode()
    token_input = re.search(r'<input[^>]*name="answer-api_token"[^>]*>', html)
    assert token_input is not None
    assert 'type="password"' in token_input[0] and 'autocomplete="off"' in token_input[0]
    account_input = re.search(r'<input[^>]*name="answer-account"[^>]*>', html)
    assert account_input is not None and 'type="text"' in account_input[0]
    assert 'name="csrfmiddlewaretoken"' in html


def test_the_form_is_protected_against_cross_site_posts(open_flow: OpenFlow, reviewer: User) -> None:
    flow = open_flow()
    client = Client(enforce_csrf_checks=True)
    client.force_login(reviewer)
    response = submit(client, flow, api_token=new_secret())
    assert response.status_code == 403
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.OPEN


def csrf_client(user: User, flow: dict[str, Any]) -> tuple[Client, str]:
    """A client that enforces CSRF like a browser, with the token read from the page."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(user, backend="django.contrib.auth.backends.ModelBackend")
    html = client.get(flow_path(flow)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token is not None
    return client, token[1]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        # What a browser sends under Referrer-Policy: no-referrer for the page's own form.
        ({"HTTP_ORIGIN": "null", "HTTP_SEC_FETCH_SITE": "same-origin"}, 303),
        ({"HTTP_ORIGIN": "null"}, 303),
        ({"HTTP_ORIGIN": "http://testserver", "HTTP_SEC_FETCH_SITE": "same-origin"}, 303),
        # A cross-site form (even one that somehow holds a token) is refused.
        ({"HTTP_ORIGIN": "null", "HTTP_SEC_FETCH_SITE": "cross-site"}, 403),
        ({"HTTP_ORIGIN": "https://evil.example", "HTTP_SEC_FETCH_SITE": "cross-site"}, 403),
    ],
)
def test_a_null_origin_passes_only_with_the_token_from_the_same_site(
    open_flow: OpenFlow, reviewer: User, headers: dict[str, str], expected: int
) -> None:
    flow = open_flow()
    client, token = csrf_client(reviewer, flow)
    body = {"csrfmiddlewaretoken": token, "answer-api_token": new_secret(), "action": "accept"}
    assert client.post(flow_path(flow), body, **headers).status_code == expected
    expected_status = FlowStatus.SUBMITTED if expected == 303 else FlowStatus.OPEN
    assert HostedFlow.objects.get(pk=flow["id"]).status == expected_status


def test_a_null_origin_without_the_token_is_refused(open_flow: OpenFlow, reviewer: User) -> None:
    flow = open_flow()
    client, _ = csrf_client(reviewer, flow)
    body = {"answer-api_token": new_secret(), "action": "accept"}
    response = client.post(flow_path(flow), body, HTTP_ORIGIN="null", HTTP_SEC_FETCH_SITE="same-origin")
    assert response.status_code == 403
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.OPEN


def test_invalid_answers_are_refused_without_echoing_the_secret(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor
) -> None:
    flow = open_flow()
    short = "Pw-" + new_secret()[-4:]  # below minLength 8
    response = submit(browser_for(reviewer), flow, api_token=short, account="acme")
    assert response.status_code == 400
    html = response.content.decode()
    assert "At least 8 characters" in html or "at least 8" in html
    assert short not in html
    assert 'value="acme"' in html  # non-sensitive answers survive the round trip
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.OPEN


def test_a_missing_required_secret_is_refused(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor
) -> None:
    flow = open_flow()
    assert submit(browser_for(reviewer), flow, account="acme").status_code == 400
    assert HostedFlow.objects.get(pk=flow["id"]).status == FlowStatus.OPEN


# --- what submitting does ------------------------------------------------------------------------------------------


def test_submitting_completes_the_request_with_accept_and_no_content(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor, flows_agent: Agent
) -> None:
    flow = open_flow()
    client = browser_for(reviewer)
    response = submit(client, flow, api_token=new_secret(), account="acme")
    assert (response.status_code, response["Location"]) == (303, flow_path(flow))
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    assert (request.status, request.action, request.content, request.answered_by) == (
        Status.COMPLETED,
        Action.ACCEPT,
        None,
        reviewer,
    )
    assert answer_of(request.result()) == {"action": "accept"}
    assert not Draft.objects.exists()
    event = AgentEvent.objects.get(agent=flows_agent)
    assert (event.kind, answer_of(event.payload["result"])) == ("completed", {"action": "accept"})
    audit = RequestEvent.objects.get(request=request, kind="completed")
    assert audit.detail == {"action": "accept", "hosted_flow": flow["id"]}
    # The reviewer who submitted sees it done; a reload does not offer to send it again.
    done = client.get(flow_path(flow))
    assert done.status_code == 200 and 'class="flow-form"' not in done.content.decode()
    again = submit(client, flow, api_token=new_secret())
    assert again.status_code == 200 and 'class="flow-form"' not in again.content.decode()
    assert AgentEvent.objects.filter(agent=flows_agent).count() == 1


def test_a_completed_flow_is_gone_for_other_reviewers(
    open_flow: OpenFlow,
    reviewer: User,
    make_reviewer: Callable[..., User],
    queue: Queue,
    browser_for: BrowserFor,
) -> None:
    flow = open_flow()
    submit(browser_for(reviewer), flow, api_token=new_secret())
    assert browser_for(make_reviewer("carol", queue)).get(flow_path(flow)).status_code == 410


def test_declining_completes_without_a_value(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor, flows_client: APIClient
) -> None:
    flow = open_flow()
    client = browser_for(reviewer)
    response = client.post(flow_path(flow), {"answer-api_token": new_secret(), "action": "decline"})
    assert response.status_code == 200
    request = ElicitationRequest.objects.get(pk=flow["requestId"])
    assert (request.status, request.action, request.content) == (Status.COMPLETED, Action.DECLINE, None)
    flow_row = HostedFlow.objects.get(pk=flow["id"])
    assert (flow_row.status, flow_row.ciphertext) == (FlowStatus.EXPIRED, None)
    assert flows_client.post(f"/api/v1/flows/{flow['id']}/retrieve").status_code == 410
    assert client.get(flow_path(flow)).status_code == 410


def test_the_reviewer_api_cannot_accept_a_hosted_flow_without_its_value(
    open_flow: OpenFlow, reviewer: User, reviewer_client: APIClient
) -> None:
    flow = open_flow()
    transitions.claim_request(flow["requestId"], user=reviewer)
    response = reviewer_client.post(
        f"/api/v1/review/requests/{flow['requestId']}/respond", {"action": "accept"}, format="json"
    )
    assert response.status_code == 400
    assert ElicitationRequest.objects.get(pk=flow["requestId"]).status == Status.CLAIMED
    declined = reviewer_client.post(
        f"/api/v1/review/requests/{flow['requestId']}/respond", {"action": "decline"}, format="json"
    )
    assert declined.status_code == 200
    assert hosted_flows.settle_flow(flow["id"]).status == FlowStatus.EXPIRED


# --- forwarded URL elicitations ---------------------------------------------------------------------------------


def test_completing_the_flow_completes_requests_forwarding_its_url(
    open_flow: OpenFlow,
    reviewer: User,
    browser_for: BrowserFor,
    flows_agent: Agent,
    queue: Queue,
    make_agent: Callable[..., tuple[Agent, str]],
) -> None:
    flow = open_flow()
    forwarded = forward(flows_agent, queue, flow)
    stranger_agent, _ = make_agent("stranger", queue)
    lookalike = forward(stranger_agent, queue, flow)  # another agent's request is never touched
    transitions.claim_request(forwarded.pk, user=reviewer)
    assert submit(browser_for(reviewer), flow, api_token=new_secret()).status_code == 303
    forwarded.refresh_from_db()
    assert (forwarded.status, forwarded.action, forwarded.content) == (Status.COMPLETED, Action.ACCEPT, None)
    assert answer_of(forwarded.result()) == {"action": "accept"}
    assert forwarded.url_flow_completed_at is not None
    payloads = [e.payload for e in AgentEvent.objects.filter(agent=flows_agent).order_by("seq")]
    assert {(p["id"], p["type"]) for p in payloads} == {
        (flow["requestId"], "completed"),
        (str(forwarded.pk), "completed"),
    }
    assert all(answer_of(p["result"]) == {"action": "accept"} for p in payloads)
    lookalike.refresh_from_db()
    assert lookalike.status == Status.PENDING


def test_holding_a_forwarded_requests_claim_binds_the_reviewer_to_the_flow(
    open_flow: OpenFlow,
    make_reviewer: Callable[..., User],
    browser_for: BrowserFor,
    flows_agent: Agent,
    other_queue: Queue,
) -> None:
    flows_agent.queues.add(other_queue)
    flow = open_flow()  # in "payments", which dora is not a member of
    dora = make_reviewer("dora", other_queue)
    forwarded = forward(flows_agent, other_queue, flow)
    client = browser_for(dora)
    assert client.get(flow_path(flow)).status_code == 403  # not yet handed the forwarded request
    transitions.claim_request(forwarded.pk, user=dora)
    assert client.get(flow_path(flow)).status_code == 200
    assert submit(client, flow, api_token=new_secret()).status_code == 303
    forwarded.refresh_from_db()
    assert forwarded.status == Status.COMPLETED


def test_a_forwarded_request_cannot_be_accepted_without_the_flow(
    open_flow: OpenFlow, reviewer: User, reviewer_client: APIClient, flows_agent: Agent, queue: Queue
) -> None:
    flow = open_flow()
    forwarded = forward(flows_agent, queue, flow)
    transitions.claim_request(forwarded.pk, user=reviewer)
    response = reviewer_client.post(
        f"/api/v1/review/requests/{forwarded.pk}/respond", {"action": "accept"}, format="json"
    )
    assert response.status_code == 400
    forwarded.refresh_from_db()
    assert forwarded.status == Status.CLAIMED


def test_declining_the_flow_declines_its_forwards(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor, flows_agent: Agent, queue: Queue
) -> None:
    flow = open_flow()
    forwarded = forward(flows_agent, queue, flow)
    browser_for(reviewer).post(flow_path(flow), {"action": "decline"})
    forwarded.refresh_from_db()
    assert (forwarded.status, forwarded.action) == (Status.COMPLETED, Action.DECLINE)


def test_a_request_for_reviewhubs_own_flow_reads_as_reviewhubs_secure_form_not_another_website(
    open_flow: OpenFlow, reviewer: User, browser_for: BrowserFor, agent: Agent, queue: Queue
) -> None:
    flow = open_flow()
    request = forward(agent, queue, flow)
    html = browser_for(reviewer).get(f"/requests/{request.pk}/").content.decode()
    assert "ReviewHub's own secure form" in html and "Open the secure form" in html
    assert "another website" not in html and "data-url-warning" not in html
