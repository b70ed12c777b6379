"""Web Push in the admin: the browsers each reviewer subscribed (delivery/web_push.py). An operator may look and
delete one (a lost phone); a subscription is only ever made by its own browser, and its keys are not shown."""

from django.contrib import admin
from django.http import HttpRequest

from elicitation.models import PushSubscription


@admin.register(PushSubscription)
class PushSubscriptionAdmin(admin.ModelAdmin[PushSubscription]):
    list_display = ("user", "label", "push_service", "created_at", "last_used_at")
    list_filter = ("created_at",)
    search_fields = ("user__username", "label")
    fields = ("user", "label", "push_service", "created_at", "last_used_at")
    readonly_fields = fields

    @admin.display(description="Push service")
    def push_service(self, obj: PushSubscription) -> str:
        # The host only: the endpoint's path is the capability to push to this browser.
        return obj.endpoint.split("/")[2] if obj.endpoint.count("/") >= 2 else ""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PushSubscription | None = None) -> bool:
        return False
