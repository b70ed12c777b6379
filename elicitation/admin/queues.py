"""Queues in the admin: people, deadlines, claim leases, what happens on expiry, and notifications."""

from collections.abc import Sequence
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest

from elicitation.models import OPEN_STATUSES, ExpiryOutcome, Queue


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


class QueueForm(forms.ModelForm[Queue]):
    class Meta:
        model = Queue
        fields = [
            "slug",
            "name",
            "members",
            "supervisors",
            "default_deadline_seconds",
            "lease_seconds",
            "expiry_outcome",
            "escalation_queue",
            "priority_threshold",
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or self.cleaned_data
        target = data.get("escalation_queue")
        if data.get("expiry_outcome") == ExpiryOutcome.ESCALATE and target is None:
            self.add_error("escalation_queue", "Choose the queue overdue requests escalate to.")
        if target is not None and self.instance.pk is not None and target.pk == self.instance.pk:
            self.add_error("escalation_queue", "A queue cannot escalate to itself.")
        return data


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    form = QueueForm
    list_display = [
        "slug",
        "name",
        "deadline",
        "lease",
        "on_expiry",
        "priority_threshold",
        "member_count",
        "open_count",
    ]
    search_fields = ["slug", "name"]
    list_filter = ["expiry_outcome"]
    filter_horizontal = ["members", "supervisors"]
    prepopulated_fields = {"slug": ["name"]}
    fieldsets = [
        (None, {"fields": ["slug", "name"]}),
        ("People", {"fields": ["members", "supervisors"]}),
        (
            "Deadlines and claims",
            {
                "fields": ["default_deadline_seconds", "lease_seconds", "expiry_outcome", "escalation_queue"],
                "description": "When a request's deadline passes it is cancelled or declined for the agent, or "
                "escalated to another queue with that queue's default deadline. A claim whose lease is not "
                "renewed returns to the queue.",
            },
        ),
        (
            "Notifications",
            {
                "fields": ["priority_threshold"],
                "description": "Members with an email address get one digest per minute at most: requests at or "
                "above this priority, and unclaimed requests close to their deadline.",
            },
        ),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return (
            super()
            .get_queryset(request)
            .select_related("escalation_queue")
            .annotate(
                member_total=Count("members", distinct=True),
                open_total=Count("requests", filter=Q(requests__status__in=OPEN_STATUSES), distinct=True),
            )
        )

    @admin.display(description="Deadline", ordering="default_deadline_seconds")
    def deadline(self, obj: Queue) -> str:
        return _duration(obj.default_deadline_seconds)

    @admin.display(description="Lease", ordering="lease_seconds")
    def lease(self, obj: Queue) -> str:
        return _duration(obj.lease_seconds)

    @admin.display(description="On expiry", ordering="expiry_outcome")
    def on_expiry(self, obj: Queue) -> str:
        if obj.expiry_outcome == ExpiryOutcome.ESCALATE and obj.escalation_queue:
            return f"escalate → {obj.escalation_queue.slug}"
        return str(obj.expiry_outcome)

    @admin.display(description="Members", ordering="member_total")
    def member_count(self, obj: Queue) -> int:
        return getattr(obj, "member_total", 0)

    @admin.display(description="Open requests", ordering="open_total")
    def open_count(self, obj: Queue) -> int:
        return getattr(obj, "open_total", 0)

    def get_deleted_objects(
        self, objs: Sequence[Queue] | QuerySet[Queue], request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        # Deleting an escalation target would null the escalating queue's target, which its CHECK forbids.
        escalating = Queue.objects.filter(
            escalation_queue__in=list(objs), expiry_outcome=ExpiryOutcome.ESCALATE
        ).exclude(pk__in=[q.pk for q in objs])
        protected = list(protected) + [f"Queue: {q.slug} (escalates here)" for q in escalating]
        return deleted, counts, perms_needed, protected
