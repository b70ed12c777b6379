"""Reviewer pages."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, path

from elicitation.reviewer import views

urlpatterns: list[URLPattern] = [
    path("", views.dashboard, name="dashboard"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("queues/<slug:slug>/", views.queue_page, name="queue"),
    path("queues/<slug:slug>/next", views.claim_next, name="queue-next"),
    path("queues/<slug:slug>/counts", views.queue_counts, name="queue-counts"),
    path("requests/<uuid:request_id>/", views.request_page, name="request"),
]
