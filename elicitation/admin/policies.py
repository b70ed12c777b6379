"""Decision policies in the admin: a queue's policy with its whole rule file as YAML (export by reading it, import
by saving it), single rules validated exactly as the API validates them, and approvals (read-only).

Both forms check as the signed-in user writes (`writer`, set by the admin's `get_form`): a route goes only to a
queue they supervise, as over REST. The rule file is read by `rules.load_rule_file` and a rule's JSON fields by the
same JSON checks (size and depth before parsing), so no door parses what another refuses.

Every write here (save, delete, an action such as Revoke) is one call of the writer's REVIEWER_RATE, the budget the
rules API draws on for the same writes (`RuleWritesChargeReviewerRate`): over it, 429 and nothing is written."""

from typing import Any, cast

from django import forms
from django.conf import settings
from django.contrib import admin
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.db import models
from django.forms.fields import InvalidJSONInput, JSONString
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from elicitation.api import throttling
from elicitation.api.errors import throttled_body
from elicitation.models import AnswerRule, Approval, QueuePolicy
from elicitation.queue import rules
from elicitation.queue.errors import InvalidInput


class RuleJSONField(forms.JSONField):
    """A rule's JSON field (match, content, quorum), read through `rules.load_rule_file`: Django's own field hands
    the text to `json.loads` unchecked (a RecursionError 500 for deep nesting)."""

    def to_python(self, value: Any) -> Any:
        if self.disabled or not isinstance(value, str) or value in self.empty_values:
            return super().to_python(value)
        try:
            converted = rules.load_rule_file(value, syntax="json")
        except InvalidInput as exc:
            raise ValidationError([f"{path}: {reason}" for path, reason in exc.fields.items()]) from None
        return JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data: Any, initial: Any) -> Any:
        # What a refused form shows again: Django's own re-parses the text with `json.loads`.
        if self.disabled or not isinstance(data, str):
            return super().bound_data(data, initial)
        try:
            return rules.load_rule_file(data, syntax="json")
        except InvalidInput:
            return InvalidJSONInput(data)


class WrittenByForm(forms.ModelForm[Any]):
    """A model form that knows who is saving it; the admin sets `writer` on the class it builds per request."""

    writer: Any = None


class QueuePolicyForm(WrittenByForm):
    rule_file = forms.CharField(
        label="Rule file (YAML)",
        widget=forms.Textarea(
            attrs={"rows": 24, "cols": 100, "spellcheck": "false", "class": "vLargeTextField"}
        ),
        help_text="The queue's mode, quorum and ordered rules. Saving imports it: the rules become exactly these "
        "(remembered decisions stay). Keep a copy in version control.",
    )

    class Meta:
        model = QueuePolicy
        fields = ["queue"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["queue"].disabled = True
            self.fields["rule_file"].initial = rules.dump_yaml(rules.policy_data(self.instance.queue))
        else:
            self.fields["rule_file"].initial = rules.dump_yaml({"mode": "human", "rules": []})

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        queue = cleaned.get("queue") or (self.instance.queue if self.instance.pk else None)
        if queue is not None and "rule_file" in cleaned:
            try:
                cleaned["rule_data"] = rules.load_rule_file(cleaned["rule_file"], syntax="yaml")
                rules.parse_policy(cleaned["rule_data"], queue=queue, user=self.writer)
            except InvalidInput as exc:
                self.add_error("rule_file", [f"{path}: {reason}" for path, reason in exc.fields.items()])
        return cleaned


class RuleWritesChargeReviewerRate(admin.ModelAdmin[Any]):
    """A POST to the add, change or delete page or to the list (its actions) is one call of the staff user's
    REVIEWER_RATE, counted as `ReviewerRateThrottle` counts a rules API call; over it, a 429 page with Retry-After
    before any form is read. Reading is not charged: only the rule writes the API charges for have a door here."""

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: Any = None,
    ) -> HttpResponse:
        refused = self.over_rate(request)
        return refused or super().changeform_view(request, object_id, form_url, extra_context)

    def delete_view(self, request: HttpRequest, object_id: str, extra_context: Any = None) -> HttpResponse:
        refused = self.over_rate(request)
        return refused or super().delete_view(request, object_id, extra_context)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        refused = self.over_rate(request)
        return refused or super().changelist_view(request, extra_context)

    def over_rate(self, request: HttpRequest) -> HttpResponse | None:
        if request.method != "POST":
            return None
        rate = getattr(settings, throttling.ReviewerRateThrottle.rate_setting, None)
        retry_after = throttling.charge(throttling.ReviewerRateThrottle.scope, str(request.user.pk), rate)
        if retry_after is None:
            return None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Too many requests",
            "detail": f"Nothing was saved. {throttled_body(retry_after)['detail']}",
        }
        response = TemplateResponse(request, "admin/elicitation/throttled.html", context, status=429)
        response["Retry-After"] = str(retry_after)
        return response


