import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import BaseCommand, CommandParser
from django.db import connection, transaction

from elicitation.flows import hosted_flows
from elicitation.models import Agent, ElicitationRequest, Mode, ReviewerToken, Scope
from elicitation.queue import accounts, clock, keys, transitions

DEMO_REVIEWER = "reviewer"
DEMO_PASSWORD = "reviewer"  # the embedded demo's documented login
DEMO_AGENT = "demo-agent"
DEMO_TOKEN_NAME = "seed_demo"
DEMO_ADMIN = "admin"
SAMPLE_EXPIRES_IN = 30 * 24 * 3600  # samples stay open for a month of `make run`s
CREDENTIALS_SUFFIX = "-demo-credentials.json"  # git-ignored

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


def default_credentials_path() -> Path:
    """Beside the SQLite database, named like its own -wal and -shm files, so `make clean` removes them together;
    on PostgreSQL, at the project root, named after the database."""
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite":
        return Path(name + CREDENTIALS_SUFFIX)
    return Path(settings.BASE_DIR) / f"{name}{CREDENTIALS_SUFFIX}"


def read_credentials(path: Path) -> dict[str, str]:
    """What the last run kept; nothing if the file is missing or unreadable (the run then issues fresh ones)."""
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(stored, dict):
        return {}
    return {name: value for name, value in stored.items() if isinstance(value, str)}


def write_credentials(path: Path, credentials: dict[str, str]) -> None:
    """Replace the file at once; mkstemp creates it 0600, so the keys are never readable by other users."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as file:
            json.dump(credentials, file, indent=2)
            file.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def kept_agent_key(agent: Agent, stored: str) -> str | None:
    verified = keys.agent_for_key(stored) if stored else None
    return stored if verified is not None and verified.pk == agent.pk else None


def kept_reviewer_token(reviewer: AbstractBaseUser, stored: str) -> str | None:
    token = keys.reviewer_token_for_key(stored) if stored else None
    if token is None or token.user_id != reviewer.pk or token.name != DEMO_TOKEN_NAME:
        return None
    return stored


class Command(BaseCommand):
    help = (
        "Idempotently create the demo queue, reviewer and agent. Prints REVIEWER_TOKEN=… and AGENT_KEY=<key>, "
        "the same on every run (kept in a 0600 file beside the database) until --rotate."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--rotate",
            action="store_true",
            help="Issue a new agent key, reviewer token and admin password; the previous ones stop working.",
        )
        parser.add_argument(
            "--credentials-file",
            type=Path,
            help=f"Where the demo credentials are kept (default: beside the SQLite database, *{CREDENTIALS_SUFFIX}).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["credentials_file"] or default_credentials_path()
        # Keys and passwords are stored only as hashes, so a run can print the previous ones only from this file;
        # each is reused while it still signs in, so agents and MCP hosts set up against the last run keep working.
        stored = {} if options["rotate"] else read_credentials(path)
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
                agent.queues.add(queue)
                key = kept_agent_key(agent, stored.get("agent_key", "")) or accounts.rotate_agent_key(agent)
            reviewer_token = kept_reviewer_token(reviewer, stored.get("reviewer_token", ""))
            if reviewer_token is None:
                ReviewerToken.objects.filter(
                    user=reviewer, name=DEMO_TOKEN_NAME, revoked_at__isnull=True
                ).update(revoked_at=clock.now())
                reviewer_token = accounts.create_reviewer_token(reviewer, DEMO_TOKEN_NAME)
            admin_user, _ = user_model.objects.get_or_create(
                username=DEMO_ADMIN, defaults={"email": "admin@localhost"}
            )
            admin_user.is_staff = admin_user.is_superuser = True
            admin_password = stored.get("admin_password", "")
            if not admin_password or not admin_user.check_password(admin_password):
                admin_password = secrets.token_urlsafe(12)
                admin_user.set_password(admin_password)
            admin_user.save()
            samples = self.create_samples(agent)
            write_credentials(
                path,
                {"agent_key": key, "reviewer_token": reviewer_token, "admin_password": admin_password},
            )
        self.stdout.write(f"Reviewer login: {DEMO_REVIEWER} / {DEMO_PASSWORD}  (queue: default)")
        self.stdout.write(f"Admin login: {DEMO_ADMIN} / {admin_password}  (/admin/)")
        self.stdout.write(f"Sample requests in the default queue: {samples}")
        self.stdout.write(f"Demo credentials kept in {path} (seed_demo --rotate issues new ones).")
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
