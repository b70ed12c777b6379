from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser, OutputWrapper
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from elicitation.queue import audit


def parse_since(raw: str) -> datetime:
    """An ISO date or date-time; naive values are read as UTC."""
    moment = parse_datetime(raw)
    if moment is None:
        day = parse_date(raw)
        if day is None:
            raise CommandError(
                f"--since {raw!r} is not an ISO date or date-time (e.g. 2026-01-31T12:00:00Z)."
            )
        moment = datetime(day.year, day.month, day.day)
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, UTC)
    return moment


class Command(BaseCommand):
    help = "Export the audit trail (every request transition and reviewer view) as CSV or JSON Lines."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--format", choices=["csv", "jsonl"], default="jsonl")
        parser.add_argument("--since", help="Only events at or after this ISO date/date-time.")
        parser.add_argument("--output", help="File to write; standard output when omitted.")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            since = parse_since(options["since"]) if options["since"] else None
        except ValueError as exc:  # parse_datetime raises on well-formed but impossible values
            raise CommandError(f"--since {options['since']!r}: {exc}") from None
        rows = audit.export_rows(audit.audit_events(since))
        if options["output"]:
            with open(options["output"], "w", encoding="utf-8", newline="") as out:
                count = audit.write(rows, options["format"], out)
            self.stderr.write(f"Wrote {count} audit event(s) to {options['output']}.")
        else:
            audit.write(rows, options["format"], _Unterminated(self.stdout))


class _Unterminated:
    """Chunks already carry their newlines; OutputWrapper would add one to each."""

    def __init__(self, out: OutputWrapper) -> None:
        self.out = out

    def write(self, text: str) -> None:
        self.out.write(text, ending="")
