"""Dynamic client registration (RFC 7591) that anyone may call, at a bounded price.

`/oauth/register/` is open, as MCP hosts need it to be. Unbounded, 30 anonymous registrations in a row were all
stored and each cost ~0.32 s of CPU (measured: 0.313-0.328 s), nearly all of it Django's default password hasher
(PBKDF2, 1,000,000 rounds) hashing the client secret django-oauth-toolkit gives every new client, public ones
included; meanwhile other agents' intake waited for the CPU. Two bounds:

- `McpClientRegistrationView`: DOT's registration view behind `OAUTH_REGISTRATION_RATE` (10/hour) per client
  address, counted in the cache like the API rates (Redis in services mode, so across processes); past it, 429
  with an OAuth error body and Retry-After, and nothing is stored;
- `ClientSecretHasher`: client secrets (DOT's `CLIENT_SECRET_HASHER`) are hashed with 1,000 PBKDF2 rounds, not a
  million. A client secret is 128 random characters chosen by the server (~760 bits), not a person's password:
  stretching protects what can be guessed, and here it only made every registration, and every token request that
  names a client with any secret, cost a third of a second to whoever sent it. Measured per request (CPU, median
  of 20): a registration 315 ms → 2.7 ms, a token request with a wrong secret 318 ms → 2.7 ms. Its own algorithm
  name matters: on a wrong secret Django tops the work up to the default hasher's rounds when the algorithm is the
  default's. Secrets stored before keep their million rounds (the count is in the stored hash).
"""

import ipaddress
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth.hashers import PBKDF2PasswordHasher
from django.http import HttpRequest, HttpResponse, JsonResponse
from oauth2_provider.views import DynamicClientRegistrationView

from elicitation.api import throttling

logger = logging.getLogger(__name__)

REGISTRATION_RATE_SCOPE = "oauth-registration"


class ClientSecretHasher(PBKDF2PasswordHasher):
    """PBKDF2-SHA256 at 1,000 rounds (~0.3 ms) for server-generated OAuth client secrets; listed last in
    PASSWORD_HASHERS so no person's password is ever hashed with it."""

    algorithm = "client_secret_pbkdf2_sha256"
    iterations = 1_000


def registering_address(request: HttpRequest) -> str:
    """Whom a registration is counted against: the client address, an IPv6 one by its /64 (one host usually holds a
    whole /64, and would otherwise have 2**64 addresses to register from). REMOTE_ADDR only: X-Forwarded-For is
    whatever the client says unless a trusted proxy rewrote it."""
    address = request.META.get("REMOTE_ADDR") or "unknown"
    try:
        parsed = ipaddress.ip_address(address)
    except ValueError:
        return address
    if isinstance(parsed, ipaddress.IPv6Address):
        if parsed.ipv4_mapped is not None:  # an IPv4 client seen through a dual-stack socket
            return str(parsed.ipv4_mapped)
        return str(ipaddress.ip_network(f"{parsed}/64", strict=False))
    return str(parsed)


def registration_refused(retry_after: int) -> JsonResponse:
    response = JsonResponse(
        {
            # RFC 7591 names no error for this; RFC 6749's "try again later" is the one a client already knows.
            "error": "temporarily_unavailable",
            "error_description": (
                f"Too many client registrations from this address; retry in {retry_after} seconds."
            ),
        },
        status=429,
    )
    response["Retry-After"] = str(retry_after)
    return response


class McpClientRegistrationView(DynamicClientRegistrationView):  # type: ignore[misc]
    """DOT's RFC 7591 endpoint, counted per client address before any of its work is done."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        address = registering_address(request)
        retry_after = throttling.charge(
            REGISTRATION_RATE_SCOPE, address, getattr(settings, "OAUTH_REGISTRATION_RATE", None)
        )
        if retry_after is not None:
            logger.warning("OAuth client registration refused: %s is over OAUTH_REGISTRATION_RATE", address)
            return registration_refused(retry_after)
        return super().post(request, *args, **kwargs)  # type: ignore[no-any-return]


__all__ = ["ClientSecretHasher", "McpClientRegistrationView", "registering_address"]
