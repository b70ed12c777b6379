"""Signed webhook delivery of agent events: signing, verification, one attempt, backoff, dead letters, replay.

Each (event, URL) pair is one WebhookDelivery row; its id is the idempotency id a receiver deduplicates on, and
it stays the same across retries and replays. An attempt first claims the row with a compare-and-set on
`next_attempt_at`, so a Celery retry and the `retry_due_webhooks` sweep never POST the same delivery at once.

Scheduling: `deliver_webhook` (elicitation.ops.tasks) makes one attempt. With a broker, a failed attempt schedules the
next one by Celery countdown. With eager Celery (the embedded default) a countdown would run at once, inside the
reviewer's request, so the attempt only records `next_attempt_at` and the periodic sweep sends it when due.
"""

import hashlib
import hmac
import ipaddress
import json
import logging
import random
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.db.models import F, Q

from elicitation.models import AgentEvent, DeliveryStatus, WebhookDelivery
from elicitation.queue import clock
from elicitation.queue.keys import webhook_secret

logger = logging.getLogger(__name__)

SIGNATURE_HEADER = "ReviewHub-Signature"
DELIVERY_HEADER = "ReviewHub-Delivery"
EVENT_HEADER = "ReviewHub-Event"
# An attempt in flight leases its row this long: a worker that died mid-POST is retried once the lease lapses.
ATTEMPT_LEASE_SECONDS = 60
# Inline (eager) attempts run in a reviewer's request after commit, so they get a tighter budget.
EAGER_TIMEOUT_SECONDS = 2.0
# A countdown task may wake a little before `next_attempt_at` on a worker whose clock runs ahead.
CLOCK_SLACK = timedelta(seconds=1)
SWEEP_BATCH = 100
MAX_ERROR_LENGTH = 500


# --- signing ---------------------------------------------------------------------------------------------------


def payload_body(payload: dict[str, Any]) -> bytes:
    """The exact bytes POSTed and signed: compact JSON with sorted keys."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


def compute_signature(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()


def signature_header(secret: str, body: bytes, timestamp: int | None = None) -> str:
    moment = int(time.time()) if timestamp is None else timestamp
    return f"t={moment},v1={compute_signature(secret, moment, body)}"


def verify_signature(
    secret: str,
    header: str,
    body: bytes,
    tolerance: int = 300,
    now: float | None = None,
) -> bool:
    """A receiver's check of `ReviewHub-Signature: t=<unix>,v1=<hex>`. Needs only hmac, hashlib and time:
    the README copies this function as it is.

    True when the timestamp is within `tolerance` seconds of now (a replayed old request fails) and one of the
    `v1` values is the HMAC-SHA256 of `"<t>." + body` under the agent's signing secret.
    """
    fields = [item.strip().split("=", 1) for item in header.split(",")]
    pairs = [(field[0], field[1]) for field in fields if len(field) == 2]
    timestamps = [value for key, value in pairs if key == "t"]
    if len(timestamps) != 1 or not timestamps[0].isdigit():
        return False
    timestamp = int(timestamps[0])
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    signed = f"{timestamp}.".encode() + body
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, value) for key, value in pairs if key == "v1")


# --- scheduling ------------------------------------------------------------------------------------------------


def retry_delay(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failures: full jitter under a doubling, capped ceiling."""
    ceiling = min(
        float(settings.WEBHOOK_BACKOFF_CAP_SECONDS),
        float(settings.WEBHOOK_BACKOFF_BASE_SECONDS) * 2 ** max(attempts - 1, 0),
    )
    return random.uniform(0, ceiling)  # noqa: S311 - jitter, not cryptography


def schedule_delivery(event: AgentEvent, url: str) -> WebhookDelivery:
    """Record the delivery with the event (same transaction); its first attempt is queued after commit."""
    return WebhookDelivery.objects.create(event=event, url=url, next_attempt_at=clock.now())


def attempt_timeout(eager: bool) -> float:
    configured = float(settings.WEBHOOK_TIMEOUT_SECONDS)
    return min(configured, EAGER_TIMEOUT_SECONDS) if eager else configured


def replay_delivery(delivery: WebhookDelivery) -> WebhookDelivery:
    """Reset a delivery to its first attempt (the admin's replay action; it then queues it), under the same delivery id so a
    receiver that did process it can tell. Works for dead, delivered and pending deliveries alike."""
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        status=DeliveryStatus.PENDING,
        attempts=0,
        next_attempt_at=clock.now(),
        last_error="",
        last_status_code=None,
        delivered_at=None,
    )
    delivery.refresh_from_db()
    return delivery


def due_delivery_ids(grace_seconds: float = 0, limit: int = SWEEP_BATCH) -> list[str]:
    cutoff = clock.now() - timedelta(seconds=grace_seconds)
    due = WebhookDelivery.objects.filter(status=DeliveryStatus.PENDING, next_attempt_at__lte=cutoff)
    return [str(pk) for pk in due.order_by("next_attempt_at").values_list("pk", flat=True)[:limit]]


# --- one attempt -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AttemptOutcome:
    status: str  # delivered | pending | dead | skipped
    retry_in: float | None = None  # seconds until the next attempt, when one is due


def claim_attempt(delivery_id: str) -> bool:
    """Lease the row for one attempt. False when it is done, not due yet, or another attempt holds it."""
    now = clock.now()
    return bool(
        WebhookDelivery.objects.filter(pk=delivery_id, status=DeliveryStatus.PENDING)
        .filter(Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now + CLOCK_SLACK))
        .update(next_attempt_at=now + timedelta(seconds=ATTEMPT_LEASE_SECONDS))
    )


