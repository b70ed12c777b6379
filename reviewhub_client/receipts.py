"""Offline verification of ReviewHub's signed receipts (`_meta["reviewhub/receipt"]` of an ElicitResult), for an
MCP server that wants proof a person (or a named rule) approved these exact arguments.

    jwks = httpx.get(f"{reviewhub_url}/.well-known/reviewhub-receipts.json").json()  # cache it
    receipt = verify_receipt(result.meta["reviewhub/receipt"], jwks, expected_digest=my_digest)

`expected_digest` is what the MCP server computed itself from the call it is about to make (docs/approvals.md):
a receipt for other arguments is refused even though its signature is good.
"""

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import jwt

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
    )
