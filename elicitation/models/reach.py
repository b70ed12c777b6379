"""Reaching reviewers: routing, escalation policies, per-person reach, notices and Web Push."""

from django.conf import settings
from django.db import models
from django.db.models import Q

from elicitation.models.queues import Queue
from elicitation.models.requests import ElicitationRequest


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