# IPv6 forms that carry an IPv4 address a host or gateway may route to: IPv4-compatible (`::a.b.c.d`, deprecated),
# NAT64 (well-known and local-use prefixes). IPv4-mapped, 6to4 and Teredo are read by ipaddress itself.
IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
NAT64_PREFIXES = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address stands for (`::ffff:127.0.0.1`, `::7f00:1`, `2002:7f00:1::`,
    `64:ff9b::7f00:1`, Teredo), which is where a packet to it may end up."""
    found: list[ipaddress.IPv4Address] = []
    if address.ipv4_mapped is not None:
        found.append(address.ipv4_mapped)
    if address.sixtofour is not None:
        found.append(address.sixtofour)
    if address.teredo is not None:
        found.extend(address.teredo)
    low32 = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in IPV4_COMPATIBLE and int(address) > 1:  # not :: or ::1, which are refused as they are
        found.append(low32)
    if any(address in prefix for prefix in NAT64_PREFIXES):
        found.append(low32)
    return found


def is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if not address.is_global or address.is_multicast:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        return all(is_public(inner) for inner in embedded_ipv4(address))
    return True


def resolve_callback(url: str) -> tuple[str | None, str | None]:
    """(address to connect to, refusal): every address `url`'s host resolves to must be public (not loopback,
    private, link-local, reserved, multicast, nor an IPv6 form embedding such an IPv4 address); the first is
    the one to connect to. Agents choose callback URLs, so without this they could make the server POST into its
    own network. (None, None) when the name does not resolve: the POST then fails with its own clear error."""
    host = urlsplit(url).hostname
    if not host:
        return None, "(no host)"
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return None, None
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        if not is_public(address):
            return None, str(address)
    return (str(addresses[0]) if addresses else None), None


def pinned_target(url: str, address: str) -> tuple[str, dict[str, str], dict[str, Any]]:
    """`url` rewritten to connect to `address`, the one that was checked, so a name re-pointed between the check
    and the connection (DNS rebinding) is never asked again. The Host header and, for https, the TLS server name
    (SNI and certificate check) stay the original host's."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    userinfo, _, hostport = parts.netloc.rpartition("@")
    literal = f"[{address}]" if ":" in address else address
    netloc = literal if parts.port is None else f"{literal}:{parts.port}"
    netloc = f"{userinfo}@{netloc}" if userinfo else netloc
    host_header = hostport  # as the URL spells it, port included
    extensions: dict[str, Any] = {"sni_hostname": host} if parts.scheme == "https" else {}
    return parts._replace(netloc=netloc).geturl(), {"Host": host_header}, extensions


def post_event(url: str, body: bytes, headers: dict[str, str], timeout: float) -> tuple[int | None, str]:
    """POST once. Returns (status code or None, error text). Redirects are failures: never followed."""
    if urlsplit(url).scheme not in {"http", "https"}:
        return None, "only http and https callback URLs are delivered"
    target = url
    extensions: dict[str, Any] = {}
    if not settings.WEBHOOK_ALLOW_PRIVATE_ADDRESSES:
        address, private = resolve_callback(url)
        if private is not None:
            return None, f"callback host resolves to a non-public address ({private}); not delivered"
        if address is not None:
            target, host_header, extensions = pinned_target(url, address)
            headers = {**headers, **host_header}
    try:
        # trust_env=False: no proxy or netrc from the environment ever sees the signed body.
        with (
            httpx.Client(timeout=timeout, follow_redirects=False, trust_env=False) as client,
            client.stream("POST", target, content=body, headers=headers, extensions=extensions) as response,
        ):
            status = response.status_code  # the body is never read: a receiver cannot make us buffer it
    except httpx.HTTPError as exc:
        return None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_LENGTH]
    if 200 <= status < 300:
        return status, ""
    if 300 <= status < 400:
        return status, f"HTTP {status}: redirects are not followed"
    return status, f"HTTP {status}"


def attempt_delivery(delivery_id: str, *, timeout: float) -> AttemptOutcome:
    """Make one attempt and record its outcome: delivered, retry later (with backoff), or dead after the last."""
    if not claim_attempt(delivery_id):
        return AttemptOutcome("skipped")
    delivery = WebhookDelivery.objects.select_related("event__agent").get(pk=delivery_id)
    event = delivery.event
    agent = event.agent
    body = payload_body(event.payload)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "ReviewHub-Webhook/1",
        SIGNATURE_HEADER: signature_header(webhook_secret(agent.pk, agent.key_prefix), body),
        DELIVERY_HEADER: str(delivery.pk),
        EVENT_HEADER: event.kind,
    }
    status_code, error = post_event(delivery.url, body, headers, timeout)
    attempts = delivery.attempts + 1
    now = clock.now()
    done = Q(pk=delivery.pk, status=DeliveryStatus.PENDING)
    recorded = {"attempts": F("attempts") + 1, "last_status_code": status_code, "last_error": error}
    if not error:
        WebhookDelivery.objects.filter(done).update(
            **recorded, status=DeliveryStatus.DELIVERED, delivered_at=now, next_attempt_at=None
        )
        return AttemptOutcome(DeliveryStatus.DELIVERED)
    permanent = status_code is None and error.startswith(("only http", "callback host resolves"))
    if permanent or attempts >= settings.WEBHOOK_MAX_ATTEMPTS:
        WebhookDelivery.objects.filter(done).update(
            **recorded, status=DeliveryStatus.DEAD, next_attempt_at=None
        )
        logger.warning("webhook delivery %s is dead after %d attempt(s): %s", delivery.pk, attempts, error)
        return AttemptOutcome(DeliveryStatus.DEAD)
    delay = retry_delay(attempts)
    WebhookDelivery.objects.filter(done).update(**recorded, next_attempt_at=now + timedelta(seconds=delay))
    return AttemptOutcome(DeliveryStatus.PENDING, retry_in=delay)
