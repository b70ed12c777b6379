from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from elicitation.management.queue_arguments import add_queue_arguments, checked_queue_slugs
from elicitation.models import Agent, Scope
from elicitation.queue import accounts
from elicitation.queue.keys import webhook_secret


class Command(BaseCommand):
    help = "Create an agent with a new API key. The key is printed once, as the last line."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        add_queue_arguments(parser)
        parser.add_argument(
            "--scopes", default="requests", help=f"Comma-separated: {', '.join(Scope.values)}"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        scopes = [scope.strip() for scope in options["scopes"].split(",") if scope.strip()]
        unknown = set(scopes) - set(Scope.values)
        if unknown:
            raise CommandError(f"Unknown scope(s): {', '.join(sorted(unknown))}")
        if Agent.objects.filter(name=options["name"]).exists():
            raise CommandError(
                f"An agent named {options['name']!r} exists; rotate its key in the admin instead."
            )
        queues = checked_queue_slugs(options["queues"], create=options["create_queues"])
        agent, key = accounts.create_agent(options["name"], queue_slugs=queues, scopes=scopes)
        self.stdout.write(
            f"Agent {agent.name!r} on queues {', '.join(queues)} with scopes {', '.join(scopes)}."
        )
        self.stdout.write(f"Webhook signing secret: {webhook_secret(agent.pk, agent.key_prefix)}")
        self.stdout.write("The key below is shown once; store it now.")
        self.stdout.write(key)
