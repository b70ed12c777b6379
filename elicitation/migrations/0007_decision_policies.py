import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    """Schema for decision policies: quorum, rules, fixtures."""

    dependencies = [
        ("elicitation", "0006_reach"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="agent",
            name="owners",
            field=models.ManyToManyField(
                blank=True, related_name="owned_agents", to=settings.AUTH_USER_MODEL
            ),
        ),
        migrations.AddField(
            model_name="elicitationrequest",
            name="policy",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="elicitationrequest",
            name="result_meta",
            field=models.JSONField(blank=True, null=True),
        ),
        migrations.CreateModel(
            name="QueuePolicy",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                (
                    "mode",
                    models.CharField(
                        choices=[
                            ("human", "People answer; rules answer what they match"),
                            ("scripted", "Rules answer every request at once (fixtures for agent CI)"),
                        ],
                        default="human",
                        max_length=16,
                    ),
                ),
                (
                    "unmatched",
                    models.CharField(
                        choices=[
                            ("decline", "Decline, with the reason in the result's _meta"),
                            ("pending", "Leave it pending for a person"),
                        ],
                        default="decline",
                        max_length=16,
                    ),
                ),
                (
                    "round_cap",
                    models.PositiveSmallIntegerField(
                        default=5,
                        help_text="Scripted mode: input-required rounds answered per tool call before declining.",
                    ),
                ),
                ("quorum", models.JSONField(blank=True, null=True)),
                ("rules_version", models.PositiveIntegerField(default=0, editable=False)),
                (
                    "queue",
                    models.OneToOneField(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="policy",
                        to="elicitation.queue",
                    ),
                ),
            ],
            options={
                "verbose_name_plural": "queue policies",
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("mode__in", ["human", "scripted"])),
                        name="queue_policy_mode_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("round_cap__gte", 1)), name="queue_policy_round_cap_positive"
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="AnswerRule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("position", models.PositiveIntegerField(default=0)),
                ("name", models.CharField(max_length=200)),
                ("enabled", models.BooleanField(default=True)),
                ("match", models.JSONField(blank=True, default=dict)),
                (
                    "action",
                    models.CharField(
                        choices=[
                            ("accept", "Accept with the given content"),
                            ("decline", "Decline"),
                            ("cancel", "Cancel"),
                            ("route", "Route to another queue"),
                            ("require_quorum", "Require a quorum"),
                            ("set", "Set priority and/or deadline"),
                        ],
                        max_length=16,
                    ),
                ),
                ("content", models.JSONField(blank=True, null=True)),
                ("priority", models.IntegerField(blank=True, null=True)),
                ("deadline_seconds", models.PositiveIntegerField(blank=True, null=True)),
                ("quorum", models.JSONField(blank=True, null=True)),
                ("expires_at", models.DateTimeField(blank=True, null=True)),
                ("revoked_at", models.DateTimeField(blank=True, null=True)),
                ("created_at", models.DateTimeField(auto_now_add=True)),
                (
                    "created_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
                (
                    "queue",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="answer_rules",
                        to="elicitation.queue",
                    ),
                ),
                (
                    "remembered_from",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="elicitation.elicitationrequest",
                    ),
                ),
                (
                    "route_to",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="elicitation.queue",
                    ),
                ),
            ],
            options={
                "ordering": ["queue", "position", "id"],
                "permissions": [("remember_decision", "Can turn an answer into a remembered decision")],
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(
                            ("action__in", ["accept", "decline", "cancel", "route", "require_quorum", "set"])
                        ),
                        name="answer_rule_action_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("action", "route"), _negated=True),
                            ("route_to__isnull", False),
                            _connector="OR",
                        ),
                        name="answer_rule_route_needs_target",
                    ),
                ],
            },
        ),
        migrations.CreateModel(
            name="Approval",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("group", models.CharField(blank=True, max_length=150)),
                ("at", models.DateTimeField()),
                (
                    "request",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="approvals",
                        to="elicitation.elicitationrequest",
                    ),
                ),
                (
                    "reviewer",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={
                "ordering": ["id"],
                "constraints": [
                    models.UniqueConstraint(fields=("request", "reviewer"), name="approval_once_per_reviewer")
                ],
            },
        ),
    ]
