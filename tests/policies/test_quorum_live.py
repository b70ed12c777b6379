"""A quorum's progress on queue pages: every approval pushes `queue.update` after commit, whose summary carries
the counts ("1 of 2") and nothing else of the decision: no approver's name, no proposed content. The queue row
shows the same counts (the browser test, tests/browser/test_quorum_live.py, watches it change live)."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.delivery import pushes
from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import rules, transitions
from elicitation.queue.errors import InvalidTransition

pytestmark = pytest.mark.django_db

PROPOSAL = {"approve": True, "note": "wire-ref-7731"}


@pytest.fixture
def quorum_of_two(queue: Queue) -> Queue:
    rules.replace_policy(queue, {"quorum": {"approvals": 2}})
    return queue


def queue_updates(callbacks: list[Any]) -> list[dict[str, Any]]:
    return [
        message
        for callback in callbacks
        if isinstance(callback, pushes.CommitBatch)
        for _, message in callback.batch
        if message["type"] == "queue.update"
    ]


def test_the_summary_counts_approvals_and_says_none_without_a_quorum(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    plain = make_request()
    assert pushes.request_summary(plain)["approvals"] is None

    rules.replace_policy(queue, {"quorum": {"approvals": 3}})
    assert pushes.request_summary(make_request())["approvals"] == {"approved": 0, "required": 3}


def test_each_approval_pushes_its_count_to_the_queue_without_names_or_content(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    quorum_of_two: Queue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice, bob = make_reviewer("alice", quorum_of_two), make_reviewer("bob", quorum_of_two)
    request = make_request()
    transitions.claim_request(request.pk, user=alice)

    with django_capture_on_commit_callbacks() as first:
        transitions.respond(request.pk, user=alice, action="accept", content=PROPOSAL)
    with django_capture_on_commit_callbacks() as second:
        transitions.respond(request.pk, user=bob, action="accept")

    [proposed] = queue_updates(first)
    assert (proposed["kind"], proposed["request"]["status"]) == ("approved", "pending")
    assert proposed["request"]["approvals"] == {"approved": 1, "required": 2}
    [final] = queue_updates(second)
    assert (final["kind"], final["request"]["status"]) == ("completed", "completed")
    assert final["request"]["approvals"] == {"approved": 2, "required": 2}
    for update in (proposed, final):
        told = json.dumps(update)
        assert "alice" not in told and "bob" not in told  # released: nobody holds it, nobody is named
        assert "wire-ref-7731" not in told


def test_a_refused_second_approval_pushes_nothing(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    quorum_of_two: Queue,
    django_capture_on_commit_callbacks: Any,
) -> None:
    alice = make_reviewer("alice", quorum_of_two)
    request = make_request()
    transitions.respond(request.pk, user=alice, action="accept", content=PROPOSAL)

    with (
        django_capture_on_commit_callbacks() as again,
        pytest.raises(InvalidTransition, match="already approved"),
    ):
        transitions.respond(request.pk, user=alice, action="accept")

    assert not queue_updates(again)
    assert pushes.request_summary(ElicitationRequest.objects.get(pk=request.pk))["approvals"]["approved"] == 1


def test_the_queue_row_shows_the_counts_and_no_names(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    quorum_of_two: Queue,
) -> None:
    alice, bob = make_reviewer("alice", quorum_of_two), make_reviewer("bob", quorum_of_two)
    request = make_request()
    client = Client()
    client.force_login(bob)

    assert "0 of 2 approvals" in client.get(f"/queues/{quorum_of_two.slug}/").content.decode()
    transitions.respond(request.pk, user=alice, action="accept", content=PROPOSAL)
    row = client.get(f"/queues/{quorum_of_two.slug}/rows/{request.pk}").content.decode()
    assert "1 of 2 approvals" in row and "alice" not in row

    rules.replace_policy(quorum_of_two, {})
    plain = client.get(f"/queues/{quorum_of_two.slug}/rows/{make_request().pk}").content.decode()
    assert 'data-id="' in plain and "approvals" not in plain
