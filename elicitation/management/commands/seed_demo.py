import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from elicitation.flows import hosted_flows
from elicitation.models import Agent, ElicitationRequest, Mode, ReviewerToken, Scope
from elicitation.queue import accounts, clock, transitions

DEMO_REVIEWER = "reviewer"
DEMO_PASSWORD = "reviewer"  # the embedded demo's documented login
DEMO_AGENT = "demo-agent"
DEMO_TOKEN_NAME = "seed_demo"
DEMO_ADMIN = "admin"
SAMPLE_EXPIRES_IN = 30 * 24 * 3600  # samples stay open for a month of `make run`s

# One sample of each kind, so a fresh queue page is not empty. Created once (idempotency keys).
EVERY_FIELD_KIND: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the deployment?", "default": False},
        "environment": {
            "type": "string",
            "title": "Environment",
            "oneOf": [
                {"const": "staging", "title": "Staging"},
                {"const": "production", "title": "Production"},
            ],
        },
        "region": {"type": "string", "title": "Region", "enum": ["eu-west-1", "us-east-1", "ap-south-1"]},
        "checks": {
            "type": "array",
            "title": "Checks to run first",
            "items": {"type": "string", "enum": ["unit", "integration", "smoke"]},
            "minItems": 1,
        },
        "replicas": {"type": "integer", "title": "Replicas", "minimum": 1, "maximum": 20, "default": 3},
        "budget": {"type": "number", "title": "Budget (EUR)", "minimum": 0},
        "window": {"type": "string", "title": "Maintenance day", "format": "date"},
        "contact": {"type": "string", "title": "On-call e-mail", "format": "email"},
        "note": {"type": "string", "title": "Note for the agent", "maxLength": 500},
    },
    "required": ["approve", "environment"],
}
SECRET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"api_token": {"type": "string", "title": "Stripe API token", "sensitive": True}},
    "required": ["api_token"],
}


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
            # Like the agent key, the admin password is never stored in clear: each run sets a fresh one.
            admin_password = secrets.token_urlsafe(12)
            admin_user, _ = user_model.objects.get_or_create(
                username=DEMO_ADMIN, defaults={"email": "admin@localhost"}
            )
            admin_user.is_staff = admin_user.is_superuser = True
            admin_user.set_password(admin_password)
            admin_user.save()
            samples = self.create_samples(agent)
        self.stdout.write(f"Reviewer login: {DEMO_REVIEWER} / {DEMO_PASSWORD}  (queue: default)")
        self.stdout.write(f"Admin login: {DEMO_ADMIN} / {admin_password}  (/admin/)")
        self.stdout.write(f"Sample requests in the default queue: {samples}")
        self.stdout.write(f"REVIEWER_TOKEN={reviewer_token}")
        self.stdout.write(f"AGENT_KEY={key}")

    def create_samples(self, agent: Agent) -> int:
        common: dict[str, Any] = {"agent": agent, "queue_slug": "default", "expires_in": SAMPLE_EXPIRES_IN}
        transitions.create_request(
            **common,
            idempotency_key="demo-every-field",
            message="Deploy release 2.4 of the billing service? Every kind of field a form can hold.",
            mode=Mode.FORM,
            requested_schema=EVERY_FIELD_KIND,
            context={
                "server": "deploy-bot",
                "tool": "deploy",
                "arguments": {"service": "billing", "version": "2.4"},
            },
            priority=5,
        )
        transitions.create_request(
            **common,
            idempotency_key="demo-yes-no",
            message="Refund 120 EUR to order #10442?",
            mode=Mode.FORM,
            requested_schema={
                "type": "object",
                "properties": {"approve": {"type": "boolean", "title": "Approve the refund?"}},
                "required": ["approve"],
            },
            context={
                "server": "support-agent",
                "tool": "refund",
                "arguments": {"order": 10442, "amount": 120},
            },
        )
        transitions.create_request(
            **common,
            idempotency_key="demo-url-mode",
            message="Authorise the agent's access to the team calendar.",
            mode=Mode.URL,
            url="https://accounts.example.com/oauth/authorize?client_id=calendar-agent&scope=calendar.read",
            elicitation_id="demo-oauth-1",
        )
        hosted_flows.create_hosted_flow(
            **common,
            idempotency_key="demo-secret-flow",
            message="Paste the Stripe API token the agent needs (collected on ReviewHub's own page, encrypted).",
            requested_schema=SECRET_SCHEMA,
        )
        return ElicitationRequest.objects.filter(agent=agent, idempotency_key__startswith="demo-").count()
