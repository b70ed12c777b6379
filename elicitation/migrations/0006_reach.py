from django.db import migrations


class Migration(migrations.Migration):
    """Schema for reaching reviewers: Slack, e-mail, escalation."""

    dependencies = [("elicitation", "0005_mcp_oauth")]

    operations: list[migrations.operations.base.Operation] = []
