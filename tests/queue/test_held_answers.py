"""An answer held through its undo window: checked at once, told to the agent only when the window closes (by the
timer or the sweep), taken back before that with nothing told, and never lost or sent twice."""

import logging

import pytest

from elicitation.models import AgentEvent, Draft, ElicitationRequest, HeldAnswer, Status
from elicitation.queue import transitions
from elicitation.queue.errors import InvalidInput, InvalidTransition


def held_request(make_request, reviewer):
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    return request


def test_a_held_answer_tells_the_agent_nothing_until_its_window_closes(make_request, reviewer, clock) -> None:
    request = held_request(make_request, reviewer)
    held = transitions.hold_answer(
        request.pk, user=reviewer, action="accept", content={"approve": True, "note": "ok"}, seconds=5
    )
    assert held is not None
    assert transitions.send_due_answers() == 0  # not due yet
    fresh = ElicitationRequest.objects.get(pk=request.pk)
    assert (fresh.status, fresh.claimed_by) == (Status.CLAIMED, reviewer)
    assert not AgentEvent.objects.filter(request=request).exists()
    clock.advance(seconds=5)
    assert transitions.send_due_answers() == 1
    done = ElicitationRequest.objects.get(pk=request.pk)
    assert (done.status, done.action, done.content) == (
        Status.COMPLETED,
        "accept",
        {"approve": True, "note": "ok"},
    )
    assert AgentEvent.objects.filter(request=request, kind="completed").count() == 1
    assert not HeldAnswer.objects.exists()
    assert transitions.send_due_answers() == 0  # sent once


def test_taking_it_back_in_the_window_sends_nothing_and_restores_the_drafts(
    make_request, reviewer, clock
) -> None:
    request = held_request(make_request, reviewer)
    transitions.hold_answer(
        request.pk, user=reviewer, action="accept", content={"approve": False, "note": "not now"}, seconds=5
    )
    clock.advance(seconds=4)
    transitions.take_back(request.pk, user=reviewer)
    clock.advance(seconds=10)
    assert transitions.send_due_answers() == 0
    fresh = ElicitationRequest.objects.get(pk=request.pk)
    assert (fresh.status, fresh.claimed_by) == (Status.CLAIMED, reviewer)
    assert not AgentEvent.objects.filter(request=request).exists()
    drafts = dict(Draft.objects.filter(request=request).values_list("question_id", "value"))
    assert drafts == {"approve": False, "note": "not now"}


def test_too_late_to_take_back_once_sent(make_request, reviewer, clock) -> None:
    request = held_request(make_request, reviewer)
    transitions.hold_answer(request.pk, user=reviewer, action="decline", seconds=5)
    clock.advance(seconds=6)
    assert transitions.send_held_answer(request.pk) is not None
    with pytest.raises(InvalidTransition, match="Too late to undo"):
        transitions.take_back(request.pk, user=reviewer)
    assert ElicitationRequest.objects.get(pk=request.pk).action == "decline"


def test_another_reviewer_cannot_take_it_back(make_request, reviewer, make_reviewer, queue, clock) -> None:
    request = held_request(make_request, reviewer)
    bob = make_reviewer("bob", queue)
    transitions.hold_answer(request.pk, user=reviewer, action="cancel", seconds=5)
    with pytest.raises(InvalidTransition):
        transitions.take_back(request.pk, user=bob)
    assert HeldAnswer.objects.filter(pk=request.pk).exists()


def test_an_invalid_answer_is_refused_at_once_and_nothing_is_held(make_request, reviewer) -> None:
    request = held_request(make_request, reviewer)
    with pytest.raises(InvalidInput) as refused:
        transitions.hold_answer(
            request.pk, user=reviewer, action="accept", content={"note": "no choice"}, seconds=5
        )
    assert "approve" in str(refused.value.fields)
    assert not HeldAnswer.objects.exists()


def test_only_the_holder_may_hold_an_answer(make_request, reviewer, make_reviewer, queue) -> None:
    request = held_request(make_request, reviewer)
    bob = make_reviewer("bob", queue)
    with pytest.raises(InvalidTransition):
        transitions.hold_answer(request.pk, user=bob, action="decline", seconds=5)
    assert not HeldAnswer.objects.exists()


def test_next_does_not_resume_a_request_whose_answer_is_held(make_request, reviewer, queue) -> None:
    request = held_request(make_request, reviewer)
    waiting = make_request()
    transitions.hold_answer(request.pk, user=reviewer, action="decline", seconds=5)
    following = transitions.claim_next(queue, user=reviewer, resume_held=True)
    assert following is not None and following.pk == waiting.pk


def test_the_claim_outlasts_the_window(make_request, reviewer, queue, clock) -> None:
    request = held_request(make_request, reviewer)
    clock.advance(seconds=queue.lease_seconds - 1)
    transitions.hold_answer(request.pk, user=reviewer, action="decline", seconds=5)
    clock.advance(seconds=6)
    assert transitions.release_expired_claims() == 0
    assert transitions.send_due_answers() == 1
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.COMPLETED


def test_a_request_due_inside_the_window_is_not_held(make_request, reviewer) -> None:
    request = make_request(expires_in=6)
    transitions.claim_request(request.pk, user=reviewer)
    assert transitions.hold_answer(request.pk, user=reviewer, action="decline", seconds=5) is None
    assert not HeldAnswer.objects.exists()


def test_a_held_answer_the_holder_lost_is_dropped_and_logged(
    make_request, reviewer, make_reviewer, queue, clock, caplog
) -> None:
    request = held_request(make_request, reviewer)
    boss = make_reviewer("boss", queue, supervisor=True)
    transitions.hold_answer(request.pk, user=reviewer, action="decline", seconds=5)
    transitions.take_over_claim(request.pk, supervisor=boss)
    clock.advance(seconds=6)
    with caplog.at_level(logging.WARNING):
        assert transitions.send_due_answers() == 0
    assert "not sent" in caplog.text
    fresh = ElicitationRequest.objects.get(pk=request.pk)
    assert (fresh.status, fresh.claimed_by) == (Status.CLAIMED, boss)
    assert not HeldAnswer.objects.exists()
