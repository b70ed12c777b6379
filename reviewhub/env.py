"""Reading settings from the environment: small typed helpers that fail loudly (ImproperlyConfigured, naming the
variable and what it should look like) instead of starting with a value nobody meant."""

import base64
import binascii
import os
import re
from urllib.parse import urlsplit

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.core.exceptions import ImproperlyConfigured

from reviewhub.rates import Rate, parse_rate


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true/false, yes/no, on/off or 1/0.")


def env_int(name: str, default: int, *, minimum: int = 0) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if value < minimum:
        raise ImproperlyConfigured(f"{name}={value} must be at least {minimum}.")
    return value


def env_ints(name: str, default: list[int], *, count: int, minimum: int = 0) -> tuple[int, ...]:
    """`count` comma-separated whole numbers, each at least `minimum`."""
    raw = os.environ.get(name, "")
    if not raw.strip():
        return tuple(default)
    try:
        values = tuple(int(item) for item in raw.split(","))
    except ValueError:
        values = ()
    if len(values) != count or min(values) < minimum:
        raise ImproperlyConfigured(
            f"{name}={raw!r} must be {count} comma-separated whole numbers of at least {minimum}."
        )
    return values


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_origins(name: str) -> list[str]:
    """Comma-separated web origins, `scheme://host[:port]`, written as browsers send them (lower case, no default
    port), so that an `Origin` header compares equal: `https://App.example:443` lists `https://app.example`."""
    origins: list[str] = []
    for item in env_list(name, []):
        # Scheme, host (a name, IPv4 or bracketed IPv6), port; nothing after it, not even a slash.
        match = re.fullmatch(
            r"(https?)://([a-z0-9-]+(?:\.[a-z0-9-]+)*|\[[0-9a-f:.]+\])(?::([0-9]{1,5}))?", item, re.IGNORECASE
        )
        port = int(match.group(3)) if match and match.group(3) else None
        if match is None or port == 0 or (port is not None and port > 65535):
            raise ImproperlyConfigured(
                f"{name} entry {item!r} is not a web origin; write scheme://host[:port] with http or https, "
                "no path, no trailing slash (e.g. https://app.example.com or http://localhost:5173)."
            )
        scheme, host = match.group(1).lower(), match.group(2).lower()
        default_port = 443 if scheme == "https" else 80
        origins.append(f"{scheme}://{host}" + ("" if port in (None, default_port) else f":{port}"))
    return origins


def env_rate(name: str, default: str) -> Rate | None:
    """A request rate such as `600/min` (reviewhub/rates.py), or `off` (None)."""
    raw = os.environ.get(name, default)
    try:
        return parse_rate(raw)
    except ValueError:
        raise ImproperlyConfigured(
            f"{name}={raw.strip().lower()!r} is not a rate; use N/second, N/min, N/hour, N/day or off."
        ) from None


def env_issuer(name: str) -> str:
    """An OpenID Connect issuer, exactly as the provider writes it in its tokens' `iss` (a trailing slash counts):
    https, or http on a loopback host (a provider on the same machine)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return ""
    parts = urlsplit(raw)
    secure = parts.scheme == "https" or (
        parts.scheme == "http" and parts.hostname in {"127.0.0.1", "localhost", "::1"}
    )
    if not secure or not parts.hostname or parts.query or parts.fragment:
        raise ImproperlyConfigured(
            f"{name}={raw!r} is not an issuer; write https://host[/path] as the provider's discovery document "
            "names it (no query, no fragment; http only on a loopback host)."
        )
    return raw


def env_group_queues(name: str) -> dict[str, tuple[str, ...]]:
    """`group=queue-slug` or `group=queue-slug:supervisor`, comma-separated; a group may be listed more than once."""
    mapping: dict[str, list[str]] = {}
    for item in env_list(name, []):
        group, sep, target = item.rpartition("=")
        group, target = group.strip(), target.strip()
        if not sep or not group or not re.fullmatch(r"[-a-zA-Z0-9_]+", target.removesuffix(":supervisor")):
            raise ImproperlyConfigured(
                f"{name} entry {item!r} must be group=queue-slug or group=queue-slug:supervisor."
            )
        mapping.setdefault(group, []).append(target)
    return {group: tuple(targets) for group, targets in mapping.items()}


def env_flow_keys(name: str, secret_key: str) -> dict[str, bytes]:
    """Hosted-flow AES-256-GCM keys from `k2:<base64 32 bytes>,k1:<base64>`; the first encrypts, all decrypt.

    Unset, one key ("derived") is derived from SECRET_KEY with HKDF: fine embedded, but then rotating
    SECRET_KEY makes stored flow ciphertexts undecryptable, so deployments should set the variable.
    """
    raw = os.environ.get(name, "").strip()
    if not raw:
        hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"reviewhub hosted-flow key v1")
        return {"derived": hkdf.derive(secret_key.encode())}
    keys: dict[str, bytes] = {}
    for index, item in enumerate(raw.split(",")):
        key_id, sep, encoded = item.strip().partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", key_id):
            raise ImproperlyConfigured(
                f"{name} entry {index + 1} must be <id>:<base64 key>, the id 1-32 letters, digits, _ or -."
            )
        if key_id in keys:
            raise ImproperlyConfigured(f"{name} lists key id {key_id!r} twice.")
        encoded = encoded.strip()
        # Standard or URL-safe alphabet; validate=True refuses stray characters instead of skipping them.
        altchars = b"-_" if "-" in encoded or "_" in encoded else None
        try:
            key = base64.b64decode(encoded, altchars=altchars, validate=True)
        except (binascii.Error, ValueError):
            raise ImproperlyConfigured(f"{name} key {key_id!r} is not valid base64.") from None
        if len(key) != 32:
            raise ImproperlyConfigured(f"{name} key {key_id!r} is {len(key)} bytes; AES-256 needs 32.")
        keys[key_id] = key
    return keys
