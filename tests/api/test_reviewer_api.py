"""The reviewer API: queues with counts, claim-next, claim/release/heartbeat, drafts, respond, and who may do it."""

from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.models import ElicitationRequest, Status
from elicitation.queue import accounts, transitions
from tests.answers import answer_of

pytestmark = pytest.mark.django_db


def client_for(user: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=user)
    return client


def test_queue_list_shows_member_queues_with_counts(
    reviewer_client: APIClient, make_request: Any, reviewer: User, other_queue: Any
) -> None:
    first = make_request()
    make_request()
    transitions.claim_request(first.pk, user=reviewer)
    data = reviewer_client.get("/api/v1/review/queues").json()
    assert [(q["slug"], q["pending"], q["claimed"], q["overdue"]) for q in data] == [("payments", 1, 1, 0)]


def test_claim_next_then_respond_is_read_by_the_agent(
    reviewer_client: APIClient, make_request: Any, agent_client: APIClient
) -> None:
    request = make_request()
    claimed = reviewer_client.post("/api/v1/review/queues/payments/claim-next")
    assert claimed.status_code == 200
    assert (claimed.json()["id"], claimed.json()["claimedBy"]) == (str(request.pk), "alice")
    answered = reviewer_client.post(
        f"/api/v1/review/requests/{request.pk}/respond",
        {"action": "accept", "content": {"approve": True}},
        format="json",
    )
    assert answered.status_code == 200, answered.json()
    result = agent_client.get(f"/api/v1/requests/{request.pk}").json()["result"]
    assert answer_of(result) == {"action": "accept", "content": {"approve": True}}


def test_claim_next_on_an_empty_queue_is_204(reviewer_client: APIClient, queue: Any) -> None:
    assert reviewer_client.post("/api/v1/review/queues/payments/claim-next").status_code == 204


def test_respond_with_invalid_answers_is_400_per_field_and_keeps_the_claim(
    reviewer_client: APIClient, make_request: Any
) -> None:
    request = make_request()
    reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim")
    response = reviewer_client.post(
        f"/api/v1/review/requests/{request.pk}/respond",
        {"action": "accept", "content": {"approve": "yes", "note": "x" * 201}},
        format="json",
    )
    assert response.status_code == 400
    assert set(response.json()["fields"]) == {"content.approve", "content.note"}
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.CLAIMED


def test_drafts_are_saved_and_shown_with_the_request(reviewer_client: APIClient, make_request: Any) -> None:
    request = make_request()
    reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim")
    saved = reviewer_client.post(
        f"/api/v1/review/requests/{request.pk}/drafts", {"question": "note", "value": "half"}, format="json"
    )
    assert saved.status_code == 200, saved.json()
    bad = reviewer_client.post(
        f"/api/v1/review/requests/{request.pk}/drafts",
        {"question": "approve", "value": "nope", "state": "submitted"},
        format="json",
    )
    assert (bad.status_code, list(bad.json()["fields"])) == (400, ["approve"])
    unknown = reviewer_client.post(
        f"/api/v1/review/requests/{request.pk}/drafts", {"question": "ghost", "value": 1}, format="json"
    )
    assert unknown.status_code == 400
    drafts = reviewer_client.get(f"/api/v1/review/requests/{request.pk}").json()["drafts"]
    assert [(d["question"], d["value"], d["state"], d["updatedBy"]) for d in drafts] == [
        ("note", "half", "draft", "alice")
    ]


def test_release_and_heartbeat(reviewer_client: APIClient, make_request: Any) -> None:
    request = make_request()
    reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim")
    assert reviewer_client.post(f"/api/v1/review/requests/{request.pk}/heartbeat").status_code == 200
    released = reviewer_client.post(f"/api/v1/review/requests/{request.pk}/release")
    assert (released.status_code, released.json()["status"]) == (200, "pending")
    assert reviewer_client.post(f"/api/v1/review/requests/{request.pk}/heartbeat").status_code == 409


def test_a_second_claim_is_409_naming_the_status(
    reviewer_client: APIClient, make_request: Any, make_reviewer: Any, queue: Any
) -> None:
    request = make_request()
    reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim")
    bob = client_for(make_reviewer("bob", queue))
    response = bob.post(f"/api/v1/review/requests/{request.pk}/claim")
    assert (response.status_code, response.json()["status"]) == (409, "claimed")
    answer = bob.post(f"/api/v1/review/requests/{request.pk}/respond", {"action": "decline"}, format="json")
    assert answer.status_code == 409


def test_only_supervisors_take_over(
    make_request: Any, reviewer_client: APIClient, make_reviewer: Any, queue: Any
) -> None:
    request = make_request()
    reviewer_client.post(f"/api/v1/review/requests/{request.pk}/claim")
    bob = client_for(make_reviewer("bob", queue))
    assert bob.post(f"/api/v1/review/requests/{request.pk}/takeover").status_code == 403
    boss = client_for(make_reviewer("boss", queue, supervisor=True))
    taken = boss.post(f"/api/v1/review/requests/{request.pk}/takeover")
    assert (taken.status_code, taken.json()["claimedBy"]) == (200, "boss")


def test_a_reviewer_outside_the_queue_cannot_list_claim_or_answer_it(
    make_request: Any, make_reviewer: Any, other_queue: Any
) -> None:
    request = make_request()
    outsider = client_for(make_reviewer("mallory", other_queue))
    assert [q["slug"] for q in outsider.get("/api/v1/review/queues").json()] == ["other"]
    assert outsider.get("/api/v1/review/queues/payments/requests").status_code == 403
    assert outsider.post("/api/v1/review/queues/payments/claim-next").status_code == 403
    assert outsider.get(f"/api/v1/review/requests/{request.pk}").status_code == 403
    assert outsider.post(f"/api/v1/review/requests/{request.pk}/claim").status_code == 403
    respond = outsider.post(
        f"/api/v1/review/requests/{request.pk}/respond", {"action": "decline"}, format="json"
    )
    assert respond.status_code == 403
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_unknown_queue_or_request_is_404(reviewer_client: APIClient) -> None:
    assert reviewer_client.post("/api/v1/review/queues/nope/claim-next").status_code == 404
    assert (
        reviewer_client.get("/api/v1/review/requests/00000000-0000-0000-0000-000000000000").status_code == 404
    )


def test_anonymous_and_agents_cannot_use_the_reviewer_api(agent_client: APIClient, queue: Any) -> None:
    assert APIClient().get("/api/v1/review/queues").status_code == 401
    assert agent_client.get("/api/v1/review/queues").status_code in (401, 403)


def test_a_reviewer_token_authenticates_scripts(reviewer: User, make_request: Any) -> None:
    make_request()
    token = accounts.create_reviewer_token(reviewer, "script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    assert client.post("/api/v1/review/queues/payments/claim-next").status_code == 200
    client.credentials(HTTP_AUTHORIZATION="Bearer rhr_00000000_wrong")
    assert client.get("/api/v1/review/queues").status_code == 401


def test_session_auth_needs_csrf_for_writes(reviewer: User, make_request: Any) -> None:
    make_request()
    client = APIClient(enforce_csrf_checks=True)
    client.login(username="alice", password="pw-alice")
    assert client.get("/api/v1/review/queues").status_code == 200
    assert client.post("/api/v1/review/queues/payments/claim-next").status_code == 403
