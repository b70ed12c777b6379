import re
from datetime import datetime, timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.dateparse import parse_datetime

from elicitation.models import Queue
from elicitation.queue import clock, rules
from elicitation.queue.errors import InvalidInput

DURATION = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def since_time(text: str) -> datetime:
    """`--since`: an ISO 8601 date-time, or a duration back from now (90m, 24h, 7d)."""
    duration = DURATION.match(text)
    if duration:
        return clock.now() - timedelta(**{UNITS[duration.group(2)]: int(duration.group(1))})
    parsed = parse_datetime(text)
    if parsed is None or parsed.tzinfo is None:
        raise CommandError(
            "--since takes an ISO 8601 date-time with a time zone, or a duration like 7d or 24h"
        )
    return parsed


class Command(BaseCommand):
    help = (
        "Turn the answers people gave in a queue into a rules file (YAML) for a scripted queue: loading it replays "
        "the same results for the same requests. Load it with `import_rules` or PUT /api/v1/queues/<slug>/rules."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", help="The slug of the queue whose answers to export.")
        parser.add_argument("--since", help="Only answers given since: ISO 8601 date-time, or 7d, 24h, 90m.")
        parser.add_argument("--output", "-o", help="Write to this file instead of standard output.")
        parser.add_argument(
            "--ignore-arguments",
            default="",
            metavar="NAMES",
            help="Comma-separated arguments that change from run to run (timestamp,request_id; dotted when nested): "
            "left out of every match, so calls differing only in them replay the same answer.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        queue = Queue.objects.filter(slug=options["queue"]).first()
        if queue is None:
            raise CommandError(f"No queue {options['queue']!r}.")
        since = since_time(options["since"]) if options["since"] else None
        ignored = [name for name in options["ignore_arguments"].split(",") if name.strip()]
        try:
            fixture = rules.fixture_from_answers(queue, since=since, ignore_arguments=ignored)
        except InvalidInput as exc:
            reasons = "; ".join(f"{where}: {reason}" for where, reason in exc.fields.items())
            raise CommandError(f"--ignore-arguments: {reasons}") from None
        text = rules.dump_yaml(fixture)
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8") as file:
                file.write(text)
        else:
            self.stdout.write(text, ending="")
