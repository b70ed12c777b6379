import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """Schema for reaching reviewers: Slack, e-mail, escalation."""

    dependencies = [
        ("elicitation", "0005_mcp_oauth"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.CreateModel(
            name="EscalationPolicy",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("unclaimed_after_seconds", models.PositiveIntegerField(blank=True, null=True)),
                ("unanswered_after_seconds", models.PositiveIntegerField(blank=True, null=True)),
                (
                    "unanswered_goes_to",
                    models.CharField(
                        choices=[
                            ("escalation_queue", "Move to the queue's escalation queue"),
                            ("supervisor", "Assign to a supervisor of the queue"),
                        ],
                        default="escalation_queue",
                        max_length=16,
                    ),
                ),
                (
                    "queue",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="escalation_policy",
                        to="elicitation.queue",
                    ),
                ),
            ],
            options={"verbose_name_plural": "escalation policies"},
        ),
        migrations.CreateModel(
            name="ReviewerReach",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("time_zone", models.CharField(default="UTC", max_length=64)),
                ("quiet_start", models.TimeField(blank=True, null=True)),
                ("quiet_end", models.TimeField(blank=True, null=True)),
                (
                    "email_mode",
                    models.CharField(
                        choices=[("each", "An e-mail per request"), ("digest", "A digest"), ("off", "No e-mail")],
                        default="each",
                        max_length=8,
                    ),
                ),
                ("slack_user_id", models.CharField(blank=True, max_length=32, null=True, unique=True)),
                (
                    "user",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE, related_name="reach", to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
            options={"verbose_name_plural": "reviewer reach preferences"},
        ),
        migrations.CreateModel(
            name="Notice",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "channel",
                    models.CharField(
                        choices=[("email", "Email"), ("slack", "Slack"), ("browser", "Browser")], max_length=16
                    ),
                ),
                ("recipient", models.CharField(max_length=80)),
                ("tier", models.PositiveSmallIntegerField(default=0)),
                (
                    "status",
                    models.CharField(
                        choices=[
                            ("pending", "Pending"),
                            ("sending", "Sending"),
                            ("digest", "Digest"),
                            ("sent", "Sent"),
                            ("skipped", "Skipped"),
                            ("dead", "Dead"),
                        ],
                        default="pending",
                        max_length=16,
                    ),
                ),
                ("reason", models.CharField(blank=True, max_length=200)),
                ("attempts", models.PositiveIntegerField(default=0)),
                ("next_attempt_at", models.DateTimeField(blank=True, null=True)),
                ("slack_channel", models.CharField(blank=True, max_length=64)),
                ("slack_ts", models.CharField(blank=True, max_length=32)),
                ("created_at", models.DateTimeField()),
                ("sent_at", models.DateTimeField(blank=True, null=True)),
                (
                    "request",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="notices",
                        to="elicitation.elicitationrequest",
                    ),
                ),
                (
                    "user",
                    models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, to=settings.AUTH_USER_MODEL
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
                "indexes": [models.Index(fields=["status", "next_attempt_at"], name="notice_due")],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("request", "channel", "recipient"), name="notice_once_per_recipient"
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("status__in", ["pending", "sending", "digest", "sent", "skipped", "dead"])),
                        name="notice_status_valid",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="ReachRule",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                (
                    "tier",
                    models.PositiveSmallIntegerField(
                        default=0, help_text="0: on arrival; 1: when still unclaimed at T1."
                    ),
                ),
                (
                    "channel",
                    models.CharField(
                        choices=[("email", "Email"), ("slack", "Slack"), ("browser", "Browser")], max_length=16
                    ),
                ),
                (
                    "audience",
                    models.CharField(
                        choices=[
                            ("members", "Every member of the queue"),
                            ("supervisors", "The queue's supervisors"),
                            ("people", "The people named on the rule (an on-call group)"),
                            ("slack_channel", "A Slack channel"),
                        ],
                        default="members",
                        max_length=16,
                    ),
                ),
                (
                    "slack_channel",
                    models.CharField(blank=True, help_text="Slack channel id, e.g. C0123456.", max_length=64),
                ),
                (
                    "min_priority",
                    models.IntegerField(blank=True, help_text="Only requests at or above this priority.", null=True),
                ),
                (
                    "people",
                    models.ManyToManyField(blank=True, related_name="reach_rules", to=settings.AUTH_USER_MODEL),
                ),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="reach_rules",
                        to="elicitation.queue",
                    ),
                ),
            ],
            options={
                "ordering": ["queue", "tier", "id"],
                "constraints": [
                    models.CheckConstraint(condition=models.Q(("tier__lte", 1)), name="reach_rule_tier_0_or_1"),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("audience", "slack_channel"), _negated=True),
                            models.Q(("channel", "slack"), models.Q(("slack_channel", ""), _negated=True)),
                            _connector="OR",
                        ),
                        name="reach_rule_slack_channel_needs_id",
                    ),
                ],
            },
        ),
    ]
