"""Webhook deliveries in the admin: their health (never their payload) and a replay action."""

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from elicitation.admin.read_only import ReadOnlyMixin
from elicitation.delivery import tasks
from elicitation.models import WebhookDelivery


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyMixin, admin.ModelAdmin[WebhookDelivery]):
    list_display = [
        "short_id",
        "agent",
        "event_kind",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "created_at",
        "delivered_at",
    ]
    list_filter = ["status", "event__agent"]
    search_fields = ["id", "url", "event__agent__name"]
    list_select_related = ["event__agent"]
    actions = ["replay"]
    # The payload (the agent's result) is not shown: operators need the delivery's health, not its content.
    fields = (
        "id",
        "agent",
        "event_kind",
        "url",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "created_at",
        "delivered_at",
    )
    readonly_fields = fields

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("elicitation.change_webhookdelivery")

    @admin.display(description="Delivery")
    def short_id(self, obj: WebhookDelivery) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="Agent", ordering="event__agent__name")
    def agent(self, obj: WebhookDelivery) -> str:
        return obj.event.agent.name

    @admin.display(description="Event")
    def event_kind(self, obj: WebhookDelivery) -> str:
        return f"{obj.event.kind} #{obj.event.seq}"

    @admin.action(description="Replay (send again from the first attempt)", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = 0
        for delivery in queryset:
            tasks.replay(delivery)
            count += 1
        self.message_user(request, f"Queued {count} delivery(ies) again.", messages.SUCCESS)
