"""Every transition, each illegal source state, and the audit and outbox rows each one writes."""

from typing import Any

import pytest

from elicitation.models import AgentEvent, Draft, ElicitationRequest, Queue, RequestEvent, Status
from elicitation.queue import audit, transitions
from elicitation.queue.errors import IdempotencyConflict, InvalidInput, InvalidTransition
from tests.answers import answer_of

pytestmark = pytest.mark.django_db


def statuses(request: ElicitationRequest) -> list[tuple[str, str, str]]:
    return list(RequestEvent.objects.filter(request=request).values_list("kind", "from_status", "to_status"))


def test_create_queues_a_pending_request_with_questions_and_audit(make_request, clock) -> None:
    request = make_request()
    assert request.status == Status.PENDING
    assert [q["id"] for q in request.questions] == ["approve", "note"]
    assert request.deadline == clock.current + __import__("datetime").timedelta(seconds=600)
    assert statuses(request) == [("created", "", "pending")]


def test_create_with_same_idempotency_key_returns_the_first_request(make_request) -> None:
    first = make_request(idempotency_key="k1", fingerprint="f")
    again = make_request(idempotency_key="k1", fingerprint="f")
    assert again.pk == first.pk
    assert ElicitationRequest.objects.count() == 1


def test_create_with_reused_key_and_other_body_conflicts(make_request) -> None:
    make_request(idempotency_key="k1", fingerprint="f")
    with pytest.raises(IdempotencyConflict):
        make_request(idempotency_key="k1", fingerprint="g")
    assert ElicitationRequest.objects.count() == 1


def test_create_rejects_a_queue_the_agent_is_not_scoped_to(make_request, other_queue: Queue) -> None:
    with pytest.raises(InvalidInput) as error:
        make_request(queue_slug=other_queue.slug)
    assert "queue" in error.value.fields


def test_create_rejects_a_schema_outside_the_mcp_subset_with_its_path(make_request) -> None:
    schema = {"type": "object", "properties": {"address": {"type": "object", "properties": {}}}}
    with pytest.raises(InvalidInput) as error:
        make_request(requested_schema=schema)
    assert any(path.startswith("requestedSchema.properties.address") for path in error.value.fields)
    assert ElicitationRequest.objects.count() == 0


