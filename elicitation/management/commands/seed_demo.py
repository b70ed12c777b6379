from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from elicitation.models import Agent, ReviewerToken, Scope
from elicitation.queue import accounts, clock

DEMO_REVIEWER = "reviewer"
DEMO_PASSWORD = "reviewer"  # the embedded demo's documented login
DEMO_AGENT = "demo-agent"
DEMO_TOKEN_NAME = "seed_demo"


class Command(BaseCommand):
    help = (
        "Idempotently create the demo queue, reviewer and agent. Prints REVIEWER_TOKEN=… and AGENT_KEY=<key>."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        with transaction.atomic():
            (queue,) = accounts.ensure_queues(["default"])
            user_model = get_user_model()
            reviewer, created = user_model.objects.get_or_create(
                username=DEMO_REVIEWER, defaults={"email": "reviewer@localhost"}
            )
            if created:
                reviewer.set_password(DEMO_PASSWORD)
                reviewer.save()
            queue.members.add(reviewer)
            queue.supervisors.add(reviewer)
            agent = Agent.objects.filter(name=DEMO_AGENT).first()
            if agent is None:
                agent, key = accounts.create_agent(
                    DEMO_AGENT, queue_slugs=["default"], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
                )
            else:
                # The full key is never stored, so a re-run issues a fresh one (the old one stops working).
                agent.queues.add(queue)
                key = accounts.rotate_agent_key(agent)
            ReviewerToken.objects.filter(user=reviewer, name=DEMO_TOKEN_NAME, revoked_at__isnull=True).update(
                revoked_at=clock.now()
            )
            reviewer_token = accounts.create_reviewer_token(reviewer, DEMO_TOKEN_NAME)
        self.stdout.write(f"Reviewer login: {DEMO_REVIEWER} / {DEMO_PASSWORD}  (queue: default)")
        self.stdout.write(f"REVIEWER_TOKEN={reviewer_token}")
        self.stdout.write(f"AGENT_KEY={key}")
