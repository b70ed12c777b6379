"""The company's OpenID Connect provider, as its discovery document describes it.

mozilla-django-oidc reads each endpoint from a setting of its own (OIDC_OP_AUTHORIZATION_ENDPOINT, …); `setting()`
answers those from `<OIDC_ISSUER>/.well-known/openid-configuration` instead, so an operator sets the issuer alone.
The document is fetched when a sign-in first needs it and kept for DISCOVERY_TTL_SECONDS in each process, so a
provider that moves its endpoints is followed within the hour; while a refresh fails, the last document is used.
The signing keys are not cached here: the library fetches the JWKS at every sign-in, so a rotated key works at once.
"""

import logging
import time
from dataclasses import dataclass
from typing import Any

import requests
from django.conf import settings
from mozilla_django_oidc.utils import import_from_settings

logger = logging.getLogger(__name__)

DISCOVERY_TTL_SECONDS = 3600

# The library's setting → the discovery document's field (OpenID Connect Discovery 1.0, section 3).
DISCOVERED_SETTINGS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
}


class ProviderUnavailable(Exception):
    """The discovery document could not be fetched, or does not describe OIDC_ISSUER's provider."""


@dataclass(frozen=True)
class ProviderMetadata:
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    jwks_uri: str
    userinfo_endpoint: str | None
    # The client authenticates at the token endpoint with HTTP Basic unless the provider lists only
    # client_secret_post (Basic is the spec's default when the document says nothing).
    token_auth_basic: bool
    fetched_at: float


_known: dict[str, ProviderMetadata] = {}


def discovery_url(issuer: str) -> str:
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def fetch_metadata(issuer: str) -> ProviderMetadata:
    url = discovery_url(issuer)
    try:
        response = requests.get(
            url,
            headers={"Accept": "application/json"},
            timeout=import_from_settings("OIDC_TIMEOUT", None),
            verify=import_from_settings("OIDC_VERIFY_SSL", True),
            proxies=import_from_settings("OIDC_PROXY", None),
        )
        response.raise_for_status()
        document = response.json()
    except (requests.RequestException, ValueError) as exc:
        raise ProviderUnavailable(f"{url}: {exc}") from exc
    if not isinstance(document, dict):
        raise ProviderUnavailable(f"{url} is not a JSON object")
    # Discovery section 4.3: the document must name the issuer it was fetched for, exactly; the ID tokens' `iss` is
    # checked against OIDC_ISSUER, so a mismatch here would refuse every sign-in later with a vaguer message.
    if document.get("issuer") != issuer:
        raise ProviderUnavailable(
            f"{url} says its issuer is {document.get('issuer')!r}, not OIDC_ISSUER={issuer!r}; set OIDC_ISSUER to it"
        )
    endpoints: dict[str, str | None] = {}
    for field in DISCOVERED_SETTINGS.values():
        value = document.get(field)
        if value is None and field == "userinfo_endpoint":  # optional: the ID token's claims are used alone
            endpoints[field] = None
            continue
        # The code, the client secret and the tokens travel to these: over TLS when the issuer is.
        if not isinstance(value, str) or not value.startswith(
            "https://" if issuer.startswith("https:") else "http"
        ):
            raise ProviderUnavailable(f"{url} gives no usable {field} ({value!r})")
        endpoints[field] = value
    methods = document.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
    return ProviderMetadata(
        issuer=issuer,
        authorization_endpoint=str(endpoints["authorization_endpoint"]),
        token_endpoint=str(endpoints["token_endpoint"]),
        jwks_uri=str(endpoints["jwks_uri"]),
        userinfo_endpoint=endpoints["userinfo_endpoint"],
        token_auth_basic="client_secret_basic" in methods or "client_secret_post" not in methods,
        fetched_at=time.monotonic(),
    )


def metadata() -> ProviderMetadata:
    issuer = settings.OIDC_ISSUER
    known = _known.get(issuer)
    if known is not None and time.monotonic() - known.fetched_at < DISCOVERY_TTL_SECONDS:
        return known
    try:
        fresh = fetch_metadata(issuer)
    except ProviderUnavailable as exc:
        if known is None:
            raise
        logger.warning("OpenID Connect discovery failed (%s); using the document fetched before", exc)
        return known
    _known[issuer] = fresh
    return fresh


def setting(name: str, *default: Any) -> Any:
    """A mozilla-django-oidc setting: endpoints and the token endpoint's client authentication from the discovery
    document, everything else from Django's settings."""
    if name in DISCOVERED_SETTINGS:
        return getattr(metadata(), DISCOVERED_SETTINGS[name])
    if name == "OIDC_TOKEN_USE_BASIC_AUTH":
        return metadata().token_auth_basic
    return import_from_settings(name, *default)
