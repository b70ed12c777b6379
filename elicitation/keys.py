"""API keys for agents and reviewer scripts: random, shown once, stored as an HMAC with a server-side pepper."""

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from django.conf import settings


@dataclass(frozen=True)
class IssuedKey:
    full: str  # shown once
    prefix: str  # stored and shown afterwards, to tell keys apart
    hash: str


def hash_key(full_key: str) -> str:
    # A keyed HMAC rather than a slow hash: keys are 256-bit random, so brute force is moot, and
    # verification stays cheap on every request. The pepper keeps a leaked table from being checkable.
    return hmac.new(settings.API_KEY_PEPPER.encode(), full_key.encode(), hashlib.sha256).hexdigest()


def issue_key(kind: str) -> IssuedKey:
    """`kind` is "rh" for agent keys and "rhr" for reviewer tokens."""
    prefix = secrets.token_hex(4)
    full = f"{kind}_{prefix}_{secrets.token_urlsafe(32)}"
    return IssuedKey(full=full, prefix=prefix, hash=hash_key(full))


def split_prefix(full_key: str, kind: str) -> str | None:
    parts = full_key.split("_", 2)
    if len(parts) != 3 or parts[0] != kind or len(parts[1]) != 8:
        return None
    return parts[1]


def key_matches(full_key: str, stored_hash: str) -> bool:
    return hmac.compare_digest(hash_key(full_key), stored_hash)


def webhook_secret(agent_id: int, key_prefix: str) -> str:
    """The agent's webhook signing secret, derived so it never needs storing; rotating the key rotates it."""
    material = f"webhook:{agent_id}:{key_prefix}".encode()
    return "whsec_" + hmac.new(settings.API_KEY_PEPPER.encode(), material, hashlib.sha256).hexdigest()
