"""Hosted flows in the admin: status only; the ciphertext and the answers never reach it."""

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from elicitation.admin.read_only import ReadOnlyMixin
from elicitation.models import HostedFlow


@admin.register(HostedFlow)
class HostedFlowAdmin(ReadOnlyMixin, admin.ModelAdmin[HostedFlow]):
    """Status only: the ciphertext, nonce and the flow's answers never reach the admin."""

    list_display = ["short_id", "request_link", "status", "created_at", "submitted_at", "retrieved_at"]
    list_filter = ["status"]
    search_fields = ["id", "request__id"]
    fields = ("id", "request_link", "status", "key_id", "created_at", "submitted_at", "retrieved_at")
    readonly_fields = fields

    def get_queryset(self, request: HttpRequest) -> QuerySet[HostedFlow]:
        return super().get_queryset(request).defer("ciphertext", "nonce")

    @admin.display(description="Flow")
    def short_id(self, obj: HostedFlow) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="Request")
    def request_link(self, obj: HostedFlow) -> SafeString:
        url = reverse("admin:elicitation_elicitationrequest_change", args=[obj.request_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.request_id)[:8])
