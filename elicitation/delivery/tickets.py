"""Short-lived, single-use WebSocket tickets for clients that cannot set an Authorization header (browsers).

`POST /api/v1/ws-ticket` (agent key in the header) returns one; the socket connects with `?ticket=…`. The key
itself never appears in a URL, where proxies and server logs would keep it. A ticket names the agent and its key
prefix, so rotating or revoking the key voids every ticket issued under it.
"""

import hashlib
import secrets
from urllib.parse import parse_qs

from django.core import signing
from django.core.cache import cache

from elicitation.models import Agent

TICKET_SALT = "reviewhub.ws-ticket"
TICKET_MAX_AGE_SECONDS = 60


def issue_ticket(agent: Agent) -> str:
    # The nonce makes every ticket distinct: two issued to one agent within the same second (the signature's
    # timestamp) would otherwise be one ticket, and the second socket would find it already used.
    payload = {"agent": agent.pk, "prefix": agent.key_prefix, "nonce": secrets.token_urlsafe(8)}
    return signing.dumps(payload, salt=TICKET_SALT)


def consume(ticket: str) -> bool:
    """Mark the ticket used; False if it already was. cache.add is atomic (and shared between processes when the
    cache is Redis), so of two sockets racing with one ticket only one gets in."""
    digest = hashlib.sha256(ticket.encode()).hexdigest()
    return bool(cache.add(f"ws-ticket:{digest}", 1, timeout=TICKET_MAX_AGE_SECONDS + 5))


def agent_for_ticket(query_string: str) -> Agent | None:
    ticket = parse_qs(query_string).get("ticket", [""])[0]
    if not ticket:
        return None
    try:
        data = signing.loads(ticket, salt=TICKET_SALT, max_age=TICKET_MAX_AGE_SECONDS)
    except signing.BadSignature:
        return None
    if not isinstance(data, dict) or not consume(ticket):
        return None
    agent_id, prefix = data.get("agent"), data.get("prefix")
    if not isinstance(agent_id, int) or not isinstance(prefix, str):
        return None
    return Agent.objects.filter(pk=agent_id, key_prefix=prefix, revoked_at__isnull=True).first()
