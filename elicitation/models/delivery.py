"""What leaves for the agent outside the API: webhook deliveries and hosted URL flows."""

import uuid

from django.db import models
from django.db.models import Q

from elicitation.models.requests import AgentEvent, ElicitationRequest


class DeliveryStatus(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"


class WebhookDelivery(models.Model):
    """One webhook POST of an agent event; its id is the idempotency id the receiver deduplicates on."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event = models.ForeignKey(AgentEvent, on_delete=models.CASCADE, related_name="deliveries")
    url = models.URLField(max_length=2048)
    status = models.CharField(max_length=16, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    last_status_code = models.IntegerField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"

    def __str__(self) -> str:
        return f"{self.id} ({self.status})"


class FlowStatus(models.TextChoices):
    OPEN = "open"
    SUBMITTED = "submitted"
    RETRIEVED = "retrieved"
    EXPIRED = "expired"
    PURGED = "purged"


class HostedFlow(models.Model):
    """A secret-collecting URL flow hosted by ReviewHub. Only ciphertext is stored, and only until retrieval."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    request = models.OneToOneField(ElicitationRequest, on_delete=models.CASCADE, related_name="hosted_flow")
    status = models.CharField(max_length=16, choices=FlowStatus.choices, default=FlowStatus.OPEN)
    # The flow's own form. Kept off the request row so no reviewer page renders it as a draftable form.
    requested_schema = models.JSONField(default=dict, blank=True)
    questions = models.JSONField(default=list, blank=True)
    key_id = models.CharField(max_length=32, blank=True)
    nonce = models.BinaryField(null=True, blank=True)
    ciphertext = models.BinaryField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    retrieved_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(ciphertext__isnull=True) | Q(status="submitted"),
                name="flow_ciphertext_only_until_retrieved",
            )
        ]

    def __str__(self) -> str:
        return f"flow {self.id} ({self.status})"
