"""Passkey step-up: a rule's `step_up: passkey` makes every accept of a matched request carry a WebAuthn assertion
over a one-time challenge that binds the request and its digest. Verified with py_webauthn before anything is
recorded; forged, replayed or misbound assertions are refused (403, nothing stored); doors without a browser refuse
an accept with a pointer to the page; the receipt carries each approver's assertion and verifies offline."""

import json
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from elicitation.delivery import push_actions, slack_interactions
from elicitation.models import (
    ElicitationRequest,
    Passkey,
    PushAction,
    Queue,
    RequestEvent,
    Status,
    StepUpChallenge,
)
from elicitation.queue import receipts, rules, step_up, transitions
from elicitation.queue.errors import InvalidInput, StepUpRequired
from reviewhub_client.receipts import ReceiptInvalid, verify_receipt, verify_step_up
from tests.security.passkey_authenticator import SoftAuthenticator, b64url, unb64url

pytestmark = pytest.mark.django_db

PUBLIC_URL = "https://reviewhub.example"
RP_ID = "reviewhub.example"
PAY = {"mcp": {"server": "bank", "tool": "pay", "arguments": {"amount": 5000, "to": "Zoë"}}}
STEP_UP_RULE = {
    "name": "payments need a passkey",
    "match": {"tool": "pay"},
    "action": "set",
    "step_up": "passkey",
}


@pytest.fixture(autouse=True)
def public_url(settings: Any) -> None:
    settings.PUBLIC_URL = PUBLIC_URL


def registered(user: User) -> SoftAuthenticator:
    """A passkey registered for `user` through the Preferences page's endpoints."""
    authenticator = SoftAuthenticator(rp_id=RP_ID, origin=PUBLIC_URL)
    client = Client()
    client.force_login(user)
    options = client.post("/passkeys/options", content_type="application/json")
    assert options.status_code == 200, options.content
    answer = authenticator.register(options.json()["publicKey"])
    saved = client.post(
        "/passkeys/register", {"name": "laptop", "credential": answer}, content_type="application/json"
    )
    assert saved.status_code == 201, saved.content
    return authenticator


def signed(
    request: ElicitationRequest, user: User, authenticator: SoftAuthenticator, **kw: Any
) -> dict[str, Any]:
    return authenticator.sign(step_up.authentication_options(request, user), **kw)


def step_up_request(queue: Queue, make_request: Callable[..., ElicitationRequest]) -> ElicitationRequest:
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    request = make_request(context=PAY)
    assert (request.policy or {})["step_up"] == "passkey"
    return request


def events(request: ElicitationRequest) -> list[str]:
    return list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True))


# --- the rule file -----------------------------------------------------------------------------------------------


def test_a_rule_file_may_require_step_up_and_reads_it_back(queue: Queue) -> None:
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    assert rules.policy_data(queue)["rules"][0]["step_up"] == "passkey"


