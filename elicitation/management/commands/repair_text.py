"""Find and repair text stored before the API refused lone UTF-16 surrogates (elicitation/queue/untrusted_json.py).

Such a string cannot be encoded as UTF-8: pages and listings now render it as U+FFFD, and this command rewrites
the stored value the same way so exports, pushes and webhooks carry valid text again. Audit rows are
hash-chained and append-only: they are counted, never changed (their export escapes the characters).
"""

from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import models, transaction

from elicitation.models import AgentEvent, Draft, ElicitationRequest, HostedFlow, RequestEvent
from elicitation.queue import untrusted_json

REPAIRED: list[type[models.Model]] = [ElicitationRequest, Draft, AgentEvent, HostedFlow]
REPORTED_ONLY: list[type[models.Model]] = [RequestEvent]
TEXT_FIELDS = (models.CharField, models.TextField, models.JSONField)
BATCH = 500


def text_fields(model: type[models.Model]) -> list[str]:
    return [
        field.name
        for field in model._meta.get_fields()
        if isinstance(field, TEXT_FIELDS) and not field.is_relation and field.concrete
    ]


def poisoned_rows(model: type[models.Model]) -> list[tuple[Any, dict[str, Any]]]:
    """(pk, {field: repaired value}) for every row of `model` holding a lone surrogate."""
    names = text_fields(model)
    found: list[tuple[Any, dict[str, Any]]] = []
    for row in model._default_manager.values_list("pk", *names).iterator(chunk_size=BATCH):
        changes = {
            name: untrusted_json.scrub(value)
            for name, value in zip(names, row[1:], strict=True)
            if value is not None and untrusted_json.needs_scrub(value)
        }
        if changes:
            found.append((row[0], changes))
    return found


class Command(BaseCommand):
    help = "Repair stored text holding lone UTF-16 surrogates (replaced by U+FFFD). --dry-run only reports."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help="Report what would change; change nothing."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        dry_run = options["dry_run"]
        total = 0
        for model in REPAIRED:
            rows = poisoned_rows(model)
            total += len(rows)
            for pk, changes in rows:
                self.stdout.write(f"{model.__name__} {pk}: {', '.join(sorted(changes))}")
            if rows and not dry_run:
                with transaction.atomic():
                    for pk, changes in rows:
                        model._default_manager.filter(pk=pk).update(**changes)
        for model in REPORTED_ONLY:
            rows = poisoned_rows(model)
            for pk, changes in rows:
                self.stdout.write(f"{model.__name__} {pk}: {', '.join(sorted(changes))} (append-only; kept)")
        verb = "would repair" if dry_run else "repaired"
        self.stdout.write(f"{verb} {total} row(s)")
