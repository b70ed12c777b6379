"""Queues and the credentials that reach them: agent keys, reviewer tokens, MCP grants."""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q


class ExpiryOutcome(models.TextChoices):
    CANCEL = "cancel"
    DECLINE = "decline"
    ESCALATE = "escalate"


class Scope(models.TextChoices):
    REQUESTS = "requests", "Create and read elicitation requests"
    FLOWS_SECRETS = "flows:secrets", "Open hosted secret flows and retrieve their values"


class Queue(models.Model):
    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="review_queues", blank=True)
    supervisors = models.ManyToManyField(
        settings.AUTH_USER_MODEL, related_name="supervised_queues", blank=True
    )
    default_deadline_seconds = models.PositiveIntegerField(default=3600)
    lease_seconds = models.PositiveIntegerField(default=300)
    expiry_outcome = models.CharField(
        max_length=16, choices=ExpiryOutcome.choices, default=ExpiryOutcome.CANCEL
    )
    escalation_queue = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL)
    priority_threshold = models.IntegerField(
        null=True, blank=True, help_text="Email members when a request at or above this priority arrives."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            models.CheckConstraint(condition=Q(lease_seconds__gte=5), name="queue_lease_at_least_5s"),
            models.CheckConstraint(
                condition=Q(default_deadline_seconds__gte=1), name="queue_deadline_positive"
            ),
            models.CheckConstraint(
                condition=~Q(expiry_outcome="escalate") | Q(escalation_queue__isnull=False),
                name="queue_escalation_needs_target",
            ),
        ]

    def __str__(self) -> str:
        return self.slug


class Agent(models.Model):
    """An API client. Its key is stored as an HMAC; only the prefix identifies it afterwards."""

    name = models.CharField(max_length=200, unique=True)
    key_prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    queues = models.ManyToManyField(Queue, related_name="agents", blank=True)
    scopes = models.JSONField(default=list, blank=True)
    callback_url = models.URLField(blank=True, help_text="Webhook for every event of this agent.")
    # The people answerable for this agent: a quorum policy may exclude them from approving its requests.
    owners = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="owned_agents", blank=True)
    # Per-agent outbox sequence: bumped under the agent's row lock so cursors are gap-free in commit order.
    last_event_seq = models.BigIntegerField(default=0, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.revoked_at is None

    def has_scope(self, scope: str) -> bool:
        return scope in (self.scopes or [])


class ReviewerToken(models.Model):
    """A bearer token for reviewer scripts; stored as an HMAC like agent keys."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reviewer_tokens"
    )
    name = models.CharField(max_length=200, blank=True)
    key_prefix = models.CharField(max_length=16, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.user} {self.key_prefix}"


class McpGrant(models.Model):
    """What a signed-in user let one MCP host do (OAuth consent): act as one agent on some of its queues.

    The row is the consent's audit record and its off switch: every OAuth token issued from it names it in its
    scope (`grant:<id>`), the MCP door refuses the token once `revoked_at` is set, and the row is never deleted."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="mcp_grants")
    agent = models.ForeignKey(Agent, on_delete=models.PROTECT, related_name="mcp_grants")
    queues = models.ManyToManyField(Queue, related_name="mcp_grants")
    client_id = models.CharField(max_length=255)
    client_name = models.CharField(max_length=255, blank=True)
    redirect_uri = models.CharField(max_length=2048)
    resource = models.CharField(max_length=2048)
    created_at = models.DateTimeField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.client_name or self.client_id} as {self.agent} for {self.user}"
