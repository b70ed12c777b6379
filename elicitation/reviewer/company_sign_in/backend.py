"""Authentication backends: the company's OpenID Connect provider, and passwords for staff only.

`CompanySignInBackend` is mozilla-django-oidc's backend with what ReviewHub needs on top:
- endpoints from the provider's discovery document (`provider.setting`),
- the ID token checked in full: signature with the issuer's key (RS256 only), `iss` equal to OIDC_ISSUER, `aud`
  naming this client (and `azp` when it names others too), `exp`, `iat` and `sub` present, `exp` not passed; the
  library checks the `nonce` against the session. (Its own decoding leaves `iss` and `aud` unchecked.)
- the userinfo response used only when it names the ID token's `sub` (OpenID Connect Core 5.3.2),
- accounts found by (issuer, `sub`) and made on first sign-in (`accounts.py`), never matched by e-mail.
"""

from collections.abc import Mapping
from typing import Any

import jwt
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.backends import ModelBackend
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser, User
from django.core.exceptions import SuspiciousOperation
from django.db.models import QuerySet
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from elicitation.reviewer.company_sign_in import accounts, provider

# Clocks of the provider and of ReviewHub may disagree by this much when `exp` and `iat` are compared.
CLOCK_SKEW_SECONDS = 60


class CompanySignInBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    def __init__(self) -> None:
        # Django builds a backend for every request of a signed-in account (to call get_user); the library's own
        # __init__ reads the endpoints, which here means the discovery document, so that waits for a sign-in.
        self.UserModel = get_user_model()

    @staticmethod
    def get_settings(attr: str, *default: Any) -> Any:
        return provider.setting(attr, *default)

    def authenticate(self, request: HttpRequest | None, **credentials: Any) -> AbstractBaseUser | None:
        # Only the provider's redirect back (the callback view) passes a nonce: password sign-ins and every other
        # authenticate() call pass by without a discovery fetch.
        if request is None or "nonce" not in credentials:
            return None
        super().__init__()  # endpoints, client id and secret, through get_settings
        user: AbstractBaseUser | None = super().authenticate(request, **credentials)
        return user

    def get_user(self, user_id: Any) -> AbstractBaseUser | None:
        # Django's rule rather than the library's: an account made inactive is signed out at its next request.
        return ModelBackend.get_user(self, user_id)

    def get_payload_data(self, token: bytes | str, key: Any) -> dict[str, Any]:
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=[settings.OIDC_RP_SIGN_ALGO],
                audience=settings.OIDC_RP_CLIENT_ID,
                issuer=settings.OIDC_ISSUER,
                leeway=CLOCK_SKEW_SECONDS,
                options={"require": ["iss", "aud", "exp", "iat", "sub"]},
            )
        except jwt.InvalidTokenError as exc:
            raise SuspiciousOperation(f"ID token refused: {exc}") from exc
        audience = claims["aud"]
        if (
            isinstance(audience, list)
            and len(audience) > 1
            and claims.get("azp") != settings.OIDC_RP_CLIENT_ID
        ):
            raise SuspiciousOperation("ID token refused: several audiences and `azp` is not this client")
        return claims

    def get_userinfo(self, access_token: str, id_token: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """The ID token's claims, with the userinfo endpoint's (groups, names, e-mail) over them."""
        if not self.OIDC_OP_USER_ENDPOINT:
            return dict(payload)
        userinfo = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(userinfo, dict) or userinfo.get("sub") != payload["sub"]:
            raise SuspiciousOperation("the userinfo response is for another subject than the ID token")
        return {**payload, **userinfo}

    def verify_claims(self, claims: Mapping[str, Any]) -> bool:
        # `sub` only: the e-mail the library would require is optional here (the username falls back to `sub`).
        return isinstance(claims.get("sub"), str) and bool(claims["sub"])

    def filter_users_by_claims(self, claims: Mapping[str, Any]) -> QuerySet[Any]:
        return accounts.linked_users(settings.OIDC_ISSUER, claims["sub"])

    def create_user(self, claims: Mapping[str, Any]) -> AbstractBaseUser:
        return accounts.create_account(settings.OIDC_ISSUER, claims)

    def update_user(self, user: AbstractBaseUser, claims: Mapping[str, Any]) -> AbstractBaseUser:
        return accounts.refresh_account(user, claims)


class StaffPasswordBackend(ModelBackend):
    """Passwords for staff only, in place of Django's ModelBackend when LOCAL_PASSWORD_LOGIN is off: the admin's
    sign-in page stays a way in when the provider is down, and no reviewer's password opens anything. Sessions a
    password opened for a non-staff account before the switch end at their next request (their backend is gone)."""

    def user_can_authenticate(self, user: User | AnonymousUser | None) -> bool:
        return super().user_can_authenticate(user) and bool(getattr(user, "is_staff", False))
