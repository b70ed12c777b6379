"""Agents in the admin: created, rotated and revoked through the accounts service. A key is shown once, on the page
that answers the POST which issued it; afterwards only its prefix is known."""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models, transaction
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse

from elicitation.admin.responses import confirm_response, issued_keys_response
from elicitation.models import Agent, Scope
from elicitation.queue import accounts
from elicitation.queue.keys import webhook_secret


def _https_urls(field: Any, **kwargs: Any) -> Any:
    # Schemeless URLs typed into the admin mean https (Django 6's default, chosen now).
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)


class AgentForm(forms.ModelForm[Agent]):
    scopes = forms.MultipleChoiceField(
        choices=Scope.choices,
        widget=forms.CheckboxSelectMultiple,
        required=False,
        initial=[Scope.REQUESTS],
        help_text="What the key may do, beyond reading its own requests.",
    )

    class Meta:
        model = Agent
        fields = ["name", "queues", "scopes", "callback_url"]
        formfield_callback = _https_urls


class AgentStatusFilter(admin.SimpleListFilter):
    title = "key"
    parameter_name = "key"

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin[Agent]):
    form = AgentForm
    list_display = ["name", "key", "queue_list", "scope_list", "active", "created_at", "revoked_at"]
    list_filter = [AgentStatusFilter, "queues"]
    search_fields = ["name", "key_prefix"]
    filter_horizontal = ["queues"]
    readonly_fields = ["key", "created_at", "revoked_at", "last_event_seq"]
    actions = ["rotate_keys", "revoke_keys"]
    change_form_template = "admin/elicitation/agent/change_form.html"

    class Media:
        css = {"all": ["reviewhub/admin.css"]}

    def formfield_for_dbfield(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if isinstance(db_field, models.URLField):
            kwargs.setdefault("assume_scheme", "https")
        return super().formfield_for_dbfield(db_field, request, **kwargs)

    def get_fieldsets(self, request: HttpRequest, obj: Agent | None = None) -> Any:
        main = ["name", "queues", "scopes", "callback_url"]
        if obj is None:
            return [(None, {"fields": main})]
        return [
            (None, {"fields": main}),
            ("Key", {"fields": ["key", "created_at", "revoked_at", "last_event_seq"]}),
        ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Agent]:
        return super().get_queryset(request).prefetch_related("queues")

    @admin.display(description="Key", ordering="key_prefix")
    def key(self, obj: Agent) -> str:
        # Only the prefix is known after issue: the rest of the key exists nowhere but with its owner.
        return f"rh_{obj.key_prefix}_…" if obj.key_prefix else "-"

    @admin.display(description="Queues")
    def queue_list(self, obj: Agent) -> str:
        return ", ".join(q.slug for q in obj.queues.all())

    @admin.display(description="Scopes")
    def scope_list(self, obj: Agent) -> str:
        return ", ".join(obj.scopes or [])

    @admin.display(description="Active", boolean=True)
    def active(self, obj: Agent) -> bool:
        return obj.is_active

    def save_model(
        self, request: HttpRequest, obj: Agent, form: forms.ModelForm[Agent], change: bool
    ) -> None:
        if change:
            super().save_model(request, obj, form, change)
            return
        created, key = accounts.create_agent(
            obj.name,
            queue_slugs=[q.slug for q in form.cleaned_data["queues"]],
            scopes=list(form.cleaned_data["scopes"]),
        )
        # Adopt the created row so the admin's own bookkeeping (m2m save, log entry, redirect) targets it.
        for field in ("pk", "key_prefix", "key_hash", "created_at", "last_event_seq", "scopes"):
            setattr(obj, field, getattr(created, field))
        obj._state.adding = False
        obj._state.db = created._state.db
        if obj.callback_url:
            obj.save(update_fields=["callback_url"])
        request._reviewhub_issued = [self._issued(created, key)]  # type: ignore[attr-defined]

    def _issued(self, agent: Agent, key: str) -> dict[str, str]:
        return {
            "name": agent.name,
            "key": key,
            "prefix": agent.key_prefix,
            "webhook_secret": webhook_secret(agent.pk, agent.key_prefix),
        }

    def response_add(
        self, request: HttpRequest, obj: Agent, post_url_continue: str | None = None
    ) -> HttpResponse:
        issued = getattr(request, "_reviewhub_issued", None)
        if not issued:
            return super().response_add(request, obj, post_url_continue)
        back = reverse("admin:elicitation_agent_change", args=[obj.pk])
        return issued_keys_response(request, f"Agent {obj.name} created", issued, back)

    @admin.action(description="Rotate the key of selected agents", permissions=["change"])
    def rotate_keys(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        active = list(queryset.filter(revoked_at__isnull=True))
        if len(active) < queryset.count():
            self.message_user(request, "Revoked agents keep no key and were skipped.", messages.WARNING)
        if not active:
            return None
        if request.POST.get("confirm") != "yes":
            return confirm_response(
                request,
                self,
                queryset.filter(pk__in=[a.pk for a in active]),
                action="rotate_keys",
                title="Rotate agent keys",
                warning="Each current key stops working at once, open sockets included. The new keys are "
                "shown once, on the next page.",
                button="Rotate keys",
            )
        issued = []
        with transaction.atomic():
            for agent in active:
                issued.append(self._issued(agent, accounts.rotate_agent_key(agent)))
        for agent in active:
            self.log_change(request, agent, "Rotated the key.")
        return issued_keys_response(
            request, "New agent keys", issued, reverse("admin:elicitation_agent_changelist")
        )

    @admin.action(description="Revoke the key of selected agents", permissions=["change"])
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[Agent]) -> HttpResponse | None:
        active = queryset.filter(revoked_at__isnull=True)
        if not active.exists():
            self.message_user(request, "Those agents are already revoked.", messages.INFO)
            return None
        if request.POST.get("confirm") != "yes":
            return confirm_response(
                request,
                self,
                active,
                action="revoke_keys",
                title="Revoke agent keys",
                warning="The agents' next API call is refused and their open sockets close. This cannot be "
                "undone; a revoked agent needs a new agent.",
                button="Revoke",
            )
        revoked = list(active)
        for agent in revoked:
            accounts.revoke_agent(agent)
            self.log_change(request, agent, "Revoked the key.")
        self.message_user(request, f"Revoked {len(revoked)} agent key(s).", messages.SUCCESS)
        return None
