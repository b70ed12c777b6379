"""The reviewer workspace without a browser: what was sent on closed requests, leaving releases an untouched claim,
the queue row partial, history filters and search, and "open the next request" after answering."""

from typing import Any

import pytest

from elicitation.models import ElicitationRequest, Status
from elicitation.queue import transitions
from tests.answers import answer_of

pytestmark = pytest.mark.django_db


def page(request: ElicitationRequest) -> str:
    return f"/requests/{request.pk}/"


def test_a_closed_request_shows_the_sent_result_who_and_when_and_the_trail_not_a_stale_draft(
    login, reviewer, make_request
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.save_draft(request.pk, user=reviewer, question_id="note", value="stale draft", state="draft")
    transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True, "note": "sent"})
    html = login(reviewer).get(page(request)).content.decode()
    assert 'id="answer-form"' not in html and "stale draft" not in html
    assert '<th scope="row">Approve the transfer?</th><td>Yes</td>' in html
    assert '<th scope="row">Note</th><td>sent</td>' in html
    assert f'id="result-by">{reviewer.get_username()}</strong>' in html
    assert 'data-notice="answered"' in html and "alert-error" not in html
    assert 'id="trail"' in html and "Answered: accept" in html and "Created by the agent" in html


def test_leaving_releases_an_untouched_claim_and_keeps_one_with_typed_drafts(
    login, reviewer, make_request
) -> None:
    client = login(reviewer)
    looked = make_request()
    transitions.claim_request(looked.pk, user=reviewer)
    response = client.post(f"/requests/{looked.pk}/leave")
    assert response.status_code == 200 and response.json()["released"] is True
    assert ElicitationRequest.objects.get(pk=looked.pk).status == Status.PENDING

    typed = make_request()
    transitions.claim_request(typed.pk, user=reviewer)
    transitions.save_draft(typed.pk, user=reviewer, question_id="note", value="half", state="draft")
    response = client.post(f"/requests/{typed.pk}/leave")
    assert response.status_code == 409 and response.json()["reason"] == "drafts"
    assert ElicitationRequest.objects.get(pk=typed.pk).claimed_by == reviewer


def test_leaving_someone_elses_claim_changes_nothing_and_get_is_refused(
    login, make_reviewer, make_request, queue
) -> None:
    alice, bob = make_reviewer("alice", queue), make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)
    assert login(bob).post(f"/requests/{request.pk}/leave").status_code == 409
    assert login(bob).get(f"/requests/{request.pk}/leave").status_code == 405
    assert ElicitationRequest.objects.get(pk=request.pk).claimed_by == alice


def test_the_queue_row_partial_is_the_pages_row_and_204_once_closed(
    login, reviewer, make_request, queue
) -> None:
    request = make_request(message="Refund <b>42</b>")
    client = login(reviewer)
    row = client.get(f"/queues/{queue.slug}/rows/{request.pk}").content.decode()
    assert row.strip().startswith("{#") is False and f'data-id="{request.pk}"' in row
    assert "Refund &lt;b&gt;42&lt;/b&gt;" in row
    assert row.strip() in client.get(f"/queues/{queue.slug}/").content.decode()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.respond(request.pk, user=reviewer, action="decline")
    assert client.get(f"/queues/{queue.slug}/rows/{request.pk}").status_code == 204


def test_history_finds_an_answered_request_by_a_word_and_filters_by_status_tool_and_me(
    login, make_reviewer, make_request, queue, other_queue
) -> None:
    alice, bob = make_reviewer("alice", queue), make_reviewer("bob", queue)
    invoice = make_request(message="Pay invoice 2024-117 to ACME?", context={"tool": "bank_transfer"})
    make_request(message="Rotate the staging key?", context={"tool": "rotate_key"})
    transitions.claim_request(invoice.pk, user=alice)
    transitions.respond(invoice.pk, user=alice, action="accept", content={"approve": True})
    client = login(alice)

    def ids(query: str) -> list[str]:
        html = client.get(f"/history/?{query}").content.decode()
        return [part.split('"')[0] for part in html.split('class="request-row" data-id="')[1:]]

    assert ids("q=invoice") == [str(invoice.pk)]
    assert ids("q=ACME+invoice") == [str(invoice.pk)]
    assert ids("q=transfer") == [str(invoice.pk)]  # found in the context as well
    assert ids("q=nothing-like-it") == []
    assert ids("status=completed") == [str(invoice.pk)]
    assert len(ids("status=pending")) == 1
    assert ids("tool=bank_transfer") == [str(invoice.pk)]
    assert ids("mine=1") == [str(invoice.pk)]
    assert login(bob).get("/history/?mine=1").content.decode().count('class="request-row"') == 0
    assert len(ids("")) == 2
    assert ids("since=2000-01-01&until=2000-01-02") == []
    assert ids("since=not-a-date&status=bogus&agent=x") != []  # bad filters are ignored, never a 500


def test_history_never_shows_another_teams_requests(login, make_reviewer, make_request, other_queue) -> None:
    outsider = make_reviewer("olaf", other_queue)
    make_request(message="Payments only")
    html = login(outsider).get("/history/?q=payments").content.decode()
    assert "Payments only" not in html


def test_answering_opens_the_next_request_claimed_when_asked_and_says_so_when_none_is_left(
    login, reviewer, make_request
) -> None:
    first, second = make_request(), make_request()
    client = login(reviewer)
    client.post(page(first), {"action": "claim"})
    response = client.post(page(first), {"action": "decline", "then": "next"})
    assert response.status_code == 302 and response["Location"] == page(second)
    assert ElicitationRequest.objects.get(pk=second.pk).claimed_by == reviewer
    response = client.post(page(second), {"action": "accept", "answer-approve": "true", "then": "next"})
    assert response["Location"].startswith("/queues/")
    assert "Nothing else is waiting" in client.get(response["Location"]).content.decode()


def test_answering_from_a_preview_claims_first(login, reviewer, make_request) -> None:
    request = make_request()
    response = login(reviewer).post(page(request), {"action": "accept", "answer-approve": "false"})
    assert response.status_code == 302
    done: Any = ElicitationRequest.objects.get(pk=request.pk)
    assert answer_of(done.result()) == {"action": "accept", "content": {"approve": False}}
    assert list(done.events.values_list("kind", flat=True)) == ["created", "claimed", "completed"]
