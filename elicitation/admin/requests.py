"""Elicitation requests in the admin, read-only apart from two transitions (expire now, release a claim). Answers
collected by a hosted flow are never shown, and opening a request is written to the audit."""

import json
from collections.abc import Callable
from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.filters import DateFieldListFilter
from django.contrib.auth.models import User
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from elicitation.admin.audit_events import RequestEventInline
from elicitation.admin.read_only import ReadOnlyMixin
from elicitation.models import ElicitationRequest
from elicitation.queue import audit, transitions
from elicitation.queue.errors import InvalidTransition, NotFoundError

HIDDEN = "(hidden: collected by a hosted flow)"


@admin.register(ElicitationRequest)
class ElicitationRequestAdmin(ReadOnlyMixin, admin.ModelAdmin[ElicitationRequest]):
    list_display = ["excerpt", "queue", "agent", "status", "action", "priority", "age", "claimed_by"]
    list_display_links = ["excerpt"]
    list_filter = ["status", "queue", "agent", ("created_at", DateFieldListFilter), "action", "mode"]
    search_fields = ["id", "message", "agent__name", "idempotency_key", "elicitation_id"]
    date_hierarchy = "created_at"
    ordering = ["-created_at"]
    list_select_related = ["queue", "agent", "claimed_by"]
    actions = ["expire_now", "release_claims"]
    inlines = [RequestEventInline]
    fieldsets = [
        (None, {"fields": ["id", "queue", "agent", "status", "priority", "mode", "hosted_flow_status"]}),
        (
            "Request",
            {
                "fields": [
                    "message",
                    "context",
                    "url",
                    "elicitation_id",
                    "questions_table",
                    "requested_schema",
                ]
            },
        ),
        (
            "Lifecycle",
            {
                "fields": [
                    "created_at",
                    "deadline",
                    "claimed_by",
                    "claimed_at",
                    "lease_expires_at",
                    "first_claimed_at",
                    "closed_at",
                    "url_flow_completed_at",
                ]
            },
        ),
        ("Result", {"fields": ["action", "answer_table", "answered_by"]}),
        ("Delivery", {"fields": ["callback_url", "idempotency_key"]}),
    ]
    readonly_fields = [
        "id",
        "queue",
        "agent",
        "status",
        "priority",
        "mode",
        "hosted_flow_status",
        "message",
        "context",
        "url",
        "elicitation_id",
        "questions",
        "questions_table",
        "answer_table",
        "requested_schema",
        "created_at",
        "deadline",
        "claimed_by",
        "claimed_at",
        "lease_expires_at",
        "first_claimed_at",
        "closed_at",
        "url_flow_completed_at",
        "action",
        "answer",
        "answered_by",
        "callback_url",
        "idempotency_key",
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[ElicitationRequest]:
        # `content` is deferred: it is only ever read through `answer`, which checks for a hosted flow first.
        return super().get_queryset(request).select_related("hosted_flow").defer("content")

    def has_expire_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("elicitation.change_elicitationrequest")

    has_release_permission = has_expire_permission

    @admin.display(description="Request", ordering="created_at")
    def short_id(self, obj: ElicitationRequest) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="Hosted flow")
    def hosted_flow_status(self, obj: ElicitationRequest) -> str:
        flow = getattr(obj, "hosted_flow", None)
        return str(flow.status) if flow is not None else "-"

    @admin.display(description="Message", ordering="message")
    def excerpt(self, obj: ElicitationRequest) -> str:
        text = " ".join(obj.message.split())
        return text if len(text) <= 80 else text[:79] + "…"

    @admin.display(description="Age", ordering="created_at")
    def age(self, obj: ElicitationRequest) -> str:
        return timesince(obj.created_at, timezone.now())

    @admin.display(description="Questions")
    def questions_table(self, obj: ElicitationRequest) -> SafeString | str:
        rows = [
            (q.get("id", ""), q.get("title") or "", q.get("kind", ""), "yes" if q.get("required") else "no")
            for q in (obj.questions or [])
            if isinstance(q, dict)
        ]
        if not rows:
            return "-"
        body = format_html_join(
            "", "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>", rows
        )
        return format_html(
            '<table class="readable-table"><thead><tr><th>Id</th><th>Title</th><th>Kind</th><th>Required</th>'
            "</tr></thead><tbody>{}</tbody></table>",
            body,
        )

    @admin.display(description="Content sent")
    def answer_table(self, obj: ElicitationRequest) -> SafeString | str:
        content = self.answer(obj)
        if not isinstance(content, dict):
            return str(content)
        titles = {
            q.get("id"): q.get("title") or q.get("id") for q in (obj.questions or []) if isinstance(q, dict)
        }
        rows = [
            (titles.get(key, key), key, json.dumps(value, ensure_ascii=False))
            for key, value in content.items()
        ]
        if not rows:
            return "(accepted with no content)"
        body = format_html_join("", "<tr><td>{}</td><td><code>{}</code></td><td>{}</td></tr>", rows)
        return format_html(
            '<table class="readable-table"><thead><tr><th>Question</th><th>Id</th><th>Answer</th></tr></thead>'
            "<tbody>{}</tbody></table>",
            body,
        )

    @admin.display(description="Content")
    def answer(self, obj: ElicitationRequest) -> Any:
        if getattr(obj, "hosted_flow", None) is not None:
            return HIDDEN
        content = ElicitationRequest.objects.filter(pk=obj.pk).values_list("content", flat=True).first()
        return content if content is not None else "-"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        response = super().change_view(request, object_id, form_url, extra_context)
        if request.method == "GET" and response.status_code == 200:
            # An operator reading a request is a sensitive view like a reviewer's: it goes in the audit.
            viewed = ElicitationRequest.objects.filter(pk=object_id).first()
            if viewed is not None:
                # The admin site lets only active staff in: the user is an account.
                audit.record_view(viewed, user=cast(User, request.user))
        return response

    @admin.action(description="Expire now (apply the queue's expiry outcome)", permissions=["expire"])
    def expire_now(self, request: HttpRequest, queryset: QuerySet[ElicitationRequest]) -> None:
        self._each(
            request,
            queryset,
            lambda pk: transitions.expire_request(pk, actor_user=cast(User, request.user)),
            "expired or escalated",
        )

    @admin.action(description="Release claim (back to the queue)", permissions=["release"])
    def release_claims(self, request: HttpRequest, queryset: QuerySet[ElicitationRequest]) -> None:
        self._each(
            request,
            queryset,
            lambda pk: transitions.release_claim_as_operator(pk, operator=request.user),
            "released",
        )

    def _each(
        self,
        request: HttpRequest,
        queryset: QuerySet[ElicitationRequest],
        transition: Callable[[Any], Any],
        verb: str,
    ) -> None:
        """One transition per selected request; those no longer in a state that allows it are counted, not fatal."""
        done, skipped = 0, 0
        for request_id in queryset.values_list("pk", flat=True):
            try:
                transition(request_id)
                done += 1
            except (InvalidTransition, NotFoundError):
                skipped += 1
        self._report(request, done, skipped, verb)

    def _report(self, request: HttpRequest, done: int, skipped: int, verb: str) -> None:
        if done:
            self.message_user(request, f"{done} request(s) {verb}.", messages.SUCCESS)
        if skipped:
            self.message_user(
                request, f"{skipped} request(s) skipped: not in a state that allows it.", messages.WARNING
            )
