from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from elicitation.management.queue_arguments import add_queue_arguments, checked_queue_slugs
from elicitation.queue import accounts


class Command(BaseCommand):
    help = "Create (or update) a reviewer and add them to queues."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        add_queue_arguments(parser)
        parser.add_argument(
            "--password-file", help="Read the password from this file (else the account has none)."
        )
        parser.add_argument("--email", default="")
        parser.add_argument(
            "--token", action="store_true", help="Also issue an API token (printed once, last line)."
        )
        parser.add_argument(
            "--supervisor", action="store_true", help="Also make them a supervisor of the queues."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        user_model = get_user_model()
        password = self.read_password(options["password_file"]) if options["password_file"] else None
        existing = user_model.objects.filter(username=options["username"]).first()
        candidate = existing or user_model(username=options["username"], email=options["email"])
        if password is not None:
            try:  # AUTH_PASSWORD_VALIDATORS, as the admin and the password-change page apply them
                validate_password(password, candidate)
            except ValidationError as exc:
                raise CommandError("The password is too weak: " + " ".join(exc.messages)) from None
        slugs = checked_queue_slugs(options["queues"], create=options["create_queues"])
        user, created = user_model.objects.get_or_create(username=options["username"])
        if options["email"]:
            user.email = options["email"]
        if password is not None:
            user.set_password(password)
        elif created:
            user.set_unusable_password()
        user.save()
        queues = accounts.ensure_queues(slugs)
        for queue in queues:
            queue.members.add(user)
            if options["supervisor"]:
                queue.supervisors.add(user)
        verb = "Created" if created else "Updated"
        self.stdout.write(
            f"{verb} reviewer {user.get_username()!r} on queues {', '.join(q.slug for q in queues)}."
        )
        if options["token"]:
            self.stdout.write("The token below is shown once; store it now.")
            self.stdout.write(accounts.create_reviewer_token(user, "create_reviewer"))

    def read_password(self, path: str) -> str:
        try:
            password = Path(path).read_text().strip()
        except OSError as exc:
            raise CommandError(f"Cannot read the password file: {exc.strerror}") from None
        if not password:
            raise CommandError("The password file is empty.")
        return password
