"""OAuth 2.1 for ReviewHub's `/mcp/`, as the MCP authorization spec asks of a protected resource and its server.

django-oauth-toolkit is the authorization server (RFC 8414 metadata, authorization code + PKCE S256, client
registration by metadata document or RFC 7591, resource indicators RFC 8707, refresh-token rotation); this module
adds only what is ReviewHub's own:

- the consent page (`McpAuthorizationView`): a signed-in supervisor chooses which agent the MCP host may act as
  and on which of that agent's queues. The choice is an `McpGrant` row (audit record and off switch); every token
  issued from it carries `grant:<id>` in its scope, so refreshed tokens keep it too;
- the resource check: an authorization request must name this server (`settings.MCP_RESOURCE_URL`), and the MCP
  door accepts only tokens bound to it (`principal_for_token`);
- the validator that lets the `grant:<id>` scope through only for the client it was granted to.
"""

import hashlib
import logging
import uuid
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import get_access_token_model, get_application_model
from oauth2_provider.oauth2_validators import OAuth2Validator
from oauth2_provider.views import AuthorizationView, OAuthProtectedResourceMetadataView
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error

from elicitation.models import Agent, McpGrant, Queue
from elicitation.queue import access, clock

logger = logging.getLogger(__name__)

MCP_SCOPE = "mcp"
GRANT_SCOPE_PREFIX = "grant:"


def resource_matches(value: str) -> bool:
    """RFC 8707: the one resource ReviewHub issues tokens for (a trailing slash names the same endpoint)."""
    return value.rstrip("/") == settings.MCP_RESOURCE_URL


def grant_id_in(scopes: list[str]) -> uuid.UUID | None:
    ids = [scope[len(GRANT_SCOPE_PREFIX) :] for scope in scopes if scope.startswith(GRANT_SCOPE_PREFIX)]
    if len(ids) != 1:
        return None
    try:
        return uuid.UUID(ids[0])
    except ValueError:
        return None


# --- who may delegate what ------------------------------------------------------------------------------------------


def delegable_queues(user: Any) -> QuerySet[Queue]:
    """A user may let an MCP host post into the queues they supervise (staff: every queue)."""
    return access.metrics_queues(user)


def delegable_agents(user: Any) -> QuerySet[Agent]:
    """Agents that may post into at least one queue the user supervises; a host acts as one of them."""
    return (
        Agent.objects.filter(revoked_at__isnull=True, queues__in=delegable_queues(user))
        .distinct()
        .order_by("name")
    )


# --- the consent page -------------------------------------------------------------------------------------------------


class ConsentForm(AllowForm):
    """DOT's hidden OAuth fields plus ReviewHub's choice: which agent, which queues."""

    agent = forms.ModelChoiceField(queryset=Agent.objects.none(), required=False, empty_label=None)
    queues = forms.ModelMultipleChoiceField(
        queryset=Queue.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        to_field_name="slug",
    )

    def __init__(self, *args: Any, user: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["agent"].queryset = delegable_agents(user)  # type: ignore[attr-defined]
        self.fields["queues"].queryset = delegable_queues(user).order_by("slug")  # type: ignore[attr-defined]

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
    *, user: Any, agent: Agent, queues: list[Queue], client_id: str, client_name: str, redirect_uri: str
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


def _oauth_error(error: str, description: str, state: str | None, redirect_uri: str) -> OAuthToolkitError:
    return OAuthToolkitError(
        error=CustomOAuth2Error(error=error, description=description, state=state), redirect_uri=redirect_uri
    )


class McpAuthorizationView(AuthorizationView):
    """DOT's authorization endpoint with ReviewHub's consent page and the RFC 8707 resource check."""

    template_name = "oauth/authorize.html"
    form_class = ConsentForm

    def get_form_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = super().get_form_kwargs()
        kwargs["user"] = self.request.user
        return kwargs

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            return self.error_response(error, application=None)  # type: ignore[no-any-return]
        application = get_application_model().objects.get(client_id=credentials["client_id"])
        state, redirect_uri = credentials.get("state"), credentials["redirect_uri"]
        resources = request.GET.getlist("resource")
        if len(resources) != 1 or not resource_matches(resources[0]):
            refusal = _oauth_error(
                "invalid_target",
                f"Tokens are only issued for {settings.MCP_RESOURCE_URL}.",
                state,
                redirect_uri,
            )
            return self.error_response(refusal, application)  # type: ignore[no-any-return]
        if credentials.get("code_challenge_method") != "S256":
            refusal = _oauth_error("invalid_request", "PKCE with S256 is required.", state, redirect_uri)
            return self.error_response(refusal, application)  # type: ignore[no-any-return]
        if set(scopes) - {MCP_SCOPE}:
            refusal = _oauth_error("invalid_scope", f"The only scope is {MCP_SCOPE!r}.", state, redirect_uri)
            return self.error_response(refusal, application)  # type: ignore[no-any-return]
        return super().get(request, *args, **kwargs)  # type: ignore[no-any-return]

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
        return context

    def form_valid(self, form: ConsentForm) -> HttpResponse:  # type: ignore[override]
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
            return self.error_response(error, application)  # type: ignore[no-any-return]
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


class McpProtectedResourceMetadataView(OAuthProtectedResourceMetadataView):
    """RFC 9728 for `/mcp`, served both at the root and at the `/mcp`-suffixed well-known path."""

    def get_resource(self, request: HttpRequest) -> str:
        return str(settings.MCP_RESOURCE_URL)

    def get_scopes_supported(self) -> list[str]:
        return [MCP_SCOPE]


# --- the validator ----------------------------------------------------------------------------------------------------


class ReviewHubOAuth2Validator(OAuth2Validator):
    """DOT's validator; a `grant:<id>` scope is valid only for the client (and user) it was granted to."""

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
