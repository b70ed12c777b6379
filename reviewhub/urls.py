from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from elicitation.api.receipt_keys import receipt_jwks
from elicitation.ops import dashboard, health
from elicitation.reviewer import flow_pages
from elicitation.reviewer.company_sign_in import views as company_sign_in

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("elicitation.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("healthz", health.healthz, name="healthz"),
    path(".well-known/reviewhub-receipts.json", receipt_jwks, name="receipt-jwks"),
    path("flows/<uuid:flow_id>/", flow_pages.flow_page, name="flow-page"),
    path("dashboard/", dashboard.dashboard, name="metrics-dashboard"),
    path("metrics", dashboard.prometheus, name="metrics"),
    path("", include("elicitation.mcp.oauth_urls")),  # OAuth 2.1 for /mcp/: metadata, authorize, token
    # The sign-in page (passwords and/or the company's OpenID Connect provider) stands in for the plain LoginView of
    # the reviewer pages below: the first match wins. The provider's two legs answer 404 while OIDC_ISSUER is unset.
    path("accounts/login/", company_sign_in.SignInView.as_view(), name="login"),
    path("oidc/authenticate/", company_sign_in.CompanySignInStart.as_view(), name="oidc_authentication_init"),
    path(
        "oidc/callback/", company_sign_in.CompanySignInCallback.as_view(), name="oidc_authentication_callback"
    ),
    path("", include("elicitation.reviewer.urls")),
]

# JSON for /api/ paths (an API id that is not a UUID matches no route), Django's pages elsewhere.
handler404 = "elicitation.api.errors.not_found"
handler500 = "elicitation.api.errors.server_error"