def test_claim_then_respond_accept_completes_with_content_and_tells_the_agent(make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    done = transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    assert done.status == Status.COMPLETED
    assert answer_of(done.result()) == {"action": "accept", "content": {"approve": True}}
    assert [k for k, *_ in statuses(request)] == ["created", "claimed", "completed"]
    event = AgentEvent.objects.get(request=request)
    assert (event.seq, event.kind, answer_of(event.payload["result"])) == (
        1,
        "completed",
        {"action": "accept", "content": {"approve": True}},
    )


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_carry_no_content_and_skip_validation(make_request, reviewer, action: str) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    done = transitions.respond(request.pk, user=reviewer, action=action)
    assert answer_of(done.result()) == {"action": action}
    assert done.content is None


def test_decline_with_content_is_rejected(make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    with pytest.raises(InvalidInput):
        transitions.respond(request.pk, user=reviewer, action="decline", content={"approve": True})
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.CLAIMED


def test_accept_with_invalid_content_names_each_field_and_keeps_the_claim(make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    with pytest.raises(InvalidInput) as error:
        transitions.respond(
            request.pk, user=reviewer, action="accept", content={"approve": "yes", "bogus": 1}
        )
    assert set(error.value.fields) == {"content.approve", "content.bogus"}
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.CLAIMED


def test_accept_without_content_uses_submitted_drafts_and_requires_required_ones(
    make_request, reviewer
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.save_draft(
        request.pk, user=reviewer, question_id="note", value="looks fine", state="submitted"
    )
    with pytest.raises(InvalidInput) as error:
        transitions.respond(request.pk, user=reviewer, action="accept")
    assert error.value.fields == {"content.approve": "is required"}
    transitions.save_draft(request.pk, user=reviewer, question_id="approve", value=True, state="submitted")
    done = transitions.respond(request.pk, user=reviewer, action="accept")
    assert done.content == {"approve": True, "note": "looks fine"}


def test_a_skipped_draft_holds_no_value(make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.save_draft(request.pk, user=reviewer, question_id="note", value="x", state="skipped")
    draft = Draft.objects.get(request=request, question_id="note")
    assert (draft.state, draft.value) == ("skipped", None)


def test_only_the_claim_holder_can_save_drafts(make_request, reviewer, make_reviewer, queue) -> None:
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    with pytest.raises(InvalidTransition):
        transitions.save_draft(request.pk, user=bob, question_id="note", value="sneaky")
    assert not Draft.objects.exists()


def test_release_returns_the_request_to_pending(make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    released = transitions.release_claim(request.pk, user=reviewer)
    assert (released.status, released.claimed_by) == (Status.PENDING, None)


def test_claim_next_takes_highest_priority_then_oldest(make_request, reviewer, queue, clock) -> None:
    low = make_request(priority=1)
    clock.advance(seconds=1)
    high_old = make_request(priority=5)
    clock.advance(seconds=1)
    high_new = make_request(priority=5)
    order = [transitions.claim_next(queue, user=reviewer).pk for _ in range(3)]
    assert order == [high_old.pk, high_new.pk, low.pk]
    assert transitions.claim_next(queue, user=reviewer) is None


def test_claim_next_skips_overdue_requests(make_request, reviewer, queue, clock) -> None:
    make_request(expires_in=5)
    clock.advance(seconds=10)
    assert transitions.claim_next(queue, user=reviewer) is None


def test_withdraw_abandons_an_open_request_and_tells_the_agent(make_request, agent, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    withdrawn = transitions.withdraw_request(request.pk, agent=agent)
    assert (withdrawn.status, withdrawn.claimed_by) == (Status.WITHDRAWN, None)
    assert AgentEvent.objects.get(request=request).kind == "withdrawn"


@pytest.mark.parametrize("closing", ["respond", "withdraw", "expire"])
@pytest.mark.parametrize("attempt", ["claim", "release", "heartbeat", "respond", "withdraw", "draft"])
def test_no_transition_leaves_a_closed_request(
    make_request, agent, reviewer, clock, closing: str, attempt: str
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    if closing == "respond":
        transitions.respond(request.pk, user=reviewer, action="cancel")
    elif closing == "withdraw":
        transitions.withdraw_request(request.pk, agent=agent)
    else:
        clock.advance(seconds=601)
        transitions.expire_request(request.pk)
    closed = ElicitationRequest.objects.get(pk=request.pk)
    calls: dict[str, Any] = {
        "claim": lambda: transitions.claim_request(request.pk, user=reviewer),
        "release": lambda: transitions.release_claim(request.pk, user=reviewer),
        "heartbeat": lambda: transitions.renew_claim(request.pk, user=reviewer),
        "respond": lambda: transitions.respond(request.pk, user=reviewer, action="decline"),
        "withdraw": lambda: transitions.withdraw_request(request.pk, agent=agent),
        "draft": lambda: transitions.save_draft(request.pk, user=reviewer, question_id="note", value="x"),
    }
    events_before = RequestEvent.objects.count()
    with pytest.raises(InvalidTransition):
        calls[attempt]()
    after = ElicitationRequest.objects.get(pk=request.pk)
    assert (after.status, after.action, after.content) == (closed.status, closed.action, closed.content)
    assert RequestEvent.objects.count() == events_before


@pytest.mark.parametrize("attempt", ["release", "heartbeat", "respond"])
def test_pending_request_cannot_be_released_renewed_or_answered(make_request, reviewer, attempt: str) -> None:
    request = make_request()
    call = {
        "release": lambda: transitions.release_claim(request.pk, user=reviewer),
        "heartbeat": lambda: transitions.renew_claim(request.pk, user=reviewer),
        "respond": lambda: transitions.respond(request.pk, user=reviewer, action="cancel"),
    }[attempt]
    with pytest.raises(InvalidTransition):
        call()
    assert ElicitationRequest.objects.get(pk=request.pk).status == Status.PENDING


def test_second_reviewer_loses_the_claim_race(make_request, reviewer, make_reviewer, queue) -> None:
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    with pytest.raises(InvalidTransition) as error:
        transitions.claim_request(request.pk, user=bob)
    assert error.value.current_status == Status.CLAIMED
    assert ElicitationRequest.objects.get(pk=request.pk).claimed_by == reviewer


def test_another_reviewer_cannot_answer_or_release_a_claim(
    make_request, reviewer, make_reviewer, queue
) -> None:
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    with pytest.raises(InvalidTransition):
        transitions.respond(request.pk, user=bob, action="decline")
    with pytest.raises(InvalidTransition):
        transitions.release_claim(request.pk, user=bob)
    assert ElicitationRequest.objects.get(pk=request.pk).claimed_by == reviewer


def test_an_expired_lease_can_be_claimed_by_someone_else(
    make_request, reviewer, make_reviewer, queue, clock
) -> None:
    bob = make_reviewer("bob", queue)
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=61)
    transitions.claim_request(request.pk, user=bob)
    with pytest.raises(InvalidTransition):
        transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})


def test_lease_sweep_releases_only_expired_claims_and_is_idempotent(make_request, reviewer, clock) -> None:
    stale = make_request()
    transitions.claim_request(stale.pk, user=reviewer)
    clock.advance(seconds=30)
    fresh = make_request()
    transitions.claim_request(fresh.pk, user=reviewer)
    clock.advance(seconds=31)
    assert transitions.release_expired_claims() == 1
    assert transitions.release_expired_claims() == 0
    assert ElicitationRequest.objects.get(pk=stale.pk).status == Status.PENDING
    assert ElicitationRequest.objects.get(pk=fresh.pk).status == Status.CLAIMED


def test_heartbeat_extends_the_lease(make_request, reviewer, clock) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    clock.advance(seconds=50)
    renewed = transitions.renew_claim(request.pk, user=reviewer)
    assert renewed.lease_expires_at == clock.current + __import__("datetime").timedelta(seconds=60)
    clock.advance(seconds=30)
    assert transitions.release_expired_claims() == 0


def test_supervisor_takes_over_a_claim_and_it_is_audited(
    make_request, reviewer, make_reviewer, queue
) -> None:
    boss = make_reviewer("boss", queue, supervisor=True)
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    taken = transitions.take_over_claim(request.pk, supervisor=boss)
    assert taken.claimed_by == boss
    event = RequestEvent.objects.filter(request=request).last()
    assert (event.kind, event.detail) == ("taken_over", {"previous_holder": "alice"})


def test_outbox_cursor_is_per_agent_and_gap_free(make_request, make_agent, queue, reviewer) -> None:
    other_agent, _ = make_agent("agent-b", queue)
    mine = [make_request() for _ in range(3)]
    theirs = make_request(agent=other_agent)
    for request in [*mine, theirs]:
        transitions.claim_request(request.pk, user=reviewer)
        transitions.respond(request.pk, user=reviewer, action="decline")
    assert list(AgentEvent.objects.filter(agent=mine[0].agent).values_list("seq", flat=True)) == [1, 2, 3]
    assert list(AgentEvent.objects.filter(agent=other_agent).values_list("seq", flat=True)) == [1]


def test_audit_rows_are_hash_chained_per_request(make_request, reviewer) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.release_claim(request.pk, user=reviewer)
    rows = list(RequestEvent.objects.filter(request=request))
    assert rows[0].prev_hash == ""
    assert [r.prev_hash for r in rows[1:]] == [r.hash for r in rows[:-1]]
    assert all(audit.audit_row_hash(r) == r.hash for r in rows)
