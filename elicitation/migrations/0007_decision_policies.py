from django.db import migrations


class Migration(migrations.Migration):
    """Schema for decision policies: quorum, rules, fixtures."""

    dependencies = [("elicitation", "0006_reach")]

    operations: list[migrations.operations.base.Operation] = []
