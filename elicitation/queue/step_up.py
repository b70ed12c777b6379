"""Passkey step-up: an accept on a request whose rule says `step_up: passkey` is signed by the approver's passkey.

The challenge binds what is approved: `reviewhub-step-up/1\\n<request id>\\n<digest>\\n<nonce>` (UTF-8), where the
nonce is stored as a `StepUpChallenge` row for CHALLENGE_SECONDS and deleted by the one answer that uses it, so a
replayed assertion finds nothing. The assertion is verified with py_webauthn against the reviewer's registered
passkey (user verification required, sign count checked) and goes into the receipt as a bundle entry a server can
check without trusting ReviewHub (`reviewhub_client.receipts.verify_step_up`, docs/approvals.md).

Registration (the Preferences page) uses the same one-time challenge rows, with no request. The relying party is
PUBLIC_URL's host: a passkey registered there signs only for that origin.
"""

import base64
import json
import secrets
from collections.abc import Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from webauthn import (
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import parse_authentication_credential_json, parse_registration_credential_json
from webauthn.helpers.cose import COSEAlgorithmIdentifier
from webauthn.helpers.decode_credential_public_key import (
    DecodedEC2PublicKey,
    DecodedOKPPublicKey,
    DecodedRSAPublicKey,
    decode_credential_public_key,
)
from webauthn.helpers.exceptions import WebAuthnException
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from elicitation.models import Action, ElicitationRequest, Passkey, StepUpChallenge
from elicitation.queue import clock
from elicitation.queue.errors import InvalidInput, StepUpRequired
from elicitation.queue.rules.facts import request_digest_of

PASSKEY = "passkey"
CHALLENGE_PREFIX = b"reviewhub-step-up/1\n"
REGISTRATION_PREFIX = b"reviewhub-passkey-registration/1\n"
CHALLENGE_SECONDS = 120
MAX_PASSKEYS = 10
# What a receipt's verifier can check with a JWK: ES256, EdDSA and RS256 keys only.
SUPPORTED_ALGORITHMS = [
    COSEAlgorithmIdentifier.ECDSA_SHA_256,
    COSEAlgorithmIdentifier.EDDSA,
    COSEAlgorithmIdentifier.RSASSA_PKCS1_v1_5_SHA_256,
]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def relying_party() -> tuple[str, str]:
    """(RP ID, origin): PUBLIC_URL's host and origin, what every passkey is bound to."""
    parts = urlsplit(settings.PUBLIC_URL)
    return parts.hostname or "localhost", f"{parts.scheme}://{parts.netloc}"


def required(request: ElicitationRequest) -> bool:
    """Whether an accept of this request must be signed with a passkey (a matched rule said `step_up: passkey`)."""
    return isinstance(request.policy, dict) and request.policy.get("step_up") == PASSKEY


def bound_digest(request: ElicitationRequest) -> str:
    """The digest an approval is bound to: the one stored at intake (a quorum's, a step-up's), else recomputed."""
    stored = request.policy.get("digest") if isinstance(request.policy, dict) else None
    return stored if isinstance(stored, str) and stored else request_digest_of(request)


def page_refusal(request: ElicitationRequest) -> StepUpRequired:
    """What every door without a browser says to an accept of a step-up request."""
    page = f"{settings.PUBLIC_URL}/requests/{request.pk}/"
    return StepUpRequired(
        f"This request needs a passkey: approve it on its page in ReviewHub ({page}). A decline needs none.",
        {"step_up": f"accept is signed with a passkey on {page}"},
    )


def step_up_challenge(request_id: Any, digest: str, nonce: str) -> bytes:
    return CHALLENGE_PREFIX + f"{request_id}\n{digest}\n{nonce}".encode()


def _store_challenge(user: User, request: ElicitationRequest | None, challenge: bytes, nonce: str) -> None:
    now = clock.now()
    StepUpChallenge.objects.filter(user=user, expires_at__lte=now).delete()
    StepUpChallenge.objects.create(
        nonce=nonce,
        user=user,
        request=request,
        challenge=challenge,
        expires_at=now + timedelta(seconds=CHALLENGE_SECONDS),
    )


def _take_challenge(user: User, nonce: str) -> StepUpChallenge:
    """The stored challenge named by `nonce`, deleted now: the first use wins, a replay finds nothing."""
    with transaction.atomic():
        row = StepUpChallenge.objects.select_for_update().filter(nonce=nonce, user=user).first()
        if row is None or StepUpChallenge.objects.filter(pk=row.pk).delete()[0] != 1:
            raise StepUpRequired(
                "This passkey signature was already used or never issued: approve again.",
                {"step_up": "the challenge is unknown, used or not yours"},
            )
    if row.expires_at <= clock.now():
        raise StepUpRequired(
            "The passkey challenge expired: approve again.", {"step_up": "the challenge expired"}
        )
    return row


def _client_challenge(client_data_json: bytes) -> bytes:
    """The challenge the browser signed, read from clientDataJSON (checked against the stored one by py_webauthn)."""
    try:
        value = json.loads(client_data_json)["challenge"]
        return base64.urlsafe_b64decode(value + "=" * (-len(value) % 4))
    except (ValueError, KeyError, TypeError):
        raise StepUpRequired(
            "The passkey answer is not a WebAuthn assertion.", {"step_up": "clientDataJSON is not valid"}
        ) from None


# --- the approval's ceremony ------------------------------------------------------------------------------------


def authentication_options(request: ElicitationRequest, user: User) -> dict[str, Any]:
    """A fresh challenge for `user` to sign an accept of `request`: the options for navigator.credentials.get."""
    if not required(request):
        raise InvalidInput("This request needs no passkey.", {"step_up": "not required for this request"})
    passkeys = list(Passkey.objects.filter(user=user).values_list("credential_id", flat=True))
    if not passkeys:
        raise StepUpRequired(
            "This request needs a passkey, and you have none: register one on the Preferences page.",
            {"step_up": "no passkey registered"},
        )
    nonce = secrets.token_urlsafe(32)
    challenge = step_up_challenge(request.pk, bound_digest(request), nonce)
    _store_challenge(user, request, challenge, nonce)
    rp_id, _ = relying_party()
    options = generate_authentication_options(
        rp_id=rp_id,
        challenge=challenge,
        timeout=CHALLENGE_SECONDS * 1000,
        allow_credentials=[PublicKeyCredentialDescriptor(id=bytes(credential)) for credential in passkeys],
        user_verification=UserVerificationRequirement.REQUIRED,
    )
    return dict(json.loads(options_to_json(options)))


def verified_approval(
    request: ElicitationRequest, user: User, action: str, assertion: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The receipt's bundle entry for an accept of a step-up request, once `assertion` verifies; None when no
    step-up is owed (a decline, a request without one). Raises StepUpRequired, nothing recorded, otherwise."""
    if action != Action.ACCEPT or not required(request):
        return None
    if not assertion:
        raise page_refusal(request)
    try:
        credential = parse_authentication_credential_json(dict(assertion))
    except (WebAuthnException, ValueError, TypeError, KeyError):
        raise StepUpRequired(
            "The passkey answer is not a WebAuthn assertion.", {"step_up": "not a WebAuthn assertion"}
        ) from None
    signed = _client_challenge(credential.response.client_data_json)
    if not signed.startswith(CHALLENGE_PREFIX):
        raise StepUpRequired("The passkey signed something else.", {"step_up": "not a step-up challenge"})
    row = _take_challenge(user, signed.rsplit(b"\n", 1)[-1].decode(errors="replace"))
    if row.request_id != request.pk or bytes(row.challenge) != step_up_challenge(
        request.pk, bound_digest(request), row.nonce
    ):
        raise StepUpRequired(
            "The passkey signed another request or other arguments.",
            {"step_up": "challenge for another request"},
        )
    passkey = Passkey.objects.filter(user=user, credential_id=credential.raw_id).first()
    if passkey is None:
        raise StepUpRequired(
            "That passkey is not registered to you.", {"step_up": "unknown credential for this reviewer"}
        )
    rp_id, origin = relying_party()
    try:
        verified = verify_authentication_response(
            credential=credential,
            expected_challenge=bytes(row.challenge),
            expected_rp_id=rp_id,
            expected_origin=origin,
            credential_public_key=bytes(passkey.public_key),
            credential_current_sign_count=passkey.sign_count,
            require_user_verification=True,
        )
    except WebAuthnException as exc:
        raise StepUpRequired(
            "The passkey signature did not verify: nothing was recorded.", {"step_up": str(exc)}
        ) from None
    Passkey.objects.filter(pk=passkey.pk).update(sign_count=verified.new_sign_count, last_used_at=clock.now())
    return {
        "by": user.get_username(),
        "credentialId": b64url(credential.raw_id),
        "publicKey": public_jwk(bytes(passkey.public_key)),
        "authenticatorData": b64url(credential.response.authenticator_data),
        "clientDataJSON": b64url(credential.response.client_data_json),
        "signature": b64url(credential.response.signature),
    }


def public_jwk(cose_key: bytes) -> dict[str, Any]:
    """A passkey's COSE public key as a JWK with its `alg`, what a receipt's verifier loads."""
    key = decode_credential_public_key(cose_key)
    if isinstance(key, DecodedEC2PublicKey) and key.alg == COSEAlgorithmIdentifier.ECDSA_SHA_256:
        return {"kty": "EC", "crv": "P-256", "x": b64url(key.x), "y": b64url(key.y), "alg": "ES256"}
    if isinstance(key, DecodedOKPPublicKey) and key.alg == COSEAlgorithmIdentifier.EDDSA:
        return {"kty": "OKP", "crv": "Ed25519", "x": b64url(key.x), "alg": "EdDSA"}
    if isinstance(key, DecodedRSAPublicKey):
        return {"kty": "RSA", "n": b64url(key.n), "e": b64url(key.e), "alg": "RS256"}
    raise InvalidInput("Unsupported passkey algorithm.", {"credential": "use ES256, EdDSA or RS256"})


# --- registration (the Preferences page) -------------------------------------------------------------------------


def registration_options(user: User) -> dict[str, Any]:
    """A fresh challenge for navigator.credentials.create: a passkey for this reviewer on PUBLIC_URL's host."""
    existing = list(Passkey.objects.filter(user=user).values_list("credential_id", flat=True))
    if len(existing) >= MAX_PASSKEYS:
        raise InvalidInput(
            "You have the most passkeys allowed.", {"name": f"at most {MAX_PASSKEYS} passkeys"}
        )
    nonce = secrets.token_urlsafe(32)
    challenge = REGISTRATION_PREFIX + nonce.encode()
    _store_challenge(user, None, challenge, nonce)
    rp_id, _ = relying_party()
    options = generate_registration_options(
        rp_id=rp_id,
        rp_name="ReviewHub",
        user_id=f"reviewhub-user-{user.pk}".encode(),
        user_name=user.get_username(),
        challenge=challenge,
        timeout=CHALLENGE_SECONDS * 1000,
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.PREFERRED,
            user_verification=UserVerificationRequirement.REQUIRED,
        ),
        exclude_credentials=[PublicKeyCredentialDescriptor(id=bytes(credential)) for credential in existing],
        supported_pub_key_algs=SUPPORTED_ALGORITHMS,
    )
    return dict(json.loads(options_to_json(options)))


def register_passkey(user: User, credential_json: Mapping[str, Any], name: str) -> Passkey:
    """Verify navigator.credentials.create's answer against the stored challenge and keep the passkey."""
    name = name.strip()[:80] or "Passkey"
    try:
        credential = parse_registration_credential_json(dict(credential_json))
    except (WebAuthnException, ValueError, TypeError, KeyError):
        raise InvalidInput(
            "Not a WebAuthn registration.", {"credential": "not a WebAuthn credential"}
        ) from None
    signed = _client_challenge(credential.response.client_data_json)
    if not signed.startswith(REGISTRATION_PREFIX):
        raise InvalidInput("Not a registration challenge.", {"credential": "not a registration challenge"})
    row = _take_challenge(user, signed.removeprefix(REGISTRATION_PREFIX).decode(errors="replace"))
    rp_id, origin = relying_party()
    try:
        verified = verify_registration_response(
            credential=credential,
            expected_challenge=bytes(row.challenge),
            expected_rp_id=rp_id,
            expected_origin=origin,
            require_user_verification=True,
            supported_pub_key_algs=SUPPORTED_ALGORITHMS,
        )
    except WebAuthnException as exc:
        raise InvalidInput("The passkey could not be verified.", {"credential": str(exc)}) from None
    if Passkey.objects.filter(credential_id=verified.credential_id).exists():
        raise InvalidInput("That passkey is registered already.", {"credential": "already registered"})
    return Passkey.objects.create(
        user=user,
        credential_id=verified.credential_id,
        public_key=verified.credential_public_key,
        sign_count=verified.sign_count,
        name=name,
        created_at=clock.now(),
    )
