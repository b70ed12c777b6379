"""Signed receipts: every completed request's result carries one that verifies offline against the published JWK
Set; an altered payload, a receipt signed by another key, a digest mismatch and an unknown kid are refused; after a
rotation, receipts of the old key verify while it is still published."""

import base64
import json
from collections.abc import Callable
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import receipts, rules, transitions
from reviewhub_client.receipts import ReceiptInvalid, verify_receipt

pytestmark = pytest.mark.django_db


def private_jwk(kid: str, key: Any) -> dict[str, Any]:
    algorithm = (
        jwt.algorithms.ECAlgorithm
        if isinstance(key, ec.EllipticCurvePrivateKey)
        else jwt.algorithms.OKPAlgorithm
    )
    return {**algorithm.to_jwk(key, as_dict=True), "kid": kid}


def key_set(*jwks: dict[str, Any]) -> str:
    return json.dumps({"keys": list(jwks)})


def published(client: Client) -> dict[str, Any]:
    response = client.get("/.well-known/reviewhub-receipts.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def answered(
    make_request: Callable[..., ElicitationRequest], reviewer: User, **fields: Any
) -> ElicitationRequest:
    request = make_request(**fields)
    transitions.claim_request(request.pk, user=reviewer)
    return transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})


def receipt_of(request: ElicitationRequest) -> str:
    token: str = request.result()["_meta"][receipts.RECEIPT_META]  # type: ignore[index]
    return token


def tampered(token: str, **claims: Any) -> str:
    header, payload, signature = token.split(".")
    body = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    forged = base64.urlsafe_b64encode(json.dumps({**body, **claims}).encode()).rstrip(b"=").decode()
    return f"{header}.{forged}.{signature}"


def test_a_reviewers_answer_carries_a_receipt_that_verifies_offline(
    make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client
) -> None:
    done = answered(make_request, reviewer, context={"mcp": {"tool": "pay", "arguments": {"amount": 7}}})

    receipt = verify_receipt(receipt_of(done), published(client), rules.request_digest_of(done))
    assert receipt.request_id == str(done.pk)
    assert receipt.action == "accept"
    assert receipt.approvers == ("alice",)
    assert receipt.rule is None
    assert receipt.digest == rules.request_digest_of(done)
    assert abs((receipt.issued_at - done.closed_at).total_seconds()) < 1  # type: ignore[operator]


def test_a_rules_decision_names_the_rule_and_carries_its_digest(
    queue: Queue, make_request: Callable[..., ElicitationRequest], client: Client
) -> None:
    rules.replace_policy(queue, {"rules": [{"name": "small", "match": {"tool": "pay"}, "action": "decline"}]})
    done = make_request(context={"mcp": {"tool": "pay", "arguments": {"amount": 7}}})

    digest = done.result()["_meta"]["reviewhub/decision"]["digest"]  # type: ignore[index]
    receipt = verify_receipt(receipt_of(done), published(client), digest)
    assert (receipt.action, receipt.rule, receipt.approvers) == ("decline", "small", ())


def test_an_altered_payload_is_refused(
    make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client
) -> None:
    done = answered(make_request, reviewer)
    forged = tampered(receipt_of(done), action="accept", approvers=["mallory"])

    with pytest.raises(ReceiptInvalid, match="signature"):
        verify_receipt(forged, published(client), rules.request_digest_of(done))


def test_a_receipt_signed_by_another_key_under_a_published_kid_is_refused(
    make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client
) -> None:
    done = answered(make_request, reviewer)
    jwks = published(client)
    claims = jwt.decode(receipt_of(done), options={"verify_signature": False})
    kid = jwt.get_unverified_header(receipt_of(done))["kid"]
    forged = jwt.encode(
        claims,
        ec.generate_private_key(ec.SECP256R1()),
        algorithm="ES256",
        headers={"kid": kid, "typ": receipts.RECEIPT_TYPE},
    )

    with pytest.raises(ReceiptInvalid, match="signature"):
        verify_receipt(forged, jwks, rules.request_digest_of(done))


