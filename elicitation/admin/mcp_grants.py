"""MCP OAuth consents in the admin: who let which host act as which agent on which queues, and the off switch.

Revoking a grant stops every token issued from it at the next MCP request (the MCP door checks the grant on each
call) and deletes those tokens and their refresh tokens, so the host must send a person through consent again.
django-oauth-toolkit's own admin (applications, access and refresh tokens) stays registered beside it."""

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import QuerySet
from django.http import HttpRequest
from oauth2_provider.models import get_access_token_model, get_refresh_token_model

from elicitation.models import McpGrant
from elicitation.queue import clock


def revoke_grants(grants: QuerySet[McpGrant], by: object) -> int:
    """Guarded: only grants still live are revoked, so two admins revoking at once count each grant once."""
    with transaction.atomic():
        ids = list(grants.filter(revoked_at__isnull=True).values_list("pk", flat=True))
        count = McpGrant.objects.filter(pk__in=ids, revoked_at__isnull=True).update(
            revoked_at=clock.now(), revoked_by=by
        )
        for grant_id in ids:
            scope = f"grant:{grant_id}"
            get_refresh_token_model().objects.filter(access_token__scope__contains=scope).delete()
            get_access_token_model().objects.filter(scope__contains=scope).delete()
    return count


@admin.register(McpGrant)
class McpGrantAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("client_name", "client_id", "agent", "user", "created_at", "revoked_at")
    list_filter = ("revoked_at",)
    search_fields = ("client_id", "client_name", "agent__name", "user__username")
    readonly_fields = (
        "id",
        "user",
        "agent",
        "queues",
        "client_id",
        "client_name",
        "redirect_uri",
        "resource",
        "created_at",
        "revoked_at",
        "revoked_by",
    )
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # consent is given by a person on the consent page, never typed in here

    def has_delete_permission(self, request: HttpRequest, obj: McpGrant | None = None) -> bool:
        return False  # the row is the audit record; revoke instead

    @admin.action(description="Revoke the selected MCP grants (their tokens stop working at once)")
    def revoke(self, request: HttpRequest, queryset: QuerySet[McpGrant]) -> None:
        count = revoke_grants(queryset, request.user)
        self.message_user(request, f"Revoked {count} grant(s).", messages.SUCCESS)
