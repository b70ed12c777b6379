"""Elicitation requests, their drafts and held answers, the audit trail and the agent outbox."""

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q

from elicitation.models.queues import Agent, Queue


class Status(models.TextChoices):
    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"


OPEN_STATUSES = (Status.PENDING, Status.CLAIMED)


TERMINAL_STATUSES = (Status.COMPLETED, Status.EXPIRED, Status.WITHDRAWN)


class Mode(models.TextChoices):
    FORM = "form"
    URL = "url"


class Action(models.TextChoices):
    ACCEPT = "accept"
    DECLINE = "decline"
    CANCEL = "cancel"


class ElicitationRequest(models.Model):
    # Not a column: the hash of the latest audit row, read with the row lock (transitions.lock_request).
    audit_head: str

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    queue = models.ForeignKey(Queue, on_delete=models.PROTECT, related_name="requests")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="requests")
    # NULL, not "": requests without a key must not collide in the unique constraint.
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    # SHA-256 of the create body: a retry with the same key but another body is a conflict, not a replay.
    body_fingerprint = models.CharField(max_length=64, blank=True)
    message = models.TextField()
    mode = models.CharField(max_length=8, choices=Mode.choices, default=Mode.FORM)
    requested_schema = models.JSONField(null=True, blank=True)
    questions = models.JSONField(default=list, blank=True)
    url = models.URLField(max_length=2048, blank=True)
    elicitation_id = models.CharField(max_length=200, blank=True)
    context = models.JSONField(default=dict, blank=True)
    callback_url = models.URLField(max_length=2048, blank=True)
    priority = models.IntegerField(default=0)
    deadline = models.DateTimeField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    claimed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="claims"
    )
    claimed_at = models.DateTimeField(null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    first_claimed_at = models.DateTimeField(null=True, blank=True)
    action = models.CharField(max_length=8, choices=Action.choices, blank=True)
    content = models.JSONField(null=True, blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="answers"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    # Set by the agent when the out-of-band URL flow reported completion (MCP notifications/elicitation/complete).
    url_flow_completed_at = models.DateTimeField(null=True, blank=True)
    # Decision policies (queue/quorum.py, queue/rules.py): the quorum this request needs and its progress, the
    # digest of what was asked, and the rule that decided. NULL for a request no policy touched.
    policy = models.JSONField(null=True, blank=True)
    # MCP `_meta` of the result (the decision's digest, the rule, a scripted queue's reason); NULL for none.
    result_meta = models.JSONField(null=True, blank=True)
    # The queue the request first arrived in (after intake's answer rules routed it). Time-to-a-human figures are
    # kept by it, so a request escalated for being slow stays in the figures of the queue that missed its target.
    # NULL only on rows written outside intake (bench fixtures), which the figures read as their `queue`.
    arrival_queue = models.ForeignKey(
        Queue, null=True, blank=True, editable=False, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-priority", "created_at"]
        indexes = [
            # Claim-next and the queue page: open requests of a queue by priority, then age.
            models.Index(fields=["queue", "status", "-priority", "created_at"], name="request_queue_order"),
            models.Index(fields=["status", "deadline"], name="request_deadline"),
            models.Index(fields=["status", "lease_expires_at"], name="request_lease"),
            models.Index(fields=["agent", "status"], name="request_agent_status"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["agent", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="request_idempotency_per_agent",
            ),
            models.CheckConstraint(condition=Q(status__in=Status.values), name="request_status_valid"),
            models.CheckConstraint(condition=Q(mode__in=Mode.values), name="request_mode_valid"),
            # Claimed exactly when someone holds a lease.
            models.CheckConstraint(
                condition=(
                    Q(status="claimed", claimed_by__isnull=False, lease_expires_at__isnull=False)
                    | (~Q(status="claimed") & Q(claimed_by__isnull=True, lease_expires_at__isnull=True))
                ),
                name="request_claim_matches_status",
            ),
            # Only completed/expired requests carry an outcome, and only accept carries content.
            models.CheckConstraint(
                condition=Q(status__in=["completed", "expired"], action__in=Action.values)
                | (~Q(status__in=["completed", "expired"]) & Q(action="")),
                name="request_action_matches_status",
            ),
            models.CheckConstraint(
                condition=Q(content__isnull=True) | Q(action="accept"), name="request_content_only_on_accept"
            ),
            models.CheckConstraint(
                condition=(Q(mode="form", requested_schema__isnull=False) | Q(mode="url") & ~Q(url="")),
                name="request_mode_payload",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"

    @property
    def is_open(self) -> bool:
        return self.status in OPEN_STATUSES

    def result(self) -> dict[str, Any] | None:
        """The MCP ElicitResult the agent receives, once the request is closed."""
        if self.status == Status.WITHDRAWN:
            return None
        if not self.action:
            return None
        result: dict[str, Any] = {"action": self.action}
        if self.action == Action.ACCEPT and self.mode == Mode.FORM:
            result["content"] = self.content or {}
        if self.result_meta:
            result["_meta"] = self.result_meta
        return result


class DraftState(models.TextChoices):
    DRAFT = "draft"
    SUBMITTED = "submitted"
    SKIPPED = "skipped"


class Draft(models.Model):
    """One question's shared draft answer, seen by every reviewer viewing the request."""

    request = models.ForeignKey(ElicitationRequest, on_delete=models.CASCADE, related_name="drafts")
    question_id = models.CharField(max_length=64)
    value = models.JSONField(null=True, blank=True)
    state = models.CharField(max_length=16, choices=DraftState.choices, default=DraftState.DRAFT)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["request", "question_id"], name="draft_one_per_question"),
            models.CheckConstraint(condition=Q(state__in=DraftState.values), name="draft_state_valid"),
            models.CheckConstraint(
                condition=~Q(state="skipped") | Q(value__isnull=True), name="draft_skipped_has_no_value"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.question_id} ({self.state})"


class HeldAnswer(models.Model):
    """A reviewer's answer, validated and waiting out its undo window: at `send_at` the normal respond path
    commits it (transitions/held_answers.py); until then the reviewer may take it back and the agent knows nothing."""

    request = models.OneToOneField(
        ElicitationRequest, on_delete=models.CASCADE, primary_key=True, related_name="held_answer"
    )
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="held_answers")
    action = models.CharField(max_length=8, choices=Action.choices)
    content = models.JSONField(null=True, blank=True)
    send_at = models.DateTimeField(db_index=True)
    held_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.CheckConstraint(condition=Q(action__in=Action.values), name="held_answer_action_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.action} held until {self.send_at:%H:%M:%S}"


class ActorType(models.TextChoices):
    AGENT = "agent"
    REVIEWER = "reviewer"
    SYSTEM = "system"


class RequestEvent(models.Model):
    """Append-only audit row; each carries the hash of the previous one so edits are detectable."""

    request = models.ForeignKey(ElicitationRequest, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=32)
    actor_type = models.CharField(max_length=16, choices=ActorType.choices)
    # PROTECT: the actor's id is part of the row's hash, so nulling it would break the chain. Deactivate users
    # and revoke agents instead of deleting them; their audit trail stays verifiable.
    actor_user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT)
    actor_agent = models.ForeignKey(Agent, null=True, blank=True, on_delete=models.PROTECT)
    from_status = models.CharField(max_length=16, blank=True)
    to_status = models.CharField(max_length=16, blank=True)
    detail = models.JSONField(default=dict, blank=True)
    at = models.DateTimeField()
    prev_hash = models.CharField(max_length=64, blank=True)
    hash = models.CharField(max_length=64, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["request", "id"], name="event_request_order")]

    def __str__(self) -> str:
        return f"{self.kind} {self.from_status}->{self.to_status}"


class AgentEvent(models.Model):
    """The outbox: what an agent is told, in order, under a per-agent gap-free cursor."""

    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="events")
    seq = models.BigIntegerField()
    kind = models.CharField(max_length=16)  # completed | expired | withdrawn | flow_completed
    request = models.ForeignKey(ElicitationRequest, on_delete=models.CASCADE, related_name="agent_events")
    payload = models.JSONField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["agent", "seq"]
        constraints = [models.UniqueConstraint(fields=["agent", "seq"], name="agent_event_cursor_unique")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.seq}"
