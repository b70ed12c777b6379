"""OAuth 2.1 for ReviewHub's `/mcp/`, as the MCP authorization spec asks of a protected resource and its server.

django-oauth-toolkit is the authorization server (RFC 8414 metadata, authorization code + PKCE S256, client
registration by metadata document or RFC 7591, resource indicators RFC 8707, refresh-token rotation); this module
adds only what is ReviewHub's own:

- the consent page (`McpAuthorizationView`): a signed-in supervisor chooses which agent the MCP host may act as
  and on which of that agent's queues. The choice is an `McpGrant` row (audit record and off switch); every token
  issued from it carries `grant:<id>` in its scope, so refreshed tokens keep it too;
- the resource check: an authorization request must name this server (`settings.MCP_RESOURCE_URL`), and the MCP
  door accepts only tokens bound to it (`principal_for_token`);
- the validator that lets the `grant:<id>` scope through only for the client it was granted to, and that treats a
  second use of an authorization code as the theft it signals (RFC 6749 §4.1.2): refused, and the consent the code
  carried revoked with every token issued from it;
- RFC 9700 §4.11.2: only clients an operator created (in the admin) get errors redirected to them. Anyone can
  register a client, so anyone could otherwise use ReviewHub as an open redirector (a link with a foreign
  `resource` or a bad scope, bounced to the attacker's registered URI); their errors are ReviewHub's own page.

Client registration, its rate and its cost, is `oauth_registration.py`.
"""

import hashlib
import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from django import forms
from django.conf import settings
from django.contrib.auth.models import AnonymousUser, User
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import (
    get_access_token_model,
    get_application_model,
    get_grant_model,
    get_refresh_token_model,
)
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.settings import oauth2_settings
from oauth2_provider.views import AuthorizationView, OAuthProtectedResourceMetadataView
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error, InvalidGrantError

from elicitation.models import Agent, McpGrant, Queue
from elicitation.queue import access, clock

logger = logging.getLogger(__name__)

MCP_SCOPE = "mcp"
GRANT_SCOPE_PREFIX = "grant:"


def resource_matches(value: str) -> bool:
    """RFC 8707: the one resource ReviewHub issues tokens for (a trailing slash names the same endpoint)."""
    return value.rstrip("/") == settings.MCP_RESOURCE_URL


def errors_redirect_to(application: Any) -> bool:
    """Whether an authorization error may be sent to the client's redirect URI (RFC 6749 §4.1.2.1) rather than shown
    on ReviewHub's page: only for a client an operator created. One registered by anyone (RFC 7591 or a metadata
    document) is not trusted with automatic redirects (RFC 9700 §4.11.2); nor is a client ReviewHub cannot name."""
    return registered_by_operator(application)


def registered_by_operator(application: Any) -> bool:
    """Whether an operator created the client; any other (RFC 7591, a metadata document) chose its own name."""
    return (
        application is not None and application.registration_source == application.RegistrationSource.MANUAL
    )


def grant_id_in(scopes: list[str]) -> uuid.UUID | None:
    ids = [scope[len(GRANT_SCOPE_PREFIX) :] for scope in scopes if scope.startswith(GRANT_SCOPE_PREFIX)]
    if len(ids) != 1:
        return None
    try:
        return uuid.UUID(ids[0])
    except ValueError:
        return None


# --- who may delegate what ------------------------------------------------------------------------------------------


def delegable_queues(user: User | AnonymousUser | None) -> QuerySet[Queue]:
    """A user may let an MCP host post into the queues they supervise (staff: every queue)."""
    return access.metrics_queues(user)


def delegable_agents(user: User | AnonymousUser | None) -> QuerySet[Agent]:
    """Agents that may post into at least one queue the user supervises; a host acts as one of them."""
    return (
        Agent.objects.filter(revoked_at__isnull=True, queues__in=delegable_queues(user))
        .distinct()
        .order_by("name")
    )


# --- the consent page -------------------------------------------------------------------------------------------------


