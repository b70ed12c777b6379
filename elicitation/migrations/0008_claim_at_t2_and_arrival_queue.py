from typing import Any

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import F


def backfill_arrival_queue(apps: Any, schema_editor: Any) -> None:
    """A request's arrival queue, from the audit trail: where its first `escalated` row says it came from, or its
    current queue when it never moved (every move writes an `escalated` row naming `from_queue`)."""
    request_model = apps.get_model("elicitation", "ElicitationRequest")
    event_model = apps.get_model("elicitation", "RequestEvent")
    queue_model = apps.get_model("elicitation", "Queue")
    request_model.objects.filter(arrival_queue__isnull=True).update(arrival_queue=F("queue"))
    queue_by_slug = dict(queue_model.objects.values_list("slug", "pk"))
    first_from: dict[Any, int] = {}
    moves = event_model.objects.filter(kind="escalated").order_by("id").values_list("request_id", "detail")
    for request_id, detail in moves.iterator():
        if request_id in first_from:
            continue
        queue_id = queue_by_slug.get((detail or {}).get("from_queue"))
        if queue_id is not None:
            first_from[request_id] = queue_id
    for request_id, queue_id in first_from.items():
        request_model.objects.filter(pk=request_id).update(arrival_queue=queue_id)


class Migration(migrations.Migration):
    """A claim stops the escalation chain's move at T2 (per policy), and requests remember where they arrived."""

    dependencies = [
        ("elicitation", "0007_decision_policies"),
    ]

    operations: list[migrations.operations.base.Operation] = [
        migrations.AddField(
            model_name="elicitationrequest",
            name="arrival_queue",
            field=models.ForeignKey(
                blank=True,
                editable=False,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="+",
                to="elicitation.queue",
            ),
        ),
        migrations.AddField(
            model_name="escalationpolicy",
            name="claimed_at_t2",
            field=models.CharField(
                choices=[
                    ("keep", "Leave it with the reviewer; tell nobody"),
                    ("notify", "Leave it with the reviewer; tell them and the queue's supervisors"),
                    ("move", "Move it anyway, out of the reviewer's hands"),
                ],
                default="notify",
                help_text="What T2 does to a request a reviewer holds. A lease that ran out resumes the chain: "
                "the next sweep moves the request.",
                max_length=8,
                verbose_name="claimed at T2",
            ),
        ),
        migrations.AddConstraint(
            model_name="escalationpolicy",
            constraint=models.CheckConstraint(
                condition=models.Q(("claimed_at_t2__in", ["keep", "notify", "move"])),
                name="escalation_policy_claimed_at_t2_valid",
            ),
        ),
        # Last: rows updated in this transaction would stop a later ALTER TABLE on PostgreSQL (pending triggers).
        migrations.RunPython(backfill_arrival_queue, migrations.RunPython.noop, elidable=True),
    ]
