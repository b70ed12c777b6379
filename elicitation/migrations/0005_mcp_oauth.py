from django.db import migrations


class Migration(migrations.Migration):
    """Schema for MCP OAuth sign-in."""

    dependencies = [("elicitation", "0004_reviewer_workspace")]

    operations: list[migrations.operations.base.Operation] = []
