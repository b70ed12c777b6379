"""The operator's console. Every change goes through a service, secrets never reach a page: keys are shown once
(in the response that issued them, never stored), hosted-flow ciphertext and answers are never rendered, and the
audit trail is read-only."""

import json
from collections.abc import Callable, Sequence
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.filters import DateFieldListFilter
from django.db import models, transaction
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from elicitation.admin import (
    mcp_grants,  # noqa: F401 - registers the MCP OAuth consents
    policies,  # noqa: F401 - registers decision policies and rules
    reach,  # noqa: F401 - registers reach rules, escalation policies, reviewer preferences and notices
)
from elicitation.delivery import tasks
from elicitation.models import (
    OPEN_STATUSES,
    Agent,
    ElicitationRequest,
    ExpiryOutcome,
    HostedFlow,
    Queue,
    RequestEvent,
    ReviewerToken,
    Scope,
    WebhookDelivery,
)
from elicitation.queue import accounts, audit, transitions
from elicitation.queue.errors import InvalidTransition, NotFoundError
from elicitation.queue.keys import webhook_secret

admin.site.site_header = "ReviewHub administration"
admin.site.site_title = "ReviewHub admin"
admin.site.index_title = "Operations"

ISSUED_KEYS_TEMPLATE = "admin/elicitation/issued_keys.html"
CONFIRM_TEMPLATE = "admin/elicitation/confirm_action.html"


def _duration(seconds: int | None) -> str:
    if seconds is None:
        return "-"
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def issued_keys_response(
    request: HttpRequest, title: str, keys: list[dict[str, str]], back_url: str
) -> TemplateResponse:
    """The one page a full key appears on. Rendered as the response to the POST that issued it and never stored,
    so reloading or going back cannot show it again; no-store keeps it out of caches."""
    response = TemplateResponse(
        request,
        ISSUED_KEYS_TEMPLATE,
        {**admin.site.each_context(request), "title": title, "keys": keys, "back_url": back_url},
    )
    response["Cache-Control"] = "no-store"
    return response


def confirm_response(
    request: HttpRequest,
    modeladmin: admin.ModelAdmin,
    queryset: QuerySet[Any],
    *,
    action: str,
    title: str,
    warning: str,
    button: str,
) -> TemplateResponse:
    """An intermediate page (like Django's delete confirmation) for irreversible actions."""
    return TemplateResponse(
        request,
        CONFIRM_TEMPLATE,
        {
            **admin.site.each_context(request),
            "title": title,
            "warning": warning,
            "button": button,
            "action": action,
            "objects": list(queryset),
            "opts": modeladmin.model._meta,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        },
    )


# --- queues --------------------------------------------------------------------------------------------------------


class QueueForm(forms.ModelForm):
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
class QueueAdmin(admin.ModelAdmin):
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


# --- agents --------------------------------------------------------------------------------------------------------


def _https_urls(field: Any, **kwargs: Any) -> Any:
    # Schemeless URLs typed into the admin mean https (Django 6's default, chosen now).
    if isinstance(field, models.URLField):
        kwargs.setdefault("assume_scheme", "https")
    return field.formfield(**kwargs)


class AgentForm(forms.ModelForm):
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

    def lookups(self, request: HttpRequest, model_admin: admin.ModelAdmin) -> list[tuple[str, str]]:
        return [("active", "Active"), ("revoked", "Revoked")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "active":
            return queryset.filter(revoked_at__isnull=True)
        if self.value() == "revoked":
            return queryset.filter(revoked_at__isnull=False)
        return queryset


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
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

    def save_model(self, request: HttpRequest, obj: Agent, form: forms.ModelForm, change: bool) -> None:
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


# --- reviewer tokens ----------------------------------------------------------------------------------------------


class ReviewerTokenForm(forms.ModelForm):
    class Meta:
        model = ReviewerToken
        fields = ["user", "name"]


@admin.register(ReviewerToken)
class ReviewerTokenAdmin(admin.ModelAdmin):
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
        self, request: HttpRequest, obj: ReviewerToken, form: forms.ModelForm, change: bool
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


# --- requests ------------------------------------------------------------------------------------------------------


class ReadOnlyMixin:
    """Rows that only services write: the admin may look and run actions, never add, edit or delete."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class RequestEventInline(ReadOnlyMixin, admin.TabularInline):
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


HIDDEN = "(hidden: collected by a hosted flow)"


@admin.register(ElicitationRequest)
class ElicitationRequestAdmin(ReadOnlyMixin, admin.ModelAdmin):
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
                audit.record_view(viewed, user=request.user)
        return response

    @admin.action(description="Expire now (apply the queue's expiry outcome)", permissions=["expire"])
    def expire_now(self, request: HttpRequest, queryset: QuerySet[ElicitationRequest]) -> None:
        self._each(
            request,
            queryset,
            lambda pk: transitions.expire_request(pk, actor_user=request.user),
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


# --- audit ---------------------------------------------------------------------------------------------------------


def _export_response(events: QuerySet[RequestEvent], fmt: str) -> HttpResponse:
    rows = audit.export_rows(events)
    chunks = audit.csv_chunks(rows) if fmt == "csv" else audit.jsonl_chunks(rows)
    content_type = "text/csv; charset=utf-8" if fmt == "csv" else "application/x-ndjson; charset=utf-8"
    response = HttpResponse("".join(chunks), content_type=content_type)
    stamp = timezone.now().strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="reviewhub-audit-{stamp}.{fmt}"'
    return response


@admin.register(RequestEvent)
class RequestEventAdmin(ReadOnlyMixin, admin.ModelAdmin):
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


# --- webhooks and hosted flows -------------------------------------------------------------------------------------


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = [
        "short_id",
        "agent",
        "event_kind",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "created_at",
        "delivered_at",
    ]
    list_filter = ["status", "event__agent"]
    search_fields = ["id", "url", "event__agent__name"]
    list_select_related = ["event__agent"]
    actions = ["replay"]
    # The payload (the agent's result) is not shown: operators need the delivery's health, not its content.
    fields = (
        "id",
        "agent",
        "event_kind",
        "url",
        "status",
        "attempts",
        "last_status_code",
        "last_error",
        "next_attempt_at",
        "created_at",
        "delivered_at",
    )
    readonly_fields = fields

    def has_replay_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("elicitation.change_webhookdelivery")

    @admin.display(description="Delivery")
    def short_id(self, obj: WebhookDelivery) -> str:
        return str(obj.pk)[:8]

    @admin.display(description="Agent", ordering="event__agent__name")
    def agent(self, obj: WebhookDelivery) -> str:
        return obj.event.agent.name

    @admin.display(description="Event")
    def event_kind(self, obj: WebhookDelivery) -> str:
        return f"{obj.event.kind} #{obj.event.seq}"

    @admin.action(description="Replay (send again from the first attempt)", permissions=["replay"])
    def replay(self, request: HttpRequest, queryset: QuerySet[WebhookDelivery]) -> None:
        count = 0
        for delivery in queryset:
            tasks.replay(delivery)
            count += 1
        self.message_user(request, f"Queued {count} delivery(ies) again.", messages.SUCCESS)


@admin.register(HostedFlow)
class HostedFlowAdmin(ReadOnlyMixin, admin.ModelAdmin):
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
