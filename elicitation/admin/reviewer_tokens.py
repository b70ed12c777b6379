"""Reviewer tokens in the admin: issued (shown once) and revoked through the accounts service."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from elicitation.admin.agents import AgentStatusFilter
from elicitation.admin.responses import issued_keys_response
from elicitation.models import ReviewerToken
from elicitation.queue import accounts


class ReviewerTokenForm(forms.ModelForm[ReviewerToken]):
    class Meta:
        model = ReviewerToken
        fields = ["user", "name"]


@admin.register(ReviewerToken)
class ReviewerTokenAdmin(admin.ModelAdmin[ReviewerToken]):
    form = ReviewerTokenForm
    list_display = ["user", "name", "token", "created_at", "revoked_at"]
    list_filter = [AgentStatusFilter]
    search_fields = ["user__username", "name", "key_prefix"]
    readonly_fields = ["token", "created_at", "revoked_at"]
    actions = ["revoke_tokens"]

    def get_fields(self, request: HttpRequest, obj: ReviewerToken | None = None) -> Any:
        return ["user", "name"] if obj is None else ["user", "name", "token", "created_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ReviewerToken | None = None) -> Any:
        return self.readonly_fields if obj is None else ["user", *self.readonly_fields]

    @admin.display(description="Token", ordering="key_prefix")
    def token(self, obj: ReviewerToken) -> str:
        return f"rhr_{obj.key_prefix}_…" if obj.key_prefix else "-"

    def save_model(
        self, request: HttpRequest, obj: ReviewerToken, form: forms.ModelForm[ReviewerToken], change: bool
    ) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        key = accounts.create_reviewer_token(form.cleaned_data["user"], form.cleaned_data["name"])
        created = ReviewerToken.objects.get(key_prefix=key.split("_")[1])
        for field in ("pk", "key_prefix", "key_hash", "created_at"):
            setattr(obj, field, getattr(created, field))
        obj._state.adding = False
        obj._state.db = created._state.db
        request._reviewhub_issued = [  # type: ignore[attr-defined]
            {"name": f"{created.user} {created.name}".strip(), "key": key, "prefix": created.key_prefix}
        ]

    def response_add(
        self, request: HttpRequest, obj: ReviewerToken, post_url_continue: str | None = None
    ) -> HttpResponse:
        issued = getattr(request, "_reviewhub_issued", None)
        if not issued:
            return super().response_add(request, obj, post_url_continue)
        back = reverse("admin:elicitation_reviewertoken_changelist")
        return issued_keys_response(request, "Reviewer token created", issued, back)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[ReviewerToken]) -> None:
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            accounts.revoke_reviewer_token(token)
            self.log_change(request, token, "Revoked the token.")
            count += 1
        self.message_user(request, f"Revoked {count} token(s).", messages.SUCCESS)
