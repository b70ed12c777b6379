from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

TABLE = "elicitation_elicitationrequest"
# Must match selectors.SEARCH_DOCUMENT, the expression the history search filters on.
SEARCH_DOCUMENT = f'to_tsvector(\'simple\', "{TABLE}"."message" || \' \' || "{TABLE}"."context"::text)'


def create_search_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"CREATE INDEX IF NOT EXISTS request_search ON {TABLE} USING gin ({SEARCH_DOCUMENT})"
        )


def drop_search_index(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("DROP INDEX IF EXISTS request_search")


class Migration(migrations.Migration):
    """Schema for the reviewer workspace (history and search): the history's newest-first order, and on
    PostgreSQL a GIN full-text index over message and context (SQLite searches by substring without one)."""

    dependencies = [("elicitation", "0003_audit_actors_protected")]

    operations: list[migrations.operations.base.Operation] = [
        migrations.RunSQL(
            f"CREATE INDEX IF NOT EXISTS request_created ON {TABLE} (created_at)",
            "DROP INDEX IF EXISTS request_created",
        ),
        migrations.RunPython(create_search_index, drop_search_index),
    ]
