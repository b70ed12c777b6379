"""The bench server's URLconf: everything production serves, plus the baselines under /bench/."""

from django.urls import include, path

from bench import views

urlpatterns = [
    path("bench/baseline/requests", views.baseline_insert, name="bench-baseline-insert"),
    path("bench/respond/<uuid:request_id>", views.respond_and_time_commit, name="bench-respond"),
    path("", include("reviewhub.urls")),
]
