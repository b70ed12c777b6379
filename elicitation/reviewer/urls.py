"""Reviewer pages."""

from django.contrib.auth import views as auth_views
from django.urls import URLPattern, path

from elicitation.reviewer import decisions, notifications, passkeys, preferences, push_views, undo, views

urlpatterns: list[URLPattern] = [
    path("", views.dashboard, name="dashboard"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("history/", views.history_page, name="history"),
    path("queues/<slug:slug>/", views.queue_page, name="queue"),
    path("queues/<slug:slug>/next", views.claim_next, name="queue-next"),
    path("queues/<slug:slug>/counts", views.queue_counts, name="queue-counts"),
    path("queues/<slug:slug>/rows/<uuid:request_id>", views.queue_row, name="queue-row"),
    path("requests/<uuid:request_id>/", views.request_page, name="request"),
    path("requests/<uuid:request_id>/leave", views.leave_request, name="request-leave"),
    path("requests/<uuid:request_id>/undo", undo.undo_answer, name="request-undo"),
    path("requests/<uuid:request_id>/decision", decisions.decision_json, name="request-decision"),
    path("requests/<uuid:request_id>/remember", decisions.remember_page, name="request-remember"),
    path("queues/<slug:slug>/remembered", decisions.remembered_list, name="remembered"),
    path(
        "queues/<slug:slug>/remembered/<int:rule_id>/revoke",
        decisions.revoke_remembered,
        name="remembered-revoke",
    ),
    path("preferences/", preferences.preferences_page, name="preferences"),
    path("requests/<uuid:request_id>/step-up", passkeys.step_up_options, name="request-step-up"),
    path("passkeys/options", passkeys.registration_options, name="passkey-options"),
    path("passkeys/register", passkeys.register, name="passkey-register"),
    path("passkeys/<int:passkey_id>/remove", passkeys.remove, name="passkey-remove"),
    path("service-worker.js", push_views.service_worker, name="service-worker"),
    path("push/subscriptions", push_views.subscriptions, name="push-subscriptions"),
    path("push/subscriptions/remove", push_views.unsubscribe, name="push-unsubscribe-endpoint"),
    path("push/subscriptions/<int:subscription_id>/remove", push_views.unsubscribe, name="push-unsubscribe"),
    path("requests/<uuid:request_id>/push-answer", push_views.answer, name="push-answer"),
    path("reach/waiting", notifications.waiting, name="reach-waiting"),
    path("reach/shown/<uuid:request_id>", notifications.shown, name="reach-shown"),
]
