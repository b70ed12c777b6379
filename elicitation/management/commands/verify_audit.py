from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from elicitation.models import RequestEvent
from elicitation.queue import audit


class Command(BaseCommand):
    help = (
        "Recompute every request's audit hash chain. Prints each edited, reordered or missing row with its id "
        "and exits with status 1 if any is found."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--request", action="append", help="Only this request id (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        problems = list(audit.verify_chains(options["request"]))
        for problem in problems:
            self.stdout.write(str(problem))
        events = RequestEvent.objects.count() if not options["request"] else None
        if problems:
            raise CommandError(f"Audit chain broken: {len(problems)} problem(s).", returncode=1)
        checked = f"{events} audit rows" if events is not None else "the requested chains"
        self.stdout.write(f"Audit chain intact: {checked} verified.")
