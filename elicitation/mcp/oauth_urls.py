"""The authorization server's routes, under DOT's `oauth2_provider` namespace (its views reverse those names).

Metadata lives at the origin's root (RFC 8414, RFC 9728, also in the `/mcp` path-suffixed form); the endpoints
under `/oauth/`. Registration is DOT's, behind a rate per client address (`oauth_registration.py`)."""

from django.urls import path
from oauth2_provider import views as dot

from elicitation.mcp.oauth import McpAuthorizationView, McpProtectedResourceMetadataView
from elicitation.mcp.oauth_registration import McpClientRegistrationView

app_name = "oauth2_provider"

urlpatterns = [
    path(
        ".well-known/oauth-authorization-server",
        dot.OAuthServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource",
        McpProtectedResourceMetadataView.as_view(),
        name="oauth-resource-metadata",
    ),
    path(
        ".well-known/oauth-protected-resource/mcp",
        McpProtectedResourceMetadataView.as_view(),
        name="oauth-resource-metadata-mcp",
    ),
    path("oauth/authorize/", McpAuthorizationView.as_view(), name="authorize"),
    path("oauth/token/", dot.TokenView.as_view(), name="token"),
    path("oauth/revoke/", dot.RevokeTokenView.as_view(), name="revoke-token"),
    path("oauth/register/", McpClientRegistrationView.as_view(), name="dcr-register"),
    path(
        "oauth/register/<str:client_id>/",
        dot.DynamicClientRegistrationManagementView.as_view(),
        name="dcr-register-management",
    ),
]
