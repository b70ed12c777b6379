"""API keys for agents (`rh_…`) and reviewer scripts (`rhr_…`): random, shown once, stored as an HMAC with a
server-side pepper; and the one place a bearer credential is parsed and looked up, for every door (REST,
long-poll, WebSocket, MCP)."""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from elicitation.models import Agent, ReviewerToken
from elicitation.queue import access, prebuilt_sql


@dataclass(frozen=True)
class IssuedKey:
    full: str  # shown once
    prefix: str  # stored and shown afterwards, to tell keys apart
    hash: str


def hash_key(full_key: str, pepper: str | None = None) -> str:
    # A keyed HMAC rather than a slow hash: keys are 256-bit random, so brute force is moot, and
    # verification stays cheap on every request. The pepper keeps a leaked table from being checkable.
    secret = settings.API_KEY_PEPPER if pepper is None else pepper
    return hmac.new(secret.encode(), full_key.encode(), hashlib.sha256).hexdigest()


def previous_peppers() -> list[str]:
    return [p for p in settings.API_KEY_PEPPER_PREVIOUS if p and p != settings.API_KEY_PEPPER]


def issue_key(kind: str) -> IssuedKey:
    """`kind` is "rh" for agent keys and "rhr" for reviewer tokens."""
    prefix = secrets.token_hex(4)
    full = f"{kind}_{prefix}_{secrets.token_urlsafe(32)}"
    return IssuedKey(full=full, prefix=prefix, hash=hash_key(full))


KEYS_PER_QUERY = 500  # SQLite binds at most 999 parameters per statement


def split_prefix(full_key: str, kind: str) -> str | None:
    parts = full_key.split("_", 2)
    if len(parts) != 3 or parts[0] != kind or len(parts[1]) != 8:
        return None
    return parts[1]


def matching_pepper(full_key: str, stored_hash: str) -> str | None:
    """ "current" if `stored_hash` is the key's HMAC under API_KEY_PEPPER, "previous" if under one of
    API_KEY_PEPPER_PREVIOUS (the rotation window), else None. Each comparison is constant-time."""
    if hmac.compare_digest(hash_key(full_key), stored_hash):
        return "current"
    if any(hmac.compare_digest(hash_key(full_key, pepper), stored_hash) for pepper in previous_peppers()):
        return "previous"
    return None


def rehash_under_current_pepper(model: Any, pk: Any, full_key: str, stored_hash: str) -> None:
    """During a pepper rotation a key that signs in under the previous pepper is re-hashed under the current one
    (as Django upgrades password hashes at login): compare-and-set, so a concurrent rotation of the key wins."""
    model.objects.filter(pk=pk, key_hash=stored_hash).update(key_hash=hash_key(full_key))


def webhook_secret(agent_id: int, key_prefix: str) -> str:
    """The agent's webhook signing secret, derived so it never needs storing; rotating the key rotates it."""
    material = f"webhook:{agent_id}:{key_prefix}".encode()
    return "whsec_" + hmac.new(settings.API_KEY_PEPPER.encode(), material, hashlib.sha256).hexdigest()


def bearer_token(headers: Any) -> str | None:
    """The credential of an `Authorization: Bearer <token>` header, from Django's, DRF's or raw ASGI headers."""
    header = headers.get("Authorization") or headers.get("authorization") or ""
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def scope_bearer_token(scope: Any) -> str | None:
    """The bearer token of an ASGI connection scope (HTTP or WebSocket)."""
    headers = {
        key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope.get("headers", [])
    }
    return bearer_token(headers)


def is_agent_key(token: str) -> bool:
    """Whether a bearer credential is meant as an agent key (`rh_…`), so this door checks it as one."""
    return token.startswith("rh_")


def agent_for_key(full_key: str) -> Agent | None:
    """The active agent owning this key, or None. The prefix finds the row; the HMAC comparison is constant-time."""
    prefix = split_prefix(full_key, "rh")
    if prefix is None:
        return None
    # The key prefix is unique; the SELECT is built once per process (queue/prebuilt_sql.py).
    return _verified(prebuilt_sql.get_by(Agent, "key_prefix", prefix), full_key)


def agent_for_key_posting_to(full_key: str, slug: str) -> tuple[Agent | None, bool]:
    """`agent_for_key`, and whether that agent may post to the queue `slug` (`access.agent_may_post`), read in one
    statement: the MCP gateway's door asks both on every request, and a second round trip to the database cost
    more than either read (BENCHMARKS.md, #13)."""
    prefix = split_prefix(full_key, "rh")
    found = access.agent_by_key_prefix(prefix, may_post_to=slug) if prefix is not None else None
    if found is None:
        return None, False
    agent = _verified(found[0], full_key)
    return agent, agent is not None and found[1]


def agents_for_keys(full_keys: list[str]) -> dict[str, Agent | None]:
    """`agent_for_key` for many keys with one query per KEYS_PER_QUERY (the handshakes of a reconnect storm)."""
    prefixes = {full_key: split_prefix(full_key, "rh") for full_key in full_keys}
    wanted = sorted({prefix for prefix in prefixes.values() if prefix is not None})
    by_prefix: dict[str, Agent] = {}
    for start in range(0, len(wanted), KEYS_PER_QUERY):
        chunk = wanted[start : start + KEYS_PER_QUERY]
        by_prefix.update((agent.key_prefix, agent) for agent in Agent.objects.filter(key_prefix__in=chunk))
    return {
        full_key: _verified(by_prefix.get(prefix) if prefix else None, full_key)
        for full_key, prefix in prefixes.items()
    }


def _verified(agent: Agent | None, full_key: str) -> Agent | None:
    if agent is None or not agent.is_active:
        return None
    matched = matching_pepper(full_key, agent.key_hash)
    if matched is None:
        return None
    if matched == "previous":
        rehash_under_current_pepper(Agent, agent.pk, full_key, agent.key_hash)
    return agent


def reviewer_token_for_key(full_key: str) -> ReviewerToken | None:
    """The live reviewer token (with its active user) for this key, or None."""
    prefix = split_prefix(full_key, "rhr")
    row = ReviewerToken.objects.select_related("user").filter(key_prefix=prefix).first() if prefix else None
    if row is None or row.revoked_at is not None or not row.user.is_active:
        return None
    matched = matching_pepper(full_key, row.key_hash)
    if matched is None:
        return None
    if matched == "previous":
        rehash_under_current_pepper(ReviewerToken, row.pk, full_key, row.key_hash)
    return row
