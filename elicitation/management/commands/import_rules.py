from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from elicitation.models import Queue
from elicitation.queue import rules
from elicitation.queue.errors import InvalidInput


class Command(BaseCommand):
    help = "Load a rules file (YAML) into a queue: its policy and rules become exactly what the file says."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", help="The slug of the queue (created when missing).")
        parser.add_argument("file", help="The rules file, e.g. one export_fixture wrote.")

    def handle(self, *args: Any, **options: Any) -> None:
        queue, _ = Queue.objects.get_or_create(slug=options["queue"], defaults={"name": options["queue"]})
        try:
            data = rules.load_yaml(Path(options["file"]).read_text(encoding="utf-8"))
            policy = rules.replace_policy(queue, data)
        except InvalidInput as exc:
            reasons = "; ".join(f"{path}: {reason}" for path, reason in exc.fields.items())
            raise CommandError(f"{exc.detail} {reasons}") from None
        count = len(rules.policy_data(queue)["rules"])
        self.stdout.write(f"Queue {queue.slug!r}: {policy.mode} mode, {count} rules.")
