"""Quorum with separation of duties: N approvals from distinct reviewers, groups, vetoes, owners excluded, the
deadline over the whole decision, exactly one result for the agent, bound to a digest of what was asked."""

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.db import close_old_connections, connection
from rest_framework.test import APIClient

from elicitation.models import AgentEvent, Approval, ElicitationRequest, Queue, RequestEvent
from elicitation.queue import rules, transitions
from elicitation.queue.errors import AccessDenied, InvalidInput, InvalidTransition

pytestmark = pytest.mark.django_db

ANSWER = {"approve": True, "note": "ok by me"}


def args(amount: int) -> dict[str, Any]:
    return {"mcp": {"server": "bank", "tool": "pay", "arguments": {"amount": amount}}}


@pytest.fixture
def reviewers(make_reviewer: Callable[..., User], queue: Queue) -> list[User]:
    return [make_reviewer(name, queue) for name in ("alice", "bob", "carol", "dave")]


def require(queue: Queue, **quorum: Any) -> None:
    rules.replace_policy(queue, {"quorum": quorum})


def approve(
    request: ElicitationRequest, user: User, content: dict[str, Any] | None = None
) -> ElicitationRequest:
    return transitions.respond(request.pk, user=user, action="accept", content=content)


def events(request: ElicitationRequest) -> list[str]:
    return list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True))


def test_two_of_three_the_first_proposes_the_second_approves_and_the_agent_hears_once(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=2)
    alice, bob, _, _ = reviewers
    request = make_request(context=args(5000))
    transitions.claim_request(request.pk, user=alice)

    first = approve(request, alice, ANSWER)
    assert first.status == "pending"  # back in the queue for the next approver
    assert first.policy["proposal"] == {"content": ANSWER, "by": "alice"}
    assert not AgentEvent.objects.filter(request=request).exists()

    done = approve(request, bob)  # approves the proposal as it stands, without claiming
    assert done.status == "completed"
    assert done.answered_by == bob
    result = done.result()
    assert result is not None
    assert result["content"] == ANSWER
    decision = result["_meta"]["reviewhub/decision"]
    assert [a["by"] for a in decision["approvals"]] == ["alice", "bob"]
    assert decision["digest"] == rules.request_digest(request.message, request.requested_schema, args(5000))
    assert AgentEvent.objects.filter(request=request).count() == 1
    assert events(request) == ["created", "claimed", "approved", "approved"]
    assert Approval.objects.filter(request=request).count() == 2


def test_the_same_reviewer_approving_twice_is_refused_and_audited(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=2)
    alice = reviewers[0]
    request = make_request()
    approve(request, alice, ANSWER)

    with pytest.raises(InvalidTransition, match="already approved"):
        approve(request, alice)

    fresh = ElicitationRequest.objects.get(pk=request.pk)
    assert fresh.status == "pending"
    assert Approval.objects.filter(request=request).count() == 1
    refused = RequestEvent.objects.get(request=request, kind="approval_refused")
    assert refused.actor_user == alice
    assert "already approved" in refused.detail["reason"]


def test_later_approvers_approve_the_proposal_as_it_stands(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=2)
    alice, bob, _, _ = reviewers
    request = make_request()
    approve(request, alice, ANSWER)
    with pytest.raises(InvalidInput) as refused:
        approve(request, bob, {"approve": False})
    assert "content" in refused.value.fields
    assert approve(request, bob, dict(ANSWER)).status == "completed"  # the same content is the same approval


def test_a_decline_vetoes_and_ends_the_decision_with_that_outcome(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=3)
    alice, bob, _, _ = reviewers
    request = make_request()
    approve(request, alice, ANSWER)

    vetoed = transitions.respond(request.pk, user=bob, action="decline")

    assert vetoed.status == "completed"
    assert vetoed.result()["action"] == "decline"  # type: ignore[index]
    assert "content" not in vetoed.result()  # type: ignore[operator]
    assert vetoed.result_meta["reviewhub/decision"]["vetoedBy"] == "bob"
    assert events(request)[-1] == "vetoed"
    assert AgentEvent.objects.filter(request=request).count() == 1


def test_without_veto_a_decline_is_an_objection_and_the_quorum_can_still_pass(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=2, veto="none")
    alice, bob, carol, _ = reviewers
    request = make_request()
    approve(request, alice, ANSWER)
    objected = transitions.respond(request.pk, user=bob, action="cancel")
    assert objected.status == "pending"
    assert objected.policy["objections"][0]["by"] == "bob"
    assert approve(request, carol).status == "completed"


def test_group_constraints_one_from_each_group(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=2, groups={"sre": 1, "payments-owners": 1})
    alice, bob, carol, dave = reviewers
    sre, owners = Group.objects.create(name="sre"), Group.objects.create(name="payments-owners")
    alice.groups.add(sre)
    bob.groups.add(sre)
    carol.groups.add(owners)
    request = make_request()

    with pytest.raises(InvalidTransition, match="must come from: payments-owners, sre"):
        approve(request, dave, ANSWER)  # in neither group
    approve(request, alice, ANSWER)
    with pytest.raises(InvalidTransition, match="must come from: payments-owners"):
        approve(request, bob)  # sre is full
    done = approve(request, carol)

    assert done.status == "completed"
    assert sorted(Approval.objects.filter(request=request).values_list("group", flat=True)) == [
        "payments-owners",
        "sre",
    ]
    assert RequestEvent.objects.filter(request=request, kind="approval_refused").count() == 2


