"""The request page's undo window: the answer is held, the next request opens with a banner naming the request
and the answer, Undo brings the form back with nothing told to the agent; with undo off the answer goes at once."""

from typing import Any

import pytest
from django.urls import reverse

from elicitation.models import AgentEvent, ElicitationRequest, HeldAnswer, ReviewerReach, Status
from elicitation.queue import transitions


@pytest.fixture(autouse=True)
def undo_window(settings: Any) -> None:
    settings.ANSWER_UNDO_SECONDS = 5


def page_url(request: ElicitationRequest) -> str:
    return reverse("request", kwargs={"request_id": request.pk})


def approve_then_next(client: Any, request: ElicitationRequest, **extra: Any) -> Any:
    client.post(page_url(request), {"action": "claim"})
    return client.post(
        page_url(request), {"decide": "approve", "then": "next", "answer-note": "ship", **extra}
    )


def test_an_answer_is_held_and_the_next_request_names_it_with_an_undo(login, reviewer, make_request) -> None:
    first = make_request(message="Drop the <b>staging</b> table?")
    second = make_request(message="Rotate the key?")
    client = login(reviewer)
    response = approve_then_next(client, first)
    assert response.status_code == 302 and response["Location"] == page_url(second)
    assert HeldAnswer.objects.filter(pk=first.pk, user=reviewer).exists()
    fresh = ElicitationRequest.objects.get(pk=first.pk)
    assert (fresh.status, fresh.claimed_by) == (Status.CLAIMED, reviewer)
    assert not AgentEvent.objects.filter(request=first).exists()
    html = client.get(response["Location"]).content.decode()
    assert "<strong data-undo-answer>Approved</strong>: “Drop the &lt;b&gt;staging&lt;/b&gt; table?”" in html
    assert f'action="{reverse("request-undo", kwargs={"request_id": first.pk})}"' in html


def test_undo_in_the_window_brings_the_form_back_and_tells_the_agent_nothing(
    login, reviewer, make_request, clock
) -> None:
    first = make_request()
    make_request()
    client = login(reviewer)
    approve_then_next(client, first)
    clock.advance(seconds=3)
    response = client.post(reverse("request-undo", kwargs={"request_id": first.pk}))
    assert response.status_code == 302 and response["Location"] == page_url(first)
    html = client.get(page_url(first)).content.decode()
    assert "Undone: the agent was told nothing." in html
    assert 'value="ship"' in html  # the note as it was sent
    clock.advance(seconds=10)
    assert transitions.send_due_answers() == 0
    assert ElicitationRequest.objects.get(pk=first.pk).status == Status.CLAIMED
    assert not AgentEvent.objects.filter(request=first).exists()


def test_undo_after_the_answer_went_out_says_so(login, reviewer, make_request, clock) -> None:
    first = make_request()
    client = login(reviewer)
    approve_then_next(client, first)
    clock.advance(seconds=6)
    transitions.send_due_answers()
    response = client.post(reverse("request-undo", kwargs={"request_id": first.pk}), follow=True)
    assert "Too late to undo: the answer was sent." in response.content.decode()
    assert ElicitationRequest.objects.get(pk=first.pk).content == {"approve": True, "note": "ship"}


def test_with_undo_turned_off_the_answer_goes_at_once(login, reviewer, make_request) -> None:
    ReviewerReach.objects.create(user=reviewer, answer_undo=False)
    first = make_request()
    approve_then_next(login(reviewer), first)
    assert not HeldAnswer.objects.exists()
    assert ElicitationRequest.objects.get(pk=first.pk).status == Status.COMPLETED
    assert AgentEvent.objects.filter(request=first, kind="completed").count() == 1


def test_the_preferences_page_turns_undo_off(login, reviewer) -> None:
    form = {"time_zone": "UTC", "quiet_start": "", "quiet_end": "", "email_mode": "each"}
    client = login(reviewer)
    assert 'name="answer_undo"' in client.get(reverse("preferences")).content.decode()
    client.post(reverse("preferences"), {**form, "answer_undo": "on"})
    assert ReviewerReach.objects.get(user=reviewer).answer_undo is True
    client.post(reverse("preferences"), form)
    assert ReviewerReach.objects.get(user=reviewer).answer_undo is False


def test_leaving_the_page_keeps_the_claim_of_a_held_answer(login, reviewer, make_request) -> None:
    first = make_request()
    client = login(reviewer)
    client.post(page_url(first), {"action": "claim"})
    client.post(page_url(first), {"action": "decline"})
    assert HeldAnswer.objects.filter(pk=first.pk).exists()
    response = client.post(reverse("request-leave", kwargs={"request_id": first.pk}))
    assert response.status_code == 409 and response.json()["reason"] == "held"
    assert ElicitationRequest.objects.get(pk=first.pk).claimed_by == reviewer


def test_an_outsider_cannot_undo(login, reviewer, make_reviewer, other_queue, make_request) -> None:
    first = make_request()
    approve_then_next(login(reviewer), first)
    mallory = make_reviewer("mallory", other_queue)
    assert login(mallory).post(reverse("request-undo", kwargs={"request_id": first.pk})).status_code == 403
    assert HeldAnswer.objects.filter(pk=first.pk).exists()


def test_undo_is_post_only(login, reviewer, make_request) -> None:
    first = make_request()
    assert login(reviewer).get(reverse("request-undo", kwargs={"request_id": first.pk})).status_code == 405
