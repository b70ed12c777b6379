"""Offline verification of ReviewHub's signed receipts (`_meta["reviewhub/receipt"]` of an ElicitResult), for an
MCP server that wants proof a person (or a named rule) approved these exact arguments.

    jwks = httpx.get(f"{reviewhub_url}/.well-known/reviewhub-receipts.json").json()  # cache it
    receipt = verify_receipt(result.meta["reviewhub/receipt"], jwks, expected_digest=my_digest)

`expected_digest` is what the MCP server computed itself from the call it is about to make (docs/approvals.md):
a receipt for other arguments is refused even though its signature is good.
"""

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa

RECEIPT_META = "reviewhub/receipt"
RECEIPT_TYPE = "reviewhub-receipt+jwt"
# What ReviewHub signs with; anything else in a header (notably "none" or an HMAC) is refused before verifying.
RECEIPT_ALGORITHMS = ("ES256", "EdDSA")
_REQUIRED_CLAIMS = ("iss", "iat", "request", "digest", "action", "approvers")


class ReceiptInvalid(Exception):
    """The receipt cannot be trusted: bad signature, unknown key, wrong type, or not for the expected digest."""


@dataclass(frozen=True)
class Receipt:
    issuer: str
    request_id: str
    digest: str
    action: str  # accept | decline | cancel
    approvers: tuple[str, ...]  # usernames of who decided; empty when a rule did
    rule: str | None  # the rule that answered, if one did
    issued_at: datetime
    kid: str
    # Each approver's passkey assertion when the request needed one (`step_up: passkey`): see verify_step_up.
    step_up: tuple[Mapping[str, Any], ...] = ()


def verify_receipt(receipt: str, jwks: Mapping[str, Any], expected_digest: str) -> Receipt:
    """The receipt's claims, once its signature checks against the JWK Set's key named by its `kid` and its digest
    is `expected_digest`; raises ReceiptInvalid otherwise."""
    try:
        header = jwt.get_unverified_header(receipt)
    except jwt.PyJWTError as exc:
        raise ReceiptInvalid(f"not a compact JWS: {exc}") from None
    if header.get("typ") != RECEIPT_TYPE:
        raise ReceiptInvalid(f"not a ReviewHub receipt (typ {header.get('typ')!r})")
    if header.get("alg") not in RECEIPT_ALGORITHMS:
        raise ReceiptInvalid(f"algorithm {header.get('alg')!r} is not one ReviewHub signs with")
    kid = header.get("kid")
    jwk = next(
        (key for key in jwks.get("keys", []) if isinstance(key, Mapping) and key.get("kid") == kid), None
    )
    if jwk is None:
        raise ReceiptInvalid(f"unknown key {kid!r}: not in the published key set")
    try:
        # The key's own algorithm, not the header's, decides how it verifies (no algorithm confusion).
        key = jwt.PyJWK(dict(jwk))
        if header["alg"] != key.algorithm_name:
            raise ReceiptInvalid(f"key {kid!r} is for {key.algorithm_name}, the receipt says {header['alg']}")
        claims = jwt.decode(
            receipt, key.key, algorithms=[key.algorithm_name], options={"require": list(_REQUIRED_CLAIMS)}
        )
    except jwt.PyJWTError as exc:
        raise ReceiptInvalid(f"signature or claims refused: {exc}") from None
    digest = claims["digest"]
    if not isinstance(digest, str) or not hmac.compare_digest(digest.encode(), expected_digest.encode()):
        raise ReceiptInvalid("the receipt is for other arguments (digest mismatch)")
    rule = claims.get("rule")
    return Receipt(
        issuer=str(claims["iss"]),
        request_id=str(claims["request"]),
        digest=digest,
        action=str(claims["action"]),
        approvers=tuple(str(name) for name in claims["approvers"]),
        rule=str(rule) if rule is not None else None,
        issued_at=datetime.fromtimestamp(int(claims["iat"]), tz=UTC),
        kid=str(kid),
        step_up=tuple(entry for entry in claims.get("stepUp") or () if isinstance(entry, Mapping)),
    )


# --- passkey step-up: each approver's WebAuthn assertion over the digest ------------------------------------------

STEP_UP_PREFIX = b"reviewhub-step-up/1\n"
_FLAG_USER_PRESENT = 0x01
_FLAG_USER_VERIFIED = 0x04


@dataclass(frozen=True)
class StepUpApproval:
    by: str  # the approver's username, as the receipt names them
    credential_id: str  # base64url, the passkey's id
    public_key: Mapping[
        str, Any
    ]  # the passkey's public JWK (pin it to trust a reviewer's key, not ReviewHub)
    origin: str  # where the browser signed (clientDataJSON's origin)