@pytest.mark.parametrize(
    ("rule", "field", "reason"),
    [
        ({**STEP_UP_RULE, "step_up": "sms"}, "rules[0].step_up", "must be passkey"),
        (
            {"name": "n", "action": "decline", "step_up": "passkey"},
            "rules[0].step_up",
            "only allowed with set, route or require_quorum",
        ),
    ],
)
def test_a_rule_file_refuses_a_wrong_step_up(
    queue: Queue, rule: dict[str, Any], field: str, reason: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        rules.replace_policy(queue, {"rules": [rule]})
    assert reason in refused.value.fields[field]


# --- registration ------------------------------------------------------------------------------------------------


def test_registration_verifies_and_keeps_the_passkey(reviewer: User) -> None:
    authenticator = registered(reviewer)
    passkey = Passkey.objects.get(user=reviewer)
    assert bytes(passkey.credential_id) == authenticator.credential_id
    assert passkey.name == "laptop"
    assert not StepUpChallenge.objects.exists()  # the challenge was used up


def test_registration_with_another_challenge_is_refused(reviewer: User) -> None:
    client = Client()
    client.force_login(reviewer)
    client.post("/passkeys/options", content_type="application/json")
    forged = SoftAuthenticator(rp_id=RP_ID, origin=PUBLIC_URL).register({"challenge": b64url(b"made up")})
    response = client.post("/passkeys/register", {"credential": forged}, content_type="application/json")
    assert response.status_code == 400
    assert "credential" in response.json()["fields"]
    assert not Passkey.objects.exists()


def test_a_reviewer_removes_only_their_own_passkey(
    reviewer: User, make_reviewer: Callable[..., User], queue: Queue
) -> None:
    registered(reviewer)
    other = Client()
    other.force_login(make_reviewer("mallory", queue))
    passkey = Passkey.objects.get(user=reviewer)
    other.post(f"/passkeys/{passkey.pk}/remove")
    assert Passkey.objects.filter(pk=passkey.pk).exists()
    own = Client()
    own.force_login(reviewer)
    assert own.post(f"/passkeys/{passkey.pk}/remove").status_code == 302
    assert not Passkey.objects.filter(pk=passkey.pk).exists()


# --- approving ---------------------------------------------------------------------------------------------------


def test_a_signed_accept_completes_and_the_receipt_verifies_offline(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client
) -> None:
    authenticator = registered(reviewer)
    request = step_up_request(queue, make_request)
    transitions.claim_request(request.pk, user=reviewer)
    done = transitions.respond(
        request.pk,
        user=reviewer,
        action="accept",
        content={"approve": True},
        assertion=signed(request, reviewer, authenticator),
    )
    assert done.status == Status.COMPLETED and done.action == "accept"
    jwks = client.get("/.well-known/reviewhub-receipts.json").json()
    receipt = verify_receipt(
        (done.result_meta or {})[receipts.RECEIPT_META],
        jwks,
        expected_digest=(request.policy or {})["digest"],
    )
    [approval] = verify_step_up(receipt, rp_id=RP_ID, origin=PUBLIC_URL)
    assert approval.by == "alice"
    assert approval.credential_id == b64url(authenticator.credential_id)
    assert Passkey.objects.get(user=reviewer).last_used_at is not None


def test_an_accept_without_an_assertion_is_refused_and_nothing_is_recorded(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    registered(reviewer)
    request = step_up_request(queue, make_request)
    transitions.claim_request(request.pk, user=reviewer)
    with pytest.raises(StepUpRequired) as refused:
        transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    assert f"{PUBLIC_URL}/requests/{request.pk}/" in refused.value.detail
    request.refresh_from_db()
    assert request.status == Status.CLAIMED and "completed" not in events(request)


def test_a_forged_signature_is_refused_on_the_page_with_the_form_kept(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    authenticator = registered(reviewer)
    request = step_up_request(queue, make_request)
    transitions.claim_request(request.pk, user=reviewer)
    assertion = signed(request, reviewer, authenticator)
    signature = bytearray(unb64url(assertion["response"]["signature"]))
    signature[-1] ^= 0x01
    assertion["response"]["signature"] = b64url(bytes(signature))
    page = Client()
    page.force_login(reviewer)
    response = page.post(
        f"/requests/{request.pk}/",
        {"decide": "approve", "answer-note": "typed by hand", "step_up_assertion": json.dumps(assertion)},
    )
    assert response.status_code == 403
    assert b"did not verify" in response.content and b"typed by hand" in response.content
    request.refresh_from_db()
    assert request.status == Status.CLAIMED and "completed" not in events(request)


def test_a_replayed_assertion_is_refused(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    authenticator = registered(reviewer)
    request = step_up_request(queue, make_request)
    assertion = signed(request, reviewer, authenticator)
    assert step_up.verified_approval(request, reviewer, "accept", assertion) is not None
    with pytest.raises(StepUpRequired, match="already used or never issued"):
        step_up.verified_approval(request, reviewer, "accept", assertion)


def test_an_assertion_for_another_request_is_refused(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    authenticator = registered(reviewer)
    first = step_up_request(queue, make_request)
    second = make_request(context={"mcp": {"server": "bank", "tool": "pay", "arguments": {"amount": 1}}})
    assertion = signed(first, reviewer, authenticator)
    with pytest.raises(StepUpRequired, match="another request"):
        step_up.verified_approval(second, reviewer, "accept", assertion)


def test_an_assertion_without_user_verification_or_from_another_origin_is_refused(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    authenticator = registered(reviewer)
    request = step_up_request(queue, make_request)
    with pytest.raises(StepUpRequired, match="did not verify"):
        step_up.verified_approval(
            request, reviewer, "accept", signed(request, reviewer, authenticator, flags=0x01)
        )
    with pytest.raises(StepUpRequired, match="did not verify"):
        step_up.verified_approval(
            request,
            reviewer,
            "accept",
            signed(request, reviewer, authenticator, origin="https://evil.example"),
        )


def test_another_reviewers_passkey_does_not_count(
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
    reviewer: User,
    make_reviewer: Callable[..., User],
) -> None:
    bob = make_reviewer("bob", queue)
    registered(reviewer)
    bobs = registered(bob)
    request = step_up_request(queue, make_request)
    options = step_up.authentication_options(request, reviewer)  # alice's challenge, bob's key
    with pytest.raises(StepUpRequired, match="not registered to you"):
        step_up.verified_approval(request, reviewer, "accept", bobs.sign(options))


def test_a_decline_needs_no_step_up(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    request = step_up_request(queue, make_request)
    transitions.claim_request(request.pk, user=reviewer)
    done = transitions.respond(request.pk, user=reviewer, action="decline")
    assert done.status == Status.COMPLETED and done.action == "decline"


def test_a_step_up_accept_is_not_held_for_undo(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    request = step_up_request(queue, make_request)
    transitions.claim_request(request.pk, user=reviewer)
    assert (
        transitions.hold_answer(request.pk, user=reviewer, action="accept", content={"approve": True}) is None
    )


def test_a_reviewer_without_a_passkey_is_told_to_register_one(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    request = step_up_request(queue, make_request)
    page = Client()
    page.force_login(reviewer)
    response = page.post(f"/requests/{request.pk}/step-up")
    assert response.status_code == 403
    assert "Preferences" in response.json()["detail"]


def test_a_passkey_approval_is_not_remembered(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    authenticator = registered(reviewer)
    request = step_up_request(queue, make_request)
    transitions.claim_request(request.pk, user=reviewer)
    done = transitions.respond(
        request.pk,
        user=reviewer,
        action="accept",
        content={"approve": True},
        assertion=signed(request, reviewer, authenticator),
    )
    with pytest.raises(InvalidInput, match="not remembered"):
        rules.remember_decision(done, {"name": "again", "expires_at": "2099-01-01T00:00:00Z"}, user=reviewer)


# --- other doors ---------------------------------------------------------------------------------------------------


def test_the_reviewer_api_refuses_an_accept_and_points_to_the_page(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    request = step_up_request(queue, make_request)
    api = APIClient()
    api.force_authenticate(user=reviewer)
    api.post(f"/api/v1/review/requests/{request.pk}/claim")
    response = api.post(
        f"/api/v1/review/requests/{request.pk}/respond",
        {"action": "accept", "content": {"approve": True}},
        format="json",
    )
    assert response.status_code == 403
    assert f"/requests/{request.pk}/" in response.json()["detail"]
    assert "step_up" in response.json()["fields"]
    request.refresh_from_db()
    assert request.status == Status.CLAIMED


def test_slack_refuses_an_accept_and_leaves_no_claim(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    request = step_up_request(queue, make_request)
    with pytest.raises(StepUpRequired, match="needs a passkey"):
        slack_interactions.answer(request, reviewer, "accept", {"approve": True})
    request.refresh_from_db()
    assert request.status == Status.PENDING  # the claim went back with the refused answer


def test_a_push_notifications_approve_is_refused_and_its_token_stays_unused(
    queue: Queue, make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    rules.replace_policy(queue, {"rules": [STEP_UP_RULE]})
    yes_no = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    request = make_request(context=PAY, requested_schema=yes_no)
    assert "approve" not in push_actions.issue(request, reviewer)  # not offered; one made all the same:
    forged = push_actions.action_token(PushAction.objects.get(request=request), "approve")
    with pytest.raises(StepUpRequired, match="needs a passkey"):
        push_actions.redeem(push_actions.verify(forged, request.pk))
    request.refresh_from_db()
    assert request.status == Status.PENDING
    assert (
        PushAction.objects.get(request=request).used_at is None
    )  # refused whole: nothing used, nothing recorded


# --- a quorum: a bundle of assertions ------------------------------------------------------------------------------


def test_a_quorum_receipt_is_a_bundle_every_signature_of_which_verifies(
    queue: Queue,
    make_request: Callable[..., ElicitationRequest],
    make_reviewer: Callable[..., User],
    client: Client,
) -> None:
    alice, bob = make_reviewer("alice", queue), make_reviewer("bob", queue)
    keys = {alice.pk: registered(alice), bob.pk: registered(bob)}
    rules.replace_policy(
        queue, {"rules": [{**STEP_UP_RULE, "action": "require_quorum", "quorum": {"approvals": 2}}]}
    )
    request = make_request(context=PAY)
    transitions.claim_request(request.pk, user=alice)
    with pytest.raises(StepUpRequired):
        transitions.respond(request.pk, user=alice, action="accept", content={"approve": True})
    first = transitions.respond(
        request.pk,
        user=alice,
        action="accept",
        content={"approve": True},
        assertion=signed(request, alice, keys[alice.pk]),
    )
    assert first.status == Status.PENDING
    done = transitions.respond(
        request.pk, user=bob, action="accept", assertion=signed(first, bob, keys[bob.pk])
    )
    assert done.status == Status.COMPLETED
    jwks = client.get("/.well-known/reviewhub-receipts.json").json()
    receipt = verify_receipt(
        (done.result_meta or {})[receipts.RECEIPT_META],
        jwks,
        expected_digest=(request.policy or {})["digest"],
    )
    assert [a.by for a in verify_step_up(receipt, rp_id=RP_ID, origin=PUBLIC_URL)] == ["alice", "bob"]

    # A bundle whose signatures were swapped, or that lost one approver's assertion, is refused.
    swapped = [dict(entry) for entry in receipt.step_up]
    swapped[0]["signature"], swapped[1]["signature"] = swapped[1]["signature"], swapped[0]["signature"]
    with pytest.raises(ReceiptInvalid, match="does not verify"):
        verify_step_up(type(receipt)(**{**receipt.__dict__, "step_up": tuple(swapped)}))
    with pytest.raises(ReceiptInvalid, match="unsigned: bob"):
        verify_step_up(type(receipt)(**{**receipt.__dict__, "step_up": receipt.step_up[:1]}))
    with pytest.raises(ReceiptInvalid, match="another relying party"):
        verify_step_up(receipt, rp_id="elsewhere.example")
    with pytest.raises(ReceiptInvalid, match="other arguments"):
        verify_step_up(type(receipt)(**{**receipt.__dict__, "digest": "sha256:" + "0" * 64}))
