"""Agents, reviewer script tokens and queues: creating them, and revoking or rotating their keys."""

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction

from elicitation.models import Agent, Queue, ReviewerToken
from elicitation.queue import clock, signals
from elicitation.queue.keys import IssuedKey, issue_key


def create_agent(name: str, *, queue_slugs: list[str], scopes: list[str] | None = None) -> tuple[Agent, str]:
    """Create an agent and return its full key, which is never stored or shown again."""
    key = issue_key("rh")
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name, key_prefix=key.prefix, key_hash=key.hash, scopes=scopes or ["requests"]
        )
        agent.queues.set(ensure_queues(queue_slugs))
    return agent, key.full


def rotate_agent_key(agent: Agent) -> str:
    key: IssuedKey = issue_key("rh")
    Agent.objects.filter(pk=agent.pk).update(key_prefix=key.prefix, key_hash=key.hash)
    agent.key_prefix, agent.key_hash = key.prefix, key.hash
    signals.agent_key_changed.send(sender=Agent, agent_id=agent.pk)
    return key.full


def revoke_agent(agent: Agent) -> None:
    """Revocation is immediate: the next request is refused and open sockets are closed."""
    now = clock.now()
    Agent.objects.filter(pk=agent.pk, revoked_at__isnull=True).update(revoked_at=now)
    agent.revoked_at = agent.revoked_at or now
    signals.agent_key_changed.send(sender=Agent, agent_id=agent.pk)


def create_reviewer_token(user: User, name: str = "") -> str:
    key = issue_key("rhr")
    ReviewerToken.objects.create(user=user, name=name, key_prefix=key.prefix, key_hash=key.hash)
    return key.full


def revoke_reviewer_token(token: ReviewerToken) -> None:
    """Immediate: the token's next request is refused."""
    now = clock.now()
    ReviewerToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    token.revoked_at = token.revoked_at or now


def ensure_queues(slugs: list[str]) -> list[Queue]:
    queues = []
    for slug in slugs:
        queue, _ = Queue.objects.get_or_create(
            slug=slug,
            defaults={
                "name": slug.replace("-", " ").title(),
                "default_deadline_seconds": settings.DEFAULT_DEADLINE_SECONDS,
                "lease_seconds": settings.DEFAULT_LEASE_SECONDS,
            },
        )
        queues.append(queue)
    return queues