class ConsentForm(AllowForm):  # type: ignore[misc]
    """DOT's hidden OAuth fields plus ReviewHub's choice: which agent, which queues."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), required=False, empty_label=None)
    queues = forms.ModelMultipleChoiceField(
        queryset=Queue.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        to_field_name="slug",
    )

    def __init__(self, *args: Any, user: User | AnonymousUser | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["agent"].queryset = delegable_agents(user)
        self.fields["queues"].queryset = delegable_queues(user).order_by("slug")

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("allow"):
            return data
        agent: Agent | None = data.get("agent")
        queues: list[Queue] = list(data.get("queues") or [])
        if agent is None:
            self.add_error("agent", "Choose the agent this host acts as.")
            return data
        if not queues:
            self.add_error("queues", "Choose at least one queue.")
            return data
        allowed = set(agent.queues.values_list("slug", flat=True))
        outside = sorted(queue.slug for queue in queues if queue.slug not in allowed)
        if outside:
            self.add_error("queues", f"{agent.name} may not post to {', '.join(outside)}.")
        return data


def record_consent(
    *, user: User, agent: Agent, queues: list[Queue], client_id: str, client_name: str, redirect_uri: str
) -> McpGrant:
    """The consent row every token of this authorization names."""
    with transaction.atomic():
        grant = McpGrant.objects.create(
            user=user,
            agent=agent,
            client_id=client_id,
            client_name=client_name[:255],
            redirect_uri=redirect_uri,
            resource=settings.MCP_RESOURCE_URL,
            created_at=clock.now(),
        )
        grant.queues.set(queues)
    logger.info(
        "MCP OAuth consent %s: user %s let client %r act as agent %s on %s",
        grant.pk,
        user.pk,
        client_id,
        agent.pk,
        ",".join(sorted(queue.slug for queue in queues)),
    )
    return grant


# What the page says for errors oauthlib raises without a description.
UNDESCRIBED_ERRORS = {
    "invalid_scope": f"The scope parameter may only be {MCP_SCOPE!r}.",
    "login_required": "Sign in to ReviewHub, then connect the MCP host again.",
}


def _oauth_error(error: str, description: str, state: str | None, redirect_uri: str) -> OAuthToolkitError:
    return OAuthToolkitError(
        error=CustomOAuth2Error(error=error, description=description, state=state), redirect_uri=redirect_uri
    )


class McpAuthorizationView(AuthorizationView):  # type: ignore[misc]
    """DOT's authorization endpoint with ReviewHub's consent page, the RFC 8707 resource check, and errors shown
    here rather than redirected unless the client is trusted (`errors_redirect_to`)."""

    template_name = "oauth/authorize.html"
    form_class = ConsentForm

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_form_kwargs()
        kwargs["user"] = self.request.user
        return kwargs

    def get_initial(self) -> dict[str, Any]:
        initial: dict[str, Any] = super().get_initial()
        # A person who supervises one queue can only mean that one: it starts checked.
        sole = list(delegable_queues(self.request.user).values_list("slug", flat=True)[:2])
        if len(sole) == 1:
            initial["queues"] = sole
        return initial

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            return self.error_response(error, application=None)
        application = get_application_model().objects.get(client_id=credentials["client_id"])
        state, redirect_uri = credentials.get("state"), credentials["redirect_uri"]
        resources = request.GET.getlist("resource")
        if len(resources) != 1 or not resource_matches(resources[0]):
            refusal = _oauth_error(
                "invalid_target",
                f"The resource parameter must be {settings.MCP_RESOURCE_URL}: "
                "ReviewHub issues tokens for its own MCP endpoint only.",
                state,
                redirect_uri,
            )
            return self.error_response(refusal, application)
        if credentials.get("code_challenge_method") != "S256":
            refusal = _oauth_error("invalid_request", "PKCE with S256 is required.", state, redirect_uri)
            return self.error_response(refusal, application)
        if set(scopes) - {MCP_SCOPE}:
            refusal = _oauth_error(
                "invalid_scope", f"The scope parameter may only be {MCP_SCOPE!r}.", state, redirect_uri
            )
            return self.error_response(refusal, application)
        return super().get(request, *args, **kwargs)  # type: ignore[no-any-return]

    def error_response(self, error: OAuthToolkitError, application: Any, **kwargs: Any) -> HttpResponse:
        # DOT passes no application for an error found while validating the request; the error still names the
        # client, and a trusted one keeps its redirect.
        client_id = getattr(error.oauthlib_error, "client_id", None)
        if application is None and client_id:
            application = get_application_model().objects.filter(client_id=client_id).first()
        return super().error_response(error, application, **kwargs)  # type: ignore[no-any-return]

    def redirect(self, redirect_to: str, application: Any) -> HttpResponse:
        """Every answer DOT sends back to a client passes here: a code, a refusal, a declined consent, `prompt=none`
        while signed out. One carrying an error goes to an untrusted client only if the person chooses to."""
        outcome = dict(parse_qsl(urlsplit(redirect_to).query))
        if "error" not in outcome or errors_redirect_to(application):
            return super().redirect(redirect_to, application)  # type: ignore[no-any-return]
        if outcome["error"] == "access_denied":
            # The person said no: ReviewHub tells them nothing was granted, and the host hears of it only if they
            # follow the link (RFC 9700 §4.11.2: inform the user and rely on them to decide).
            return self.render_to_response(
                {"declined": True, "return_url": redirect_to, "return_to": urlsplit(redirect_to).netloc}
            )
        description = outcome.get("error_description") or UNDESCRIBED_ERRORS.get(outcome["error"], "")
        return self.render_to_response(
            {"error": {"error": outcome["error"], "description": description}}, status=400
        )

    def render_to_response(self, context: dict[str, Any], **kwargs: Any) -> HttpResponse:
        response: HttpResponse = super().render_to_response(context, **kwargs)
        # The consent form's POST answers with a redirect to the host's registered redirect URI; CSP's
        # form-action covers redirects after a submission, so that one origin is allowed on this page only.
        form = context.get("form")
        redirect_uri = context.get("redirect_uri") or (
            form["redirect_uri"].value() if form is not None else ""
        )
        parts = urlsplit(str(redirect_uri or ""))
        if parts.scheme in ("http", "https") and parts.netloc:
            response._csp_update = {"form-action": [f"{parts.scheme}://{parts.netloc}"]}  # type: ignore[attr-defined]
        return response

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        user = self.request.user
        agents = list(delegable_agents(user).prefetch_related("queues"))
        mine = set(delegable_queues(user).values_list("slug", flat=True))
        context["agent_choices"] = [
            {"agent": agent, "queues": sorted(q.slug for q in agent.queues.all() if q.slug in mine)}
            for agent in agents
        ]
        context["resource_url"] = settings.MCP_RESOURCE_URL
        form = context.get("form")
        if "application" not in context and form is not None:  # a refused POST: the form names the client
            client_id = form["client_id"].value()
            context["application"] = get_application_model().objects.filter(client_id=client_id).first()
        context["client_verified"] = registered_by_operator(context.get("application"))
        return context

    def form_valid(self, form: ConsentForm) -> HttpResponse:
        data = form.cleaned_data
        resources = (data.get("resource") or "").split()
        if (
            len(resources) != 1
            or not resource_matches(resources[0])
            or data.get("code_challenge_method") != "S256"
        ):
            application = get_application_model().objects.get(client_id=data["client_id"])
            error = _oauth_error(
                "invalid_request",
                f"Tokens are only issued for {settings.MCP_RESOURCE_URL}, with PKCE S256.",
                data.get("state"),
                data["redirect_uri"],
            )
            return self.error_response(error, application)
        if data.get("allow"):
            application = get_application_model().objects.filter(client_id=data["client_id"]).first()
            grant = record_consent(
                user=self.request.user,
                agent=data["agent"],
                queues=list(data["queues"]),
                client_id=data["client_id"],
                client_name=getattr(application, "name", "") or "",
                redirect_uri=data["redirect_uri"],
            )
            data["scope"] = f"{MCP_SCOPE} {GRANT_SCOPE_PREFIX}{grant.pk}"
        else:
            data["scope"] = MCP_SCOPE
        return super().form_valid(form)  # type: ignore[no-any-return]


class McpProtectedResourceMetadataView(OAuthProtectedResourceMetadataView):  # type: ignore[misc]
    """RFC 9728 for `/mcp`, served both at the root and at the `/mcp`-suffixed well-known path."""

    def get_resource(self, request: HttpRequest) -> str:
        return str(settings.MCP_RESOURCE_URL)

    def get_scopes_supported(self) -> list[str]:
        return [MCP_SCOPE]


# --- the validator ----------------------------------------------------------------------------------------------------


REDEEMED_CODE_PREFIX = "redeemed:"


class CodeUsedTwice(InvalidGrantError):  # type: ignore[misc]
    """`invalid_grant` for the exchange that lost a race for one code. It is raised after the token endpoint's own
    validation, where oauthlib adds no headers of its own, so it names its JSON body and forbids caching itself."""

    description = "This authorization code was used twice; the tokens issued from it are revoked."

    @property
    def headers(self) -> dict[str, str]:
        return {"Content-Type": "application/json", "Cache-Control": "no-store", "Pragma": "no-cache"}


def redeemed_code(code: str) -> str:
    """What the row of a redeemed authorization code holds instead of the code: its checksum."""
    return REDEEMED_CODE_PREFIX + hashlib.sha256(code.encode()).hexdigest()


def revoke_consent_of_replayed_code(scopes: list[str], client_id: str) -> None:
    """A code used twice was seen by someone else (RFC 6749 §4.1.2): its consent is revoked and every token issued
    from it deleted, refresh tokens included. The consent is the code's own (one per allowed authorization), so
    nothing else the host holds is touched; the person consents again."""
    grant_id = grant_id_in(scopes)
    if grant_id is None:  # a code without a consent gives tokens the MCP door refuses anyway
        return
    scope = f"{GRANT_SCOPE_PREFIX}{grant_id}"
    with transaction.atomic():
        McpGrant.objects.filter(pk=grant_id, revoked_at__isnull=True).update(revoked_at=clock.now())
        get_refresh_token_model().objects.filter(access_token__scope__contains=scope).delete()
        get_access_token_model().objects.filter(scope__contains=scope).delete()
    logger.warning(
        "MCP OAuth: an authorization code of client %r was used twice; consent %s and its tokens revoked",
        client_id,
        grant_id,
    )


class ReviewHubOAuth2Validator(OAuth2Validator):  # type: ignore[misc]
    """DOT's validator; a `grant:<id>` scope is valid only for the client (and user) it was granted to, and an
    authorization code used a second time revokes what the first use was given.

    DOT deletes a code's row when it is redeemed, so a replay looks like any unknown code and the tokens from the
    first use live on. Here the row stays, its code replaced by the code's checksum (the code itself is not kept),
    for as long as a refresh token from it may live: a second use finds it and revokes."""

    def validate_code(
        self, client_id: str, code: str, client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        if super().validate_code(client_id, code, client, request, *args, **kwargs):
            return True
        redeemed = get_grant_model().objects.filter(code=redeemed_code(code), application=client).first()
        if redeemed is not None:
            revoke_consent_of_replayed_code(str(redeemed.scope).split(), str(client.client_id))
        return False

    def invalidate_authorization_code(
        self, client_id: str, code: str, request: Any, *args: Any, **kwargs: Any
    ) -> None:
        remembered_until = clock.now() + timedelta(seconds=oauth2_settings.REFRESH_TOKEN_EXPIRE_SECONDS)
        # Compare-and-set on the code: of two exchanges that both passed validate_code, one rewrites the row.
        redeemed = (
            get_grant_model()
            .objects.filter(code=code, application=request.client)
            .update(code=redeemed_code(code), expires=remembered_until)
        )
        if not redeemed:
            # The other exchange won; both were uses of one code, and this one's tokens are already saved.
            revoke_consent_of_replayed_code(list(request.scopes or []), str(request.client.client_id))
            raise CodeUsedTwice(request=request)

    def validate_scopes(
        self, client_id: str, scopes: list[str], client: Any, request: Any, *args: Any, **kwargs: Any
    ) -> bool:
        plain = [scope for scope in scopes if not scope.startswith(GRANT_SCOPE_PREFIX)]
        if len(plain) != len(scopes):
            grant_id = grant_id_in(scopes)
            if grant_id is None:
                return False
            grants = McpGrant.objects.filter(pk=grant_id, client_id=client_id, revoked_at__isnull=True)
            user = getattr(request, "user", None)
            if user is not None and getattr(user, "pk", None) is not None:
                grants = grants.filter(user=user)
            if not grants.exists():
                return False
        return bool(super().validate_scopes(client_id, plain, client, request, *args, **kwargs))


# --- the MCP door: who an OAuth token speaks for ---------------------------------------------------------------------


@dataclass(frozen=True)
class OAuthPrincipal:
    agent_id: int
    queues: frozenset[str]
    capabilities: tuple[str, ...]
    grant_id: uuid.UUID
    expires_at: int | None


def principal_for_token(token: str) -> OAuthPrincipal | None:
    """The agent and queues an access token may use at `/mcp/`, or None: unknown, expired, issued for another
    resource (RFC 8707 audience), from a revoked consent, or for a revoked agent."""
    checksum = hashlib.sha256(token.encode()).hexdigest()
    row = get_access_token_model().objects.filter(token_checksum=checksum).first()
    if row is None or row.is_expired():
        return None
    if not row.resource or not all(resource_matches(str(value)) for value in row.resource):
        return None
    grant_id = grant_id_in(str(row.scope).split())
    if grant_id is None:
        return None
    grant = (
        McpGrant.objects.select_related("agent")
        .filter(pk=grant_id, revoked_at__isnull=True, agent__revoked_at__isnull=True)
        .first()
    )
    if grant is None or grant.user_id != row.user_id:
        return None
    agent_queues = set(grant.agent.queues.values_list("slug", flat=True))
    granted = set(grant.queues.values_list("slug", flat=True)) & agent_queues
    return OAuthPrincipal(
        agent_id=grant.agent_id,
        queues=frozenset(granted),
        capabilities=tuple(str(scope) for scope in (grant.agent.scopes or [])),
        grant_id=grant.pk,
        expires_at=int(row.expires.timestamp()) if row.expires else None,
    )


__all__ = [
    "McpAuthorizationView",
    "McpProtectedResourceMetadataView",
    "OAuthPrincipal",
    "ReviewHubOAuth2Validator",
    "principal_for_token",
]
