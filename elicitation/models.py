"""The review queue's data: queues, agents, elicitation requests, drafts, the audit trail and the agent outbox."""

import uuid
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models import Q


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


# --- reach: routing, escalation and notices (issue 16) -------------------------------------------------------------


class Channel(models.TextChoices):
    EMAIL = "email"
    SLACK = "slack"
    BROWSER = "browser"
    PUSH = "push", "Web Push"


class Audience(models.TextChoices):
    MEMBERS = "members", "Every member of the queue"
    SUPERVISORS = "supervisors", "The queue's supervisors"
    PEOPLE = "people", "The people named on the rule (an on-call group)"
    SLACK_CHANNEL = "slack_channel", "A Slack channel"


class ReachRule(models.Model):
    """Who is told about a request of this queue, on which channel, and when: tier 0 on arrival, tier 1 when
    nobody has claimed it within the queue's escalation policy's `unclaimed_after_seconds`."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="reach_rules")
    tier = models.PositiveSmallIntegerField(
        default=0, help_text="0: on arrival; 1: when still unclaimed at T1."
    )
    channel = models.CharField(max_length=16, choices=Channel.choices)
    audience = models.CharField(max_length=16, choices=Audience.choices, default=Audience.MEMBERS)
    people = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="reach_rules")
    slack_channel = models.CharField(max_length=64, blank=True, help_text="Slack channel id, e.g. C0123456.")
    min_priority = models.IntegerField(
        null=True, blank=True, help_text="Only requests at or above this priority."
    )

    class Meta:
        ordering = ["queue", "tier", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(tier__lte=1), name="reach_rule_tier_0_or_1"),
            models.CheckConstraint(
                condition=~Q(audience="slack_channel") | (Q(channel="slack") & ~Q(slack_channel="")),
                name="reach_rule_slack_channel_needs_id",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.queue} tier {self.tier} {self.channel} → {self.audience}"


class UnansweredTarget(models.TextChoices):
    ESCALATION_QUEUE = "escalation_queue", "Move to the queue's escalation queue"
    SUPERVISOR = "supervisor", "Assign to a supervisor of the queue"


class ClaimedAtT2(models.TextChoices):
    """What T2 does to a request a reviewer holds (a live claim): a claim is an acknowledgement, as on-call tools
    treat one, so by default the chain stops moving it and tells people instead."""

    KEEP = "keep", "Leave it with the reviewer; tell nobody"
    NOTIFY = "notify", "Leave it with the reviewer; tell them and the queue's supervisors"
    MOVE = "move", "Move it anyway, out of the reviewer's hands"


class EscalationPolicy(models.Model):
    """The queue's escalation chain: T1 → tell tier 1; T2 → move the request (or, while a reviewer holds it, what
    `claimed_at_t2` says); deadline → the expiry outcome."""

    queue = models.OneToOneField(Queue, on_delete=models.CASCADE, related_name="escalation_policy")
    unclaimed_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    unanswered_after_seconds = models.PositiveIntegerField(null=True, blank=True)
    unanswered_goes_to = models.CharField(
        max_length=16, choices=UnansweredTarget.choices, default=UnansweredTarget.ESCALATION_QUEUE
    )
    claimed_at_t2 = models.CharField(
        "claimed at T2",
        max_length=8,
        choices=ClaimedAtT2.choices,
        default=ClaimedAtT2.NOTIFY,
        help_text="What T2 does to a request a reviewer holds. A lease that ran out resumes the chain: the next "
        "sweep moves the request.",
    )

    class Meta:
        verbose_name_plural = "escalation policies"
        constraints = [
            models.CheckConstraint(
                condition=Q(claimed_at_t2__in=ClaimedAtT2.values),
                name="escalation_policy_claimed_at_t2_valid",
            ),
        ]

    def __str__(self) -> str:
        return f"escalation of {self.queue}"


class EmailMode(models.TextChoices):
    EACH = "each", "An e-mail per request"
    DIGEST = "digest", "A digest"
    OFF = "off", "No e-mail"


class ReviewerReach(models.Model):
    """A reviewer's own preferences: time zone, quiet hours, e-mail mode, and the Slack account linked to them."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="reach")
    time_zone = models.CharField(max_length=64, default="UTC")
    quiet_start = models.TimeField(null=True, blank=True)
    quiet_end = models.TimeField(null=True, blank=True)
    email_mode = models.CharField(max_length=8, choices=EmailMode.choices, default=EmailMode.EACH)
    # NULL, not "": unlinked reviewers must not collide in the unique constraint.
    slack_user_id = models.CharField(max_length=32, null=True, blank=True, unique=True)
    # Answers from the request page wait 5 s, with an Undo, before the agent is told (transitions/held_answers.py).
    answer_undo = models.BooleanField(default=True)

    class Meta:
        verbose_name_plural = "reviewer reach preferences"

    def __str__(self) -> str:
        return f"reach of {self.user}"


class NoticeStatus(models.TextChoices):
    PENDING = "pending"
    SENDING = "sending"
    DIGEST = "digest"
    SENT = "sent"
    SKIPPED = "skipped"
    DEAD = "dead"


class Notice(models.Model):
    """One notification of one request to one recipient on one channel: the row that makes it happen once."""

    request = models.ForeignKey(ElicitationRequest, on_delete=models.CASCADE, related_name="notices")
    channel = models.CharField(max_length=16, choices=Channel.choices)
    # "user:<id>" or "slack:<channel id>": a reviewer or a channel is told about a request once per channel;
    # "t2:<queue id>:user:<id>": a reviewer told that a request they hold or supervise is unanswered at T2 there.
    recipient = models.CharField(max_length=80)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE)
    tier = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=16, choices=NoticeStatus.choices, default=NoticeStatus.PENDING)
    reason = models.CharField(max_length=200, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    slack_channel = models.CharField(max_length=64, blank=True)
    slack_ts = models.CharField(max_length=32, blank=True)
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notice_due")]
        constraints = [
            models.UniqueConstraint(
                fields=["request", "channel", "recipient"], name="notice_once_per_recipient"
            ),
            models.CheckConstraint(condition=Q(status__in=NoticeStatus.values), name="notice_status_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.channel} {self.recipient} ({self.status})"


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


# --- decision policies: quorum, answer rules, scripted queues (issue 15) -------------------------------------------


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


class PushSubscription(models.Model):
    """One browser of one reviewer that accepts Web Push (delivery/web_push.py): the endpoint its push service gave
    it and the keys the payload is encrypted to (RFC 8291). Deleted when the push service says it is gone."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="push_subscriptions"
    )
    endpoint = models.URLField(max_length=1024, unique=True)
    p256dh = models.CharField(max_length=100)
    auth = models.CharField(max_length=40)
    label = models.CharField(max_length=80, blank=True, help_text="The browser, as its user agent names it.")
    created_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["user", "id"]

    def __str__(self) -> str:
        return f"{self.label or 'browser'} of {self.user}"


class PushAction(models.Model):
    """The Approve / Reject of one push notification: its tokens name this nonce, and the first one used marks it,
    so a replayed or second token is refused (delivery/push_actions.py)."""

    nonce = models.CharField(max_length=43, unique=True)
    request = models.ForeignKey(ElicitationRequest, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_for = models.CharField(max_length=8, blank=True)

    def __str__(self) -> str:
        return f"push action on {self.request_id} for {self.user_id}"


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