def _b64url(text: Any) -> bytes:
    if not isinstance(text, str):
        raise ReceiptInvalid("a step-up field is not base64url text")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except ValueError:
        raise ReceiptInvalid("a step-up field is not base64url") from None


def _check_signature(jwk: Mapping[str, Any], signature: bytes, signed: bytes) -> None:
    """The WebAuthn signature over authenticatorData || SHA-256(clientDataJSON), with the key's own algorithm."""
    try:
        key = jwt.PyJWK(dict(jwk)).key
    except (jwt.PyJWKError, ValueError, TypeError) as exc:
        raise ReceiptInvalid(f"a step-up public key is not a usable JWK: {exc}") from None
    try:
        if isinstance(key, ec.EllipticCurvePublicKey) and jwk.get("alg") == "ES256":
            key.verify(signature, signed, ec.ECDSA(hashes.SHA256()))  # DER, as WebAuthn signs
        elif isinstance(key, ed25519.Ed25519PublicKey) and jwk.get("alg") == "EdDSA":
            key.verify(signature, signed)
        elif isinstance(key, rsa.RSAPublicKey) and jwk.get("alg") == "RS256":
            key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
        else:
            raise ReceiptInvalid(f"step-up key algorithm {jwk.get('alg')!r} is not ES256, EdDSA or RS256")
    except InvalidSignature:
        raise ReceiptInvalid("a step-up signature does not verify") from None


def verify_step_up(
    receipt: Receipt, *, rp_id: str | None = None, origin: str | None = None
) -> tuple[StepUpApproval, ...]:
    """Check every approver's passkey assertion in the receipt, without trusting ReviewHub: each signature verifies
    with the public key it names, over authenticatorData || SHA-256(clientDataJSON); clientDataJSON is a
    `webauthn.get` whose challenge is `reviewhub-step-up/1\\n<request>\\n<digest>\\n<nonce>` for this receipt's request
    and digest; the authenticator saw the user present and verified; each approver named in `approvers` signed,
    each with a different passkey. `rp_id` and `origin`, when given, are checked too. Raises ReceiptInvalid."""
    if not receipt.step_up:
        raise ReceiptInvalid("the receipt carries no passkey step-up")
    expected = STEP_UP_PREFIX + f"{receipt.request_id}\n{receipt.digest}\n".encode()
    approvals: list[StepUpApproval] = []
    for entry in receipt.step_up:
        by = entry.get("by")
        public_key = entry.get("publicKey")
        if not isinstance(by, str) or not isinstance(public_key, Mapping):
            raise ReceiptInvalid("a step-up entry names no approver or no public key")
        authenticator_data = _b64url(entry.get("authenticatorData"))
        client_data_json = _b64url(entry.get("clientDataJSON"))
        try:
            client_data = json.loads(client_data_json)
            challenge = _b64url(client_data["challenge"])
        except (ValueError, KeyError, TypeError):
            raise ReceiptInvalid(f"{by}'s clientDataJSON is not valid") from None
        if client_data.get("type") != "webauthn.get":
            raise ReceiptInvalid(f"{by}'s assertion is not a webauthn.get")
        nonce = challenge.removeprefix(expected)
        if not challenge.startswith(expected) or not nonce or b"\n" in nonce:
            raise ReceiptInvalid(f"{by}'s passkey signed another request or other arguments")
        if origin is not None and client_data.get("origin") != origin:
            raise ReceiptInvalid(f"{by}'s passkey signed on {client_data.get('origin')!r}, not {origin!r}")
        if len(authenticator_data) < 37:
            raise ReceiptInvalid(f"{by}'s authenticatorData is too short")
        if rp_id is not None and not hmac.compare_digest(
            authenticator_data[:32], hashlib.sha256(rp_id.encode()).digest()
        ):
            raise ReceiptInvalid(f"{by}'s passkey is for another relying party than {rp_id!r}")
        flags = authenticator_data[32]
        if not flags & _FLAG_USER_PRESENT or not flags & _FLAG_USER_VERIFIED:
            raise ReceiptInvalid(f"{by}'s authenticator did not verify the user")
        signed = authenticator_data + hashlib.sha256(client_data_json).digest()
        _check_signature(public_key, _b64url(entry.get("signature")), signed)
        approvals.append(
            StepUpApproval(by, str(entry.get("credentialId", "")), public_key, str(client_data.get("origin")))
        )
    signers = [approval.by for approval in approvals]
    if len(set(signers)) != len(signers) or len({a.credential_id for a in approvals}) != len(approvals):
        raise ReceiptInvalid("one approver or one passkey is counted twice")
    unsigned = [name for name in receipt.approvers if name not in signers]
    if unsigned or set(signers) - set(receipt.approvers):
        raise ReceiptInvalid(
            f"approvers and passkey signers differ (unsigned: {', '.join(unsigned) or 'none'})"
        )
    return tuple(approvals)
