"""Decision policies: scripted queues, answer rules, quorum approvals and passkey step-up."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from elicitation.models.queues import Queue
from elicitation.models.requests import ElicitationRequest


class QueueMode(models.TextChoices):
    HUMAN = "human", "People answer; rules answer what they match"
    SCRIPTED = "scripted", "Rules answer every request at once (fixtures for agent CI)"


class UnmatchedOutcome(models.TextChoices):
    DECLINE = "decline", "Decline, with the reason in the result's _meta"
    PENDING = "pending", "Leave it pending for a person"


class QueuePolicy(models.Model):
    """A queue's decision policy: its quorum, its mode, and the version of its ordered answer rules (bumped on every
    rule change so each process recompiles the rules it caches)."""

    queue = models.OneToOneField(Queue, on_delete=models.CASCADE, related_name="policy")
    mode = models.CharField(max_length=16, choices=QueueMode.choices, default=QueueMode.HUMAN)
    unmatched = models.CharField(
        max_length=16, choices=UnmatchedOutcome.choices, default=UnmatchedOutcome.DECLINE
    )
    round_cap = models.PositiveSmallIntegerField(
        default=5, help_text="Scripted mode: input-required rounds answered per tool call before declining."
    )
    # {"approvals": N, "groups": {"sre": 1}, "exclude_owner": bool, "veto": "any"|"none"}; NULL: one reviewer.
    quorum = models.JSONField(null=True, blank=True)
    rules_version = models.PositiveIntegerField(default=0, editable=False)

    class Meta:
        verbose_name_plural = "queue policies"
        constraints = [
            models.CheckConstraint(condition=Q(mode__in=QueueMode.values), name="queue_policy_mode_valid"),
            models.CheckConstraint(condition=Q(round_cap__gte=1), name="queue_policy_round_cap_positive"),
        ]

    def __str__(self) -> str:
        return f"policy of {self.queue}"


class RuleAction(models.TextChoices):
    ACCEPT = "accept", "Accept with the given content"
    DECLINE = "decline", "Decline"
    CANCEL = "cancel", "Cancel"
    ROUTE = "route", "Route to another queue"
    REQUIRE_QUORUM = "require_quorum", "Require a quorum"
    SET = "set", "Set priority and/or deadline"


class AnswerRule(models.Model):
    """One ordered answer rule of a queue: `match` (agent, server, tool, arguments, schema fingerprint, message)
    and an action. Validated and compiled by queue/rules.py; a remembered decision is a rule with an expiry."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="answer_rules")
    position = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=200)
    enabled = models.BooleanField(default=True)
    match = models.JSONField(default=dict, blank=True)
    action = models.CharField(max_length=16, choices=RuleAction.choices)
    content = models.JSONField(null=True, blank=True)
    route_to = models.ForeignKey(Queue, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    priority = models.IntegerField(null=True, blank=True)
    deadline_seconds = models.PositiveIntegerField(null=True, blank=True)
    quorum = models.JSONField(null=True, blank=True)
    step_up = models.CharField(
        max_length=16, blank=True, help_text="passkey: each approver signs with a passkey."
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    remembered_from = models.ForeignKey(
        ElicitationRequest, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["queue", "position", "id"]
        permissions = [("remember_decision", "Can turn an answer into a remembered decision")]
        constraints = [
            models.CheckConstraint(
                condition=Q(action__in=RuleAction.values), name="answer_rule_action_valid"
            ),
            models.CheckConstraint(
                condition=~Q(action="route") | Q(route_to__isnull=False),
                name="answer_rule_route_needs_target",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} #{self.position} {self.name}"


class Approval(models.Model):
    """One reviewer's approval of a request's proposed answer; one per reviewer and request, enforced here."""

    request = models.ForeignKey(ElicitationRequest, on_delete=models.CASCADE, related_name="approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    group = models.CharField(max_length=150, blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["request", "reviewer"], name="approval_once_per_reviewer"),
        ]

    def __str__(self) -> str:
        return f"{self.reviewer} approved {self.request_id}"


class Passkey(models.Model):
    """A reviewer's WebAuthn credential, registered on the Preferences page; an accept on a request whose rule says
    `step_up: passkey` is signed with one (queue/step_up.py). `public_key` is the COSE key the authenticator gave."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="passkeys")
    credential_id = models.BinaryField(max_length=1023, unique=True)
    public_key = models.BinaryField(max_length=2048)
    sign_count = models.PositiveBigIntegerField(default=0)
    name = models.CharField(max_length=80)
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["user", "id"]

    def __str__(self) -> str:
        return f"passkey {self.name!r} of {self.user}"


class StepUpChallenge(models.Model):
    """One WebAuthn challenge handed out for a passkey ceremony (a step-up on a request, or a registration): its
    nonce is deleted by the one answer that uses it, so a replayed assertion finds nothing (queue/step_up.py)."""

    nonce = models.CharField(max_length=43, unique=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    request = models.ForeignKey(
        ElicitationRequest, null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    challenge = models.BinaryField(max_length=512)
    expires_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"step-up challenge for {self.user_id}"
