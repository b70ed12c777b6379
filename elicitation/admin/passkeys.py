"""Passkeys in the admin: the WebAuthn credentials each reviewer registered on Preferences (queue/step_up.py). An
operator may look and delete one (a lost laptop); a passkey is only ever registered by its own reviewer's browser,
and its key material is not shown."""

from django.contrib import admin
from django.http import HttpRequest

from elicitation.models import Passkey


@admin.register(Passkey)
class PasskeyAdmin(admin.ModelAdmin[Passkey]):
    list_display = ("user", "name", "created_at", "last_used_at", "sign_count")
    list_filter = ("created_at",)
    search_fields = ("user__username", "name")
    fields = ("user", "name", "created_at", "last_used_at", "sign_count")
    readonly_fields = fields

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Passkey | None = None) -> bool:
        return False
