"""Signed receipts: every completed request's result carries, in `_meta["reviewhub/receipt"]`, a compact JWS
(ES256 or EdDSA) naming the request, the digest of what was asked, the outcome, who decided and when. An MCP server
verifies it offline against the keys published at `/.well-known/reviewhub-receipts.json` (docs/approvals.md).

Keys come from `RECEIPT_SIGNING_KEYS` (a JWK Set, a list of private JWKs, or PEM blocks each after a `kid:` line);
the first signs, all are published, so a key retired from signing keeps verifying old receipts while it is listed.
Unset, one ES256 key is derived from SECRET_KEY with HKDF (stable across restarts, fine embedded; rotating
SECRET_KEY then changes it, so deployments set the variable).
"""

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import jwt
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

RECEIPT_META = "reviewhub/receipt"
RECEIPT_TYPE = "reviewhub-receipt+jwt"

SigningPrivateKey = ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey

# The order of the P-256 group: a derived scalar must lie in [1, n - 1].
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_PEM_WITH_KID = re.compile(
    r"kid:\s*(?P<kid>[A-Za-z0-9._-]{1,64})\s*(?P<pem>-----BEGIN [A-Z ]+-----.+?-----END [A-Z ]+-----)", re.S
)


@dataclass(frozen=True)
class SigningKey:
    kid: str
    private_key: SigningPrivateKey
    algorithm: str  # "ES256" or "EdDSA"

    def public_jwk(self) -> dict[str, Any]:
        public = self.private_key.public_key()
        jwk: dict[str, Any]
        if isinstance(public, ec.EllipticCurvePublicKey):
            jwk = dict(jwt.algorithms.ECAlgorithm.to_jwk(public, as_dict=True))
        else:
            jwk = dict(jwt.algorithms.OKPAlgorithm.to_jwk(public, as_dict=True))
        return {**jwk, "kid": self.kid, "alg": self.algorithm, "use": "sig"}


def _checked(kid: str, key: Any) -> SigningKey:
    if isinstance(key, ec.EllipticCurvePrivateKey) and isinstance(key.curve, ec.SECP256R1):
        return SigningKey(kid, key, "ES256")
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return SigningKey(kid, key, "EdDSA")
    raise ImproperlyConfigured(
        f"RECEIPT_SIGNING_KEYS key {kid!r} must be a private P-256 (ES256) or Ed25519 (EdDSA) key."
    )


def parse_signing_keys(raw: str) -> tuple[SigningKey, ...]:
    """The keys `RECEIPT_SIGNING_KEYS` lists, in order; refuses a key without a kid, a public key, a kid twice."""
    text = raw.strip()
    keys: list[SigningKey] = []
    if text.startswith(("{", "[")):
        try:
            data = json.loads(text)
        except ValueError:
            raise ImproperlyConfigured("RECEIPT_SIGNING_KEYS is not valid JSON.") from None
        jwks = data.get("keys", [data]) if isinstance(data, dict) else data
        for index, jwk in enumerate(jwks if isinstance(jwks, list) else []):
            if not isinstance(jwk, dict) or not jwk.get("kid") or "d" not in jwk:
                raise ImproperlyConfigured(
                    f"RECEIPT_SIGNING_KEYS key {index + 1} must be a private JWK with a kid."
                )
            try:
                loaded = jwt.PyJWK(jwk).key
            except (jwt.PyJWKError, ValueError) as exc:
                raise ImproperlyConfigured(f"RECEIPT_SIGNING_KEYS key {jwk['kid']!r}: {exc}") from None
            keys.append(_checked(str(jwk["kid"]), loaded))
    else:
        for match in _PEM_WITH_KID.finditer(text):
            try:
                loaded = serialization.load_pem_private_key(match["pem"].encode(), password=None)
            except ValueError:
                raise ImproperlyConfigured(
                    f"RECEIPT_SIGNING_KEYS key {match['kid']!r} is not a private PEM key."
                ) from None
            keys.append(_checked(match["kid"], loaded))
    if not keys:
        raise ImproperlyConfigured(
            "RECEIPT_SIGNING_KEYS must be a JWK Set, a list of private JWKs, or PEM keys each after a `kid:` line."
        )
    kids = [key.kid for key in keys]
    if len(set(kids)) != len(kids):
        raise ImproperlyConfigured("RECEIPT_SIGNING_KEYS lists a kid twice.")
    return tuple(keys)


def derived_signing_key(secret_key: str) -> SigningKey:
    """An ES256 key derived from SECRET_KEY: the same after every restart, named by its public key."""
    hkdf = HKDF(algorithm=hashes.SHA256(), length=48, salt=None, info=b"reviewhub receipt key v1")
    scalar = int.from_bytes(hkdf.derive(secret_key.encode()), "big") % (_P256_ORDER - 1) + 1
    private_key = ec.derive_private_key(scalar, ec.SECP256R1())
    public_der = private_key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return SigningKey("derived-" + hashlib.sha256(public_der).hexdigest()[:12], private_key, "ES256")


@functools.cache
def _keys_for(raw: str, secret_key: str) -> tuple[SigningKey, ...]:
    return parse_signing_keys(raw) if raw.strip() else (derived_signing_key(secret_key),)


def signing_keys() -> tuple[SigningKey, ...]:
    """The configured keys (first signs), parsed once per setting value: tests that override it get theirs."""
    return _keys_for(settings.RECEIPT_SIGNING_KEYS, settings.SECRET_KEY)


def public_jwks() -> dict[str, Any]:
    """The JWK Set verifiers fetch: every configured key's public half."""
    return {"keys": [key.public_jwk() for key in signing_keys()]}


def sign_receipt(
    *,
    request_id: UUID | str,
    digest: str,
    action: str,
    approvers: list[str],
    rule: str | None,
    at: datetime,
    step_up: list[dict[str, Any]] | None = None,
) -> str:
    """The compact JWS of one decision (claims in docs/approvals.md), signed with the first key."""
    key = signing_keys()[0]
    claims: dict[str, Any] = {
        "iss": settings.PUBLIC_URL,
        "iat": int(at.timestamp()),
        "request": str(request_id),
        "digest": digest,
        "action": action,
        "approvers": approvers,
    }
    if rule is not None:
        claims["rule"] = rule
    if step_up:
        claims["stepUp"] = step_up  # each approver's passkey assertion over the digest (docs/approvals.md)
    return jwt.encode(
        claims, key.private_key, algorithm=key.algorithm, headers={"kid": key.kid, "typ": RECEIPT_TYPE}
    )