@admin.register(QueuePolicy)
class QueuePolicyAdmin(RuleWritesChargeReviewerRate):
    form = QueuePolicyForm
    list_display = ("queue", "mode", "unmatched", "quorum_text", "rule_count")
    list_filter = ("mode",)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = cast(type[WrittenByForm], super().get_form(request, obj, change=change, **kwargs))
        form.writer = request.user  # a class built for this request: no other request sees it
        return form

    @admin.display(description="Quorum")
    def quorum_text(self, obj: QueuePolicy) -> str:
        quorum = obj.quorum or {}
        return f"{quorum.get('approvals', 1)} approvals" if quorum else "one reviewer"

    @admin.display(description="Rules")
    def rule_count(self, obj: QueuePolicy) -> int:
        return AnswerRule.objects.filter(queue=obj.queue, revoked_at__isnull=True).count()

    def save_model(self, request: HttpRequest, obj: QueuePolicy, form: Any, change: bool) -> None:
        policy = rules.replace_policy(
            form.cleaned_data.get("queue") or obj.queue,
            form.cleaned_data["rule_data"],
            user=cast(User, request.user),  # the admin site lets only active staff in
        )
        obj.pk = policy.pk
        obj.refresh_from_db()


class AnswerRuleForm(WrittenByForm):
    class Meta:
        model = AnswerRule
        fields = [
            "queue",
            "position",
            "name",
            "enabled",
            "match",
            "action",
            "content",
            "route_to",
            "priority",
            "deadline_seconds",
            "quorum",
            "step_up",
            "expires_at",
        ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        queue = cleaned.get("queue")
        if queue is None:
            return cleaned
        data = {
            key: value
            for key, value in {
                "name": cleaned.get("name"),
                "enabled": cleaned.get("enabled", True),
                "match": cleaned.get("match") or {},
                "action": cleaned.get("action"),
                "content": cleaned.get("content"),
                "queue": cleaned["route_to"].slug if cleaned.get("route_to") else None,
                "priority": cleaned.get("priority"),
                "deadline": cleaned.get("deadline_seconds"),
                "quorum": cleaned.get("quorum"),
                "step_up": cleaned.get("step_up") or None,
                "expires_at": cleaned["expires_at"].isoformat() if cleaned.get("expires_at") else None,
            }.items()
            if value is not None
        }
        spec, errors = rules.parse_rule(data, "rule", queue=queue, user=self.writer)
        if spec is None:
            model_field = {"queue": "route_to", "deadline": "deadline_seconds"}
            for path, reason in errors.items():
                key = path.removeprefix("rule.").split(".")[0].split("[")[0]
                field = model_field.get(key, key)
                self.add_error(field if field in self.fields else None, f"{path}: {reason}")
        else:
            cleaned["quorum"] = spec.quorum
        return cleaned


@admin.register(AnswerRule)
class AnswerRuleAdmin(RuleWritesChargeReviewerRate):
    form = AnswerRuleForm
    list_display = (
        "name",
        "queue",
        "position",
        "action",
        "enabled",
        "remembered",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("queue", "action", "enabled")
    search_fields = ("name",)
    ordering = ("queue", "position", "id")
    readonly_fields = ("remembered_from", "created_by", "created_at", "revoked_at")
    actions = ["revoke"]
    formfield_overrides = {models.JSONField: {"form_class": RuleJSONField}}

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        form = cast(type[WrittenByForm], super().get_form(request, obj, change=change, **kwargs))
        form.writer = request.user  # a class built for this request: no other request sees it
        return form

    @admin.display(boolean=True, description="Remembered")
    def remembered(self, obj: AnswerRule) -> bool:
        return obj.remembered_from_id is not None

    def save_model(self, request: HttpRequest, obj: AnswerRule, form: Any, change: bool) -> None:
        if not change:
            obj.created_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)
        rules.rules_changed(obj.queue)

    def delete_model(self, request: HttpRequest, obj: AnswerRule) -> None:
        rules.delete_rule(obj)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for rule in queryset:
            rules.delete_rule(rule)

    @admin.action(description="Revoke the selected rules")
    def revoke(self, request: HttpRequest, queryset: Any) -> None:
        for rule in queryset.select_related("queue"):
            rules.revoke_rule(rule)


@admin.register(Approval)
class ApprovalAdmin(admin.ModelAdmin[Approval]):
    list_display = ("request", "reviewer", "group", "at")
    list_filter = ("group",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
