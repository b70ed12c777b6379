"""The audit trail in the admin, read-only: the events under a request, and the whole trail with its export (CSV,
JSON Lines) and chain verification."""

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.filters import DateFieldListFilter
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from elicitation.admin.read_only import ReadOnlyMixin
from elicitation.models import ElicitationRequest, RequestEvent
from elicitation.queue import audit


class RequestEventInline(ReadOnlyMixin, admin.TabularInline[RequestEvent, ElicitationRequest]):
    model = RequestEvent
    fields = ("at", "kind", "actor", "from_status", "to_status", "detail")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False
    verbose_name = "audit event"

    def get_queryset(self, request: HttpRequest) -> QuerySet[RequestEvent]:
        return super().get_queryset(request).select_related("actor_user", "actor_agent").order_by("id")

    @admin.display(description="Actor")
    def actor(self, obj: RequestEvent) -> str:
        return event_actor(obj)


def event_actor(event: RequestEvent) -> str:
    if event.actor_user is not None:
        return f"reviewer {event.actor_user.get_username()}"
    if event.actor_agent is not None:
        return f"agent {event.actor_agent.name}"
    return str(event.actor_type)


def _export_response(events: QuerySet[RequestEvent], fmt: str) -> HttpResponse:
    rows = audit.export_rows(events)
    chunks = audit.csv_chunks(rows) if fmt == "csv" else audit.jsonl_chunks(rows)
    content_type = "text/csv; charset=utf-8" if fmt == "csv" else "application/x-ndjson; charset=utf-8"
    response = HttpResponse("".join(chunks), content_type=content_type)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="reviewhub-audit-{stamp}.{fmt}"'
    return response


@admin.register(RequestEvent)
class RequestEventAdmin(ReadOnlyMixin, admin.ModelAdmin[RequestEvent]):
    list_display = ["id", "at", "request_link", "kind", "actor", "transition", "short_hash"]
    list_filter = ["kind", "actor_type", ("at", DateFieldListFilter)]
    search_fields = ["request__id", "kind", "actor_user__username", "actor_agent__name"]
    list_select_related = ["actor_user", "actor_agent"]
    date_hierarchy = "at"
    ordering = ["-id"]  # newest first on screen; exports stay in chain (id) order
    actions = ["export_csv", "export_jsonl"]
    change_list_template = "admin/elicitation/requestevent/change_list.html"
    fields = (
        "id",
        "request_link",
        "at",
        "kind",
        "actor",
        "from_status",
        "to_status",
        "detail",
        "prev_hash",
        "hash",
    )
    readonly_fields = fields

    @admin.display(description="Request", ordering="request_id")
    def request_link(self, obj: RequestEvent) -> SafeString:
        url = reverse("admin:elicitation_elicitationrequest_change", args=[obj.request_id])
        return format_html('<a href="{}">{}</a>', url, str(obj.request_id)[:8])

    @admin.display(description="Actor")
    def actor(self, obj: RequestEvent) -> str:
        return event_actor(obj)

    @admin.display(description="Transition")
    def transition(self, obj: RequestEvent) -> str:
        if obj.from_status == obj.to_status:
            return obj.to_status
        return f"{obj.from_status or '∅'} → {obj.to_status or '∅'}"

    @admin.display(description="Hash")
    def short_hash(self, obj: RequestEvent) -> str:
        return obj.hash[:12]

    @admin.action(description="Export selected as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[RequestEvent]) -> HttpResponse:
        return _export_response(queryset.order_by("id"), "csv")

    @admin.action(description="Export selected as JSON Lines", permissions=["view"])
    def export_jsonl(self, request: HttpRequest, queryset: QuerySet[RequestEvent]) -> HttpResponse:
        return _export_response(queryset.order_by("id"), "jsonl")

    def get_urls(self) -> list[URLPattern]:
        wrap: Callable[..., Any] = self.admin_site.admin_view
        return [
            path(
                "export.csv", wrap(self.export_all_view), {"fmt": "csv"}, name="elicitation_audit_export_csv"
            ),
            path(
                "export.jsonl",
                wrap(self.export_all_view),
                {"fmt": "jsonl"},
                name="elicitation_audit_export_jsonl",
            ),
            path("verify/", wrap(self.verify_view), name="elicitation_audit_verify"),
            *super().get_urls(),
        ]

    def export_all_view(self, request: HttpRequest, fmt: str) -> HttpResponse:
        """Every event matching the changelist's current filters and search (the buttons pass the query on)."""
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        changelist = self.get_changelist_instance(request)
        return _export_response(changelist.get_queryset(request).order_by("id"), fmt)

    def verify_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            return HttpResponse(status=403)
        problems = list(audit.verify_chains())
        if not problems:
            self.message_user(
                request,
                f"Audit chain intact: {RequestEvent.objects.count()} rows verified.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, f"Audit chain broken: {len(problems)} problem(s).", messages.ERROR)
            for problem in problems[:20]:
                self.message_user(request, str(problem), messages.ERROR)
        return HttpResponseRedirect(reverse("admin:elicitation_requestevent_changelist"))
