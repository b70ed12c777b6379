from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from elicitation.management.doctor_checks import CHECKS, Finding, Level, run_checks


class Command(BaseCommand):
    help = (
        "Check the settings and the services they name (database, Redis, SMTP, Slack, ReviewHub at PUBLIC_URL). "
        "Prints each finding with its fix; exits 1 on any error."
    )
    # Django's system checks are one of doctor's checks: a failing one is reported with the rest, not raised first.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--warnings-only",
            action="store_true",
            help="Print only warnings and errors, and never fail (what `make run` runs before it serves).",
        )
        parser.add_argument(
            "--skip",
            action="append",
            default=[],
            choices=sorted(CHECKS),
            help="Leave out a check (repeatable).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        findings = run_checks(set(options["skip"]))
        warnings_only = options["warnings_only"]
        for finding in findings:
            if finding.level != Level.OK or not warnings_only:
                self.stdout.write(self.describe(finding))
        errors = sum(finding.level == Level.ERROR for finding in findings)
        warnings = sum(finding.level == Level.WARNING for finding in findings)
        if warnings_only:
            return
        summary = f"doctor: {errors} error(s), {warnings} warning(s)."
        if errors:
            raise CommandError(summary, returncode=1)
        self.stdout.write(self.style.SUCCESS(summary))

    def describe(self, finding: Finding) -> str:
        style = {
            Level.ERROR: self.style.ERROR,
            Level.WARNING: self.style.WARNING,
            Level.OK: self.style.SUCCESS,
        }
        line = f"{style[finding.level](f'[{finding.level}]')} {finding.subject}: {finding.problem}"
        return line + (f"\n    fix: {finding.fix}" if finding.fix else "")
