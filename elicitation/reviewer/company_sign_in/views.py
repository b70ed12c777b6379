"""The sign-in page, and the two legs of the OpenID Connect authorization code flow (mozilla-django-oidc's views).

`/oidc/authenticate/` sends the browser to the provider with a fresh state, nonce and PKCE challenge kept in the
session; `/oidc/callback/` takes the code back, and the backend trades it for tokens, checks the ID token and signs
the account in. Both answer 404 while OIDC_ISSUER is unset. Whatever goes wrong on the way (the provider down, a
state that is not this browser's, a token that fails a check) ends on the sign-in page with a message and no session.
"""

import logging
from typing import Any
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib import messages
from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from elicitation.reviewer.company_sign_in import provider

logger = logging.getLogger(__name__)


def login_page(next_url: str = "") -> str:
    return reverse("login") + (f"?{urlencode({'next': next_url})}" if next_url else "")


class SignInView(LoginView):
    """The sign-in page: the provider's button when OIDC_ISSUER is set (templatetags/sign_in_options.py), the
    password form unless LOCAL_PASSWORD_LOGIN is off. Off, a password POST is refused here before any password is
    checked; staff still sign in with theirs on the admin's page (backend.StaffPasswordBackend)."""

    redirect_authenticated_user = True

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.LOCAL_PASSWORD_LOGIN:
            return self.render_to_response(self.get_context_data(password_refused=True), status=403)
        return super().post(request, *args, **kwargs)


class CompanySignInStart(OIDCAuthenticationRequestView):  # type: ignore[misc]
    get_settings = staticmethod(provider.setting)

    def __init__(self, **kwargs: Any) -> None:
        # The library reads the authorization endpoint here; `get` does, where an unreachable provider can be
        # answered with the sign-in page instead of an error.
        View.__init__(self, **kwargs)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ISSUER:
            raise Http404("Company sign-in is not configured.")
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider.setting("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except provider.ProviderUnavailable as exc:
            logger.warning("company sign-in: provider unavailable: %s", exc)
            messages.error(
                request, f"{settings.OIDC_PROVIDER_NAME} cannot be reached right now. Try again in a minute."
            )
            return HttpResponseRedirect(login_page(request.GET.get("next", "")))
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        response: HttpResponse = super().get(request)
        return response


class CompanySignInCallback(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    get_settings = staticmethod(provider.setting)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not settings.OIDC_ISSUER:
            raise Http404("Company sign-in is not configured.")
        try:
            response: HttpResponse = super().get(request)
        except (SuspiciousOperation, provider.ProviderUnavailable, requests.RequestException) as exc:
            # A forged or replayed answer, a token failing a check, a provider answering with an error.
            logger.warning("company sign-in refused: %s", exc)
            return self.login_failure()
        return response

    def login_failure(self) -> HttpResponse:
        messages.error(
            self.request,
            f"Signing in with {settings.OIDC_PROVIDER_NAME} did not work. Try again, or ask your administrator.",
        )
        return HttpResponseRedirect(login_page())
