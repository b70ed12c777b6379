"""The public keys of ReviewHub's signed receipts, as a JWK Set at `/.well-known/reviewhub-receipts.json`: what an
MCP server fetches (and caches) to verify `_meta["reviewhub/receipt"]` offline (docs/approvals.md)."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from elicitation.queue import receipts

# Verifiers may cache the set this long; a rotation publishes the new key before it signs (docs/approvals.md).
JWKS_MAX_AGE_SECONDS = 3600


@require_GET
def receipt_jwks(request: HttpRequest) -> JsonResponse:
    response = JsonResponse(receipts.public_jwks())
    response["Cache-Control"] = f"public, max-age={JWKS_MAX_AGE_SECONDS}"
    response["Access-Control-Allow-Origin"] = "*"  # public keys: browsers' verifiers may fetch them anywhere
    return response
