"""The reviewer pages' "next request" resumes a claim the reviewer still holds before claiming another, so
claims left behind by "next" do not pile up; API clients keep the plain claim-the-next behaviour."""

from typing import Any

from django.test import Client
from django.urls import reverse

from elicitation.models import ElicitationRequest, RequestEvent, Status
from elicitation.queue import transitions


def test_next_resumes_the_request_the_reviewer_already_holds(make_request, reviewer, queue, clock) -> None:
    held = make_request(priority=1)
    make_request(priority=5)  # more urgent, but the reviewer has one in hand
    transitions.claim_request(held.pk, user=reviewer)
    clock.advance(seconds=30)
    resumed = transitions.claim_next(queue, user=reviewer, resume_held=True)
    assert resumed is not None and resumed.pk == held.pk
    assert ElicitationRequest.objects.filter(status=Status.CLAIMED, claimed_by=reviewer).count() == 1


def test_resuming_renews_the_lease_through_the_claim_path(make_request, reviewer, queue, clock) -> None:
    held = make_request()
    transitions.claim_request(held.pk, user=reviewer)
    clock.advance(seconds=40)
    resumed = transitions.claim_next(queue, user=reviewer, resume_held=True)
    assert resumed is not None
    assert resumed.lease_expires_at is not None
    assert (resumed.lease_expires_at - clock.now()).total_seconds() == queue.lease_seconds
    assert RequestEvent.objects.filter(request=held, kind="claimed").count() == 2


def test_a_lapsed_claim_is_not_resumed_the_most_urgent_pending_request_is_claimed(
    make_request, reviewer, queue, clock
) -> None:
    lapsed = make_request(priority=1)
    urgent = make_request(priority=5)
    transitions.claim_request(lapsed.pk, user=reviewer)
    clock.advance(seconds=queue.lease_seconds + 1)
    claimed = transitions.claim_next(queue, user=reviewer, resume_held=True)
    assert claimed is not None and claimed.pk == urgent.pk


def test_a_claim_held_by_someone_else_is_not_resumed(make_request, make_reviewer, reviewer, queue) -> None:
    bob = make_reviewer("bob", queue)
    theirs = make_request(priority=5)
    pending = make_request(priority=1)
    transitions.claim_request(theirs.pk, user=bob)
    claimed = transitions.claim_next(queue, user=reviewer, resume_held=True)
    assert claimed is not None and claimed.pk == pending.pk


def test_without_resume_held_claim_next_claims_another(make_request, reviewer, queue) -> None:
    first, second = make_request(), make_request()
    assert transitions.claim_next(queue, user=reviewer).pk == first.pk
    assert transitions.claim_next(queue, user=reviewer).pk == second.pk


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_next_button_opens_the_held_request_and_claims_nothing_more(
    make_request, reviewer, queue
) -> None:
    held, other = make_request(), make_request()
    transitions.claim_request(held.pk, user=reviewer)
    response = _client(reviewer).post(reverse("queue-next", args=[queue.slug]))
    assert response.status_code == 302
    assert response["Location"] == reverse("request", args=[held.pk])
    assert ElicitationRequest.objects.get(pk=other.pk).status == Status.PENDING


def test_answering_then_next_resumes_a_held_claim_before_a_new_one(
    make_request, reviewer, queue, clock
) -> None:
    answered, held, waiting = make_request(priority=9), make_request(priority=1), make_request(priority=5)
    transitions.claim_request(held.pk, user=reviewer)  # left behind earlier
    transitions.claim_request(answered.pk, user=reviewer)
    response = _client(reviewer).post(
        reverse("request", args=[answered.pk]),
        {"action": "decline", "then": "next"},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("request", args=[held.pk])
    assert ElicitationRequest.objects.get(pk=waiting.pk).status == Status.PENDING
