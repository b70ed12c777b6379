"""Reach in the admin: who is told about a queue's requests (rules), its escalation chain, reviewers' own
preferences (time zone, quiet hours, e-mail mode, linked Slack account), and the notices sent (read-only)."""

from django.contrib import admin
from django.http import HttpRequest

from elicitation.models import EscalationPolicy, Notice, ReachRule, ReviewerReach


@admin.register(ReachRule)
class ReachRuleAdmin(admin.ModelAdmin[ReachRule]):
    list_display = ("queue", "tier", "channel", "audience", "slack_channel", "min_priority")
    list_filter = ("channel", "tier", "audience")
    filter_horizontal = ("people",)


@admin.register(EscalationPolicy)
class EscalationPolicyAdmin(admin.ModelAdmin[EscalationPolicy]):
    list_display = (
        "queue",
        "unclaimed_after_seconds",
        "unanswered_after_seconds",
        "unanswered_goes_to",
        "claimed_at_t2",
    )
    list_filter = ("claimed_at_t2",)
    fieldsets = (
        (None, {"fields": ("queue",)}),
        ("T1: still unclaimed", {"fields": ("unclaimed_after_seconds",)}),
        (
            "T2: still unanswered",
            {
                "fields": ("unanswered_after_seconds", "unanswered_goes_to", "claimed_at_t2"),
                "description": "A reviewer's live claim is an acknowledgement: unless “claimed at T2” says move, "
                "the request stays with them. A lease that ran out resumes the chain.",
            },
        ),
    )
    radio_fields = {"claimed_at_t2": admin.VERTICAL}


@admin.register(ReviewerReach)
class ReviewerReachAdmin(admin.ModelAdmin[ReviewerReach]):
    list_display = ("user", "time_zone", "quiet_start", "quiet_end", "email_mode", "slack_user_id")
    search_fields = ("user__username", "slack_user_id")


@admin.register(Notice)
class NoticeAdmin(admin.ModelAdmin[Notice]):
    """What was sent to whom: the trail of notifications, never edited by hand."""

    list_display = ("request", "channel", "recipient", "tier", "status", "reason", "attempts", "sent_at")
    list_filter = ("channel", "status", "tier")
    readonly_fields = [field.name for field in Notice._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Notice | None = None) -> bool:
        return False
