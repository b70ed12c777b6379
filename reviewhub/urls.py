from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView

from elicitation.ops import dashboard, health
from elicitation.reviewer import flow_pages

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("elicitation.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("healthz", health.healthz, name="healthz"),
    path("flows/<uuid:flow_id>/", flow_pages.flow_page, name="flow-page"),
    path("dashboard/", dashboard.dashboard, name="metrics-dashboard"),
    path("metrics", dashboard.prometheus, name="metrics"),
    path("", include("elicitation.mcp.oauth_urls")),  # OAuth 2.1 for /mcp/: metadata, authorize, token
    path("", include("elicitation.reviewer.urls")),
]

# JSON for /api/ paths (an API id that is not a UUID matches no route), Django's pages elsewhere.
handler404 = "elicitation.api.errors.not_found"
handler500 = "elicitation.api.errors.server_error"
