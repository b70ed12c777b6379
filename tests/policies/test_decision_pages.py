"""The decision panel and remembered-decision pages without a browser: who sees and may do what, GET never
writes, the page's approve and veto go through the quorum."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from elicitation.models import AnswerRule, ElicitationRequest, Queue, RequestEvent
from elicitation.queue import rules, transitions

pytestmark = pytest.mark.django_db


@pytest.fixture
def login() -> Callable[[User], Client]:
    def make(user: User) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return make


def answered(make_request: Callable[..., ElicitationRequest], user: User) -> ElicitationRequest:
    request = make_request(context={"mcp": {"tool": "pay", "arguments": {"amount": 80}}})
    transitions.claim_request(request.pk, user=user)
    return transitions.respond(request.pk, user=user, action="accept", content={"approve": True})


def test_the_page_approves_the_proposal_and_a_veto_needs_no_claim(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    queue: Queue,
    login: Callable[[User], Client],
) -> None:
    rules.replace_policy(queue, {"quorum": {"approvals": 3}})
    alice, bob, carol = (make_reviewer(name, queue) for name in ("alice", "bob", "carol"))
    request = make_request()
    transitions.respond(request.pk, user=alice, action="accept", content={"approve": True})

    page = login(bob).get(f"/requests/{request.pk}/")
    assert b"1 of 3: alice" in page.content
    assert b'value="approve"' in page.content
    approved = login(bob).post(f"/requests/{request.pk}/", {"action": "approve"}, follow=True)
    assert b"Approved: 2 of 3: alice, bob" in approved.content
    assert login(bob).get(f"/requests/{request.pk}/decision").json()["progress"]["approvals"] == 2
    login(carol).post(f"/requests/{request.pk}/", {"action": "decline"})
    vetoed = ElicitationRequest.objects.get(pk=request.pk)
    assert (vetoed.status, vetoed.action) == ("completed", "decline")


def test_remembering_needs_the_permission_or_a_supervisor(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    queue: Queue,
    login: Callable[[User], Client],
) -> None:
    alice = make_reviewer("alice", queue)
    request = answered(make_request, alice)
    assert login(alice).get(f"/requests/{request.pk}/remember").status_code == 403
    assert b"remember-link" not in login(alice).get(f"/requests/{request.pk}/").content
    alice.user_permissions.add(Permission.objects.get(codename="remember_decision"))
    alice = User.objects.get(pk=alice.pk)
    assert login(alice).get(f"/requests/{request.pk}/remember").status_code == 200
    assert b"remember-link" in login(alice).get(f"/requests/{request.pk}/").content
    assert login(alice).get(f"/queues/{queue.slug}/remembered").status_code == 403  # listing: supervisors


def test_the_preview_writes_nothing_and_the_confirmation_saves_one_rule(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    queue: Queue,
    login: Callable[[User], Client],
) -> None:
    sue = make_reviewer("sue", queue, supervisor=True)
    request = answered(make_request, sue)
    client = login(sue)
    preview = client.get(
        f"/requests/{request.pk}/remember", {"op-amount": "lte", "value-amount": "100", "days": "7"}
    )
    assert preview.status_code == 200
    assert b"Matches <strong>1</strong>" in preview.content
    assert not AnswerRule.objects.exists()
    bad = client.get(
        f"/requests/{request.pk}/remember", {"op-amount": "lte", "value-amount": "lots", "days": "7"}
    )
    assert bad.status_code == 400
    saved = client.post(
        f"/requests/{request.pk}/remember",
        {"op-amount": "lte", "value-amount": "100", "days": "7", "confirm": "yes"},
    )
    assert saved.status_code == 302
    rule = AnswerRule.objects.get()
    assert rule.match["arguments"] == {"amount": {"lte": 100}}
    assert rule.remembered_from_id == request.pk
    assert rule.created_by == sue
    assert make_request(context={"mcp": {"tool": "pay", "arguments": {"amount": 99}}}).status == "completed"


def test_an_open_or_expired_request_cannot_be_remembered(
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    queue: Queue,
    login: Callable[[User], Client],
) -> None:
    sue = make_reviewer("sue", queue, supervisor=True)
    assert login(sue).get(f"/requests/{make_request().pk}/remember").status_code == 404


def test_the_panel_names_the_rule_that_decided(
    make_request: Callable[..., ElicitationRequest],
    reviewer: User,
    queue: Queue,
    login: Callable[[User], Client],
) -> None:
    rules.replace_policy(
        queue, {"rules": [{"name": "no refunds", "match": {"tool": "refund"}, "action": "decline"}]}
    )
    request = make_request(context={"tool": "refund"})
    page = login(reviewer).get(f"/requests/{request.pk}/")
    assert b"Decided by rule <strong>no refunds</strong>" in page.content
    assert RequestEvent.objects.filter(request=request, kind="viewed").count() == 1  # the usual audit only
    untouched: Any = make_request()
    assert b'id="decision-panel"' not in login(reviewer).get(f"/requests/{untouched.pk}/").content