def test_owners_of_the_agent_are_excluded_where_the_policy_says(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User], agent: Any
) -> None:
    require(queue, approvals=2, exclude_owner=True)
    alice, bob, carol, _ = reviewers
    agent.owners.add(alice)
    request = make_request()

    with pytest.raises(AccessDenied, match="owners of the agent"):
        approve(request, alice, ANSWER)
    with pytest.raises(AccessDenied):
        transitions.respond(request.pk, user=alice, action="decline")  # nor veto

    assert RequestEvent.objects.filter(request=request, kind="approval_excluded").count() == 2
    approve(request, bob, ANSWER)
    assert approve(request, carol).status == "completed"


def test_owners_may_approve_when_the_policy_does_not_exclude_them(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User], agent: Any
) -> None:
    require(queue, approvals=1)
    agent.owners.add(reviewers[0])
    assert approve(make_request(), reviewers[0], ANSWER).status == "completed"


def test_the_deadline_covers_the_whole_decision_expiry_mid_quorum_follows_the_queue(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User], clock: Any
) -> None:
    require(queue, approvals=2)
    queue.expiry_outcome = "decline"
    queue.save()
    alice, bob, _, _ = reviewers
    request = make_request(expires_in=60)
    approve(request, alice, ANSWER)
    clock.advance(seconds=61)

    with pytest.raises(InvalidTransition):
        approve(request, bob)

    expired = ElicitationRequest.objects.get(pk=request.pk)
    assert expired.status == "expired"
    assert expired.result() == {"action": "decline"}
    assert list(AgentEvent.objects.filter(request=request).values_list("kind", flat=True)) == ["expired"]
    assert Approval.objects.filter(request=request).count() == 1


def test_the_digest_changes_when_an_argument_changes(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=1)
    one = approve(make_request(context=args(100)), reviewers[0], ANSWER)
    same = approve(make_request(context=args(100)), reviewers[0], ANSWER)
    other = approve(make_request(context=args(101)), reviewers[0], ANSWER)

    def digest(request: ElicitationRequest) -> str:
        return request.result()["_meta"]["reviewhub/decision"]["digest"]  # type: ignore[index,no-any-return]

    assert digest(one) == digest(same)
    assert digest(one) != digest(other)


def test_the_agents_get_shows_partial_progress_as_a_status_detail(
    make_request: Callable[..., ElicitationRequest],
    queue: Queue,
    reviewers: list[User],
    agent_client: APIClient,
) -> None:
    require(queue, approvals=2)
    request = make_request()
    plain = make_request(queue_slug="payments")
    approve(request, reviewers[0], ANSWER)

    body = agent_client.get(f"/api/v1/requests/{request.pk}").json()

    assert body["status"] == "pending"
    assert body["statusDetail"]["text"] == "1 of 2: alice"
    assert body["statusDetail"]["approvers"] == ["alice"]
    assert body["result"] is None
    rules.replace_policy(queue, {})  # the queue's quorum goes; requests keep the one they were made with
    assert "statusDetail" not in agent_client.get(f"/api/v1/requests/{make_request().pk}").json()
    assert plain.policy is not None


def test_the_reviewer_api_respond_goes_through_the_quorum(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    require(queue, approvals=2)
    request = make_request()
    alice, bob = APIClient(), APIClient()
    alice.force_authenticate(reviewers[0])
    bob.force_authenticate(reviewers[1])
    alice.post(f"/api/v1/review/requests/{request.pk}/claim")
    first = alice.post(
        f"/api/v1/review/requests/{request.pk}/respond",
        {"action": "accept", "content": ANSWER},
        format="json",
    )
    assert first.status_code == 200, first.json()
    assert first.json()["statusDetail"]["text"] == "1 of 2: alice"
    again = alice.post(f"/api/v1/review/requests/{request.pk}/respond", {"action": "accept"}, format="json")
    assert again.status_code == 409
    done = bob.post(f"/api/v1/review/requests/{request.pk}/respond", {"action": "accept"}, format="json")
    assert done.status_code == 200
    assert done.json()["result"]["content"] == ANSWER


@pytest.mark.django_db(transaction=True)
def test_two_approvals_racing_for_the_last_slot_record_exactly_n_and_push_once(
    make_request: Callable[..., ElicitationRequest], queue: Queue, reviewers: list[User]
) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("row locks decide this race on PostgreSQL; SQLite serialises every writer")
    require(queue, approvals=2)
    alice, bob, carol, _ = reviewers
    request = make_request()
    approve(request, alice, ANSWER)
    barrier = threading.Barrier(2)
    results: list[Any] = [None, None]

    def race(index: int, user: User) -> None:
        try:
            barrier.wait()
            results[index] = approve(request, user).status
        except Exception as exc:  # the loser's error is part of the result
            results[index] = exc
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=race, args=(i, u)) for i, u in enumerate((bob, carol))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    losers = [r for r in results if isinstance(r, InvalidTransition)]
    assert len(losers) == 1 and "completed" in results, results
    assert Approval.objects.filter(request=request).count() == 2
    assert AgentEvent.objects.filter(request=request).count() == 1
    assert RequestEvent.objects.filter(request=request, kind="approved").count() == 2
