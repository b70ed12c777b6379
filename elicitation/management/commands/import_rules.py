"""`manage.py import_rules QUEUE FILE [--as USER]`: a rule file (YAML, or JSON) becomes the queue's policy.

Whoever runs manage.py holds the server's settings and database already, so by default the command writes as the
operator: routes may target any existing queue, and a missing queue is created. `--as USER` writes as that user
instead, through the same checks as the API and the admin (a CI job loading a team's file): the queue must exist
and be one USER supervises, and so must every route target."""

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser

from elicitation.models import Queue
from elicitation.queue import access, rules
from elicitation.queue.errors import InvalidInput


class Command(BaseCommand):
    help = "Load a rules file (YAML) into a queue: its policy and rules become exactly what the file says."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("queue", help="The slug of the queue (created when missing, unless --as).")
        parser.add_argument("file", help="The rules file, e.g. one export_fixture wrote.")
        parser.add_argument(
            "--as",
            dest="as_user",
            metavar="USER",
            help="Write as this user: the queue and every route target must be queues USER supervises.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user = self.writer(options["as_user"])
        if user is None:
            queue, _ = Queue.objects.get_or_create(slug=options["queue"], defaults={"name": options["queue"]})
        else:
            found = Queue.objects.filter(slug=options["queue"]).first()
            if found is None or not access.can_supervise(user, found):
                raise CommandError(f"{options['queue']!r}: no queue of that name that {user} supervises.")
            queue = found
        path = Path(options["file"])
        try:
            if path.stat().st_size > rules.MAX_RULE_FILE_BYTES:  # refused before it is read into memory
                raise CommandError(f"The rule file is over {rules.MAX_RULE_FILE_BYTES} bytes.")
            text = path.read_bytes()
        except OSError as exc:
            raise CommandError(f"{path}: {exc.strerror}") from None
        try:
            data = rules.load_rule_file(text, syntax="yaml")
            policy = rules.replace_policy(queue, data, user=user)
        except InvalidInput as exc:
            reasons = "; ".join(f"{where}: {reason}" for where, reason in exc.fields.items())
            raise CommandError(f"{path}: {exc.detail} {reasons}") from None
        count = len(rules.policy_data(queue)["rules"])
        self.stdout.write(f"Queue {queue.slug!r}: {policy.mode} mode, {count} rules.")

    def writer(self, username: str | None) -> Any:
        if username is None:
            return None
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user {username!r}.")
        return user
