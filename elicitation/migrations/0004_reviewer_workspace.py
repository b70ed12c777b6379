from django.db import migrations


class Migration(migrations.Migration):
    """Schema for the reviewer workspace (history and search)."""

    dependencies = [("elicitation", "0003_audit_actors_protected")]

    operations: list[migrations.operations.base.Operation] = []
