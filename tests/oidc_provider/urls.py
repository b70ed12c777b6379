from django.contrib.auth.views import LoginView
from django.urls import include, path

urlpatterns = [
    # Issuer http://127.0.0.1:<port>/o; discovery at /o/.well-known/openid-configuration.
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
    path("accounts/login/", LoginView.as_view(template_name="provider/login.html"), name="login"),
]