def test_a_receipt_for_other_arguments_is_refused(
    make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client
) -> None:
    done = answered(make_request, reviewer, context={"mcp": {"tool": "pay", "arguments": {"amount": 7}}})
    other = rules.request_digest(
        done.message, done.requested_schema, {"mcp": {"tool": "pay", "arguments": {"amount": 700}}}
    )

    with pytest.raises(ReceiptInvalid, match="digest mismatch"):
        verify_receipt(receipt_of(done), published(client), other)


def test_a_receipt_whose_kid_is_not_published_is_refused(
    make_request: Callable[..., ElicitationRequest], reviewer: User, settings: Any
) -> None:
    settings.RECEIPT_SIGNING_KEYS = key_set(private_jwk("hidden", ec.generate_private_key(ec.SECP256R1())))
    done = answered(make_request, reviewer)
    settings.RECEIPT_SIGNING_KEYS = key_set(private_jwk("other", ec.generate_private_key(ec.SECP256R1())))

    with pytest.raises(ReceiptInvalid, match="unknown key 'hidden'"):
        verify_receipt(receipt_of(done), receipts.public_jwks(), rules.request_digest_of(done))


def test_an_unsigned_receipt_is_refused(
    make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client
) -> None:
    done = answered(make_request, reviewer)
    claims = jwt.decode(receipt_of(done), options={"verify_signature": False})
    kid = jwt.get_unverified_header(receipt_of(done))["kid"]
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": kid, "typ": receipts.RECEIPT_TYPE})

    with pytest.raises(ReceiptInvalid, match="algorithm 'none'"):
        verify_receipt(unsigned, published(client), rules.request_digest_of(done))


def test_after_a_rotation_old_receipts_verify_while_the_old_key_is_published(
    make_request: Callable[..., ElicitationRequest], reviewer: User, client: Client, settings: Any
) -> None:
    old = private_jwk("2026-01", ec.generate_private_key(ec.SECP256R1()))
    new = private_jwk("2026-07", ed25519.Ed25519PrivateKey.generate())
    settings.RECEIPT_SIGNING_KEYS = key_set(old)
    before = answered(make_request, reviewer)
    settings.RECEIPT_SIGNING_KEYS = key_set(new, old)  # the new key signs, the old one is still published
    after = answered(make_request, reviewer)

    jwks = published(client)
    assert [key["kid"] for key in jwks["keys"]] == ["2026-07", "2026-01"]
    assert all("d" not in key for key in jwks["keys"])  # public halves only
    assert verify_receipt(receipt_of(before), jwks, rules.request_digest_of(before)).kid == "2026-01"
    assert verify_receipt(receipt_of(after), jwks, rules.request_digest_of(after)).kid == "2026-07"

    settings.RECEIPT_SIGNING_KEYS = key_set(new)  # the old key retired: its receipts no longer verify
    with pytest.raises(ReceiptInvalid, match="unknown key"):
        verify_receipt(receipt_of(before), published(client), rules.request_digest_of(before))


def test_pem_keys_each_after_a_kid_line_are_accepted() -> None:
    from cryptography.hazmat.primitives import serialization

    pem = (
        ec.generate_private_key(ec.SECP256R1())
        .private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        .decode()
    )
    [key] = receipts.parse_signing_keys(f"kid: pem-1\n{pem}")
    assert (key.kid, key.algorithm) == ("pem-1", "ES256")


def test_a_public_key_or_a_missing_kid_is_refused_at_configuration() -> None:
    from django.core.exceptions import ImproperlyConfigured

    public = {k: v for k, v in private_jwk("p", ec.generate_private_key(ec.SECP256R1())).items() if k != "d"}
    with pytest.raises(ImproperlyConfigured):
        receipts.parse_signing_keys(key_set(public))
    nameless = {
        k: v for k, v in private_jwk("x", ec.generate_private_key(ec.SECP256R1())).items() if k != "kid"
    }
    with pytest.raises(ImproperlyConfigured):
        receipts.parse_signing_keys(key_set(nameless))


def test_without_configured_keys_the_derived_key_is_stable() -> None:
    assert receipts.derived_signing_key("s3cret").kid == receipts.derived_signing_key("s3cret").kid
    assert receipts.derived_signing_key("s3cret").kid != receipts.derived_signing_key("other").kid
