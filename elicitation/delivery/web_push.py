"""Web Push: a reviewer's subscribed browsers (phone or desktop, tab closed) told about a request, as one more
reach channel (`Channel.PUSH`, sent by notices.py like e-mail and Slack, so quiet hours and the told-once rule are
the same).

- The server signs each push with its VAPID key (RFC 8292; `WEB_PUSH_VAPID_PRIVATE_KEY`, made by
  `manage.py generate_vapid_keys`) and `pywebpush` encrypts the payload to the browser's keys (RFC 8291,
  aes128gcm), so the push service relays what it cannot read.
- One notice (one reviewer, one request) goes to each of the reviewer's browsers; a push service answering 404 or
  410 says the subscription is gone, and it is deleted.
- The payload carries what the notification shows (queue, agent, the request's message as plain text; nothing of a
  URL-mode request beyond its link) and, for a yes/no approval, the one-time tokens of its Approve / Reject
  actions, or, where an accept needs a passkey, of Decline beside an "Approve with passkey" that opens the page
  (push_actions.py). No secret of the server or the reviewer is in it.

A browser's endpoint is a URL the server POSTs to: it must be https on a public host unless
WEB_PUSH_ALLOW_PRIVATE_ENDPOINTS (development, tests), checked when subscribing and again when sending.
"""

import base64
import functools
import json
import logging
import threading
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import requests
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from django.conf import settings
from django.db import IntegrityError, transaction
from django.templatetags.static import static
from django.urls import reverse
from py_vapid import Vapid
from pywebpush import WebPushException, webpush

from elicitation.delivery import push_actions, webhooks
from elicitation.models import ElicitationRequest, Mode, Notice, PushSubscription
from elicitation.queue import clock

logger = logging.getLogger(__name__)

BODY_LIMIT = 240  # what a lock screen shows of the message; the page has the rest
GONE = (404, 410)
MAX_TTL = timedelta(hours=24)


class PushNotConfigured(Exception):
    """No VAPID key: push subscriptions cannot be made and notices cannot be sent."""


class NoBrowserReached(Exception):
    """A push notice none of whose browsers accepted the push (the reasons in the message)."""


# --- VAPID keys -----------------------------------------------------------------------------------------------------


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def generate_keys() -> tuple[str, str]:
    """A new VAPID key pair (P-256) as (private, public): the raw private scalar and the uncompressed public point,
    base64url, the forms WEB_PUSH_VAPID_PRIVATE_KEY and a browser's `applicationServerKey` take."""
    vapid = Vapid()
    vapid.generate_keys()
    private = vapid.private_key.private_numbers().private_value.to_bytes(32, "big")
    return b64url(private), public_key_of(vapid)


def public_key_of(vapid: Any) -> str:
    point = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return b64url(point)


def configured() -> bool:
    return bool(settings.WEB_PUSH_VAPID_PRIVATE_KEY)


@functools.cache
def _vapid(private_key: str) -> Any:
    return Vapid.from_string(private_key=private_key)


def vapid() -> Any:
    if not configured():
        raise PushNotConfigured("WEB_PUSH_VAPID_PRIVATE_KEY is not set")
    return _vapid(settings.WEB_PUSH_VAPID_PRIVATE_KEY)


def application_server_key() -> str:
    """The public key browsers subscribe with: derived from the private key, so the two cannot disagree."""
    return public_key_of(vapid())


def key_problem() -> str:
    """Why push is not usable as configured, or "" (doctor_checks reads this)."""
    if not configured():
        return "WEB_PUSH_VAPID_PRIVATE_KEY is not set: Web Push is off"
    try:
        derived = application_server_key()
    except Exception as exc:  # py_vapid raises several kinds for a key it cannot read
        return f"WEB_PUSH_VAPID_PRIVATE_KEY is not a VAPID private key ({type(exc).__name__})"
    given = settings.WEB_PUSH_VAPID_PUBLIC_KEY
    if given and given != derived:
        return "WEB_PUSH_VAPID_PUBLIC_KEY is not the public half of WEB_PUSH_VAPID_PRIVATE_KEY"
    if not settings.WEB_PUSH_CONTACT.startswith(("mailto:", "https:")):
        return "WEB_PUSH_CONTACT should be a mailto: or https: address push services can write to"
    return ""


# --- subscriptions --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubscriptionInput:
    endpoint: str
    p256dh: str
    auth: str


def endpoint_problem(endpoint: str) -> str:
    """Why the server must not POST to this endpoint, or ""."""
    parts = urlsplit(endpoint)
    if settings.WEB_PUSH_ALLOW_PRIVATE_ENDPOINTS:
        return "" if parts.scheme in ("http", "https") and parts.hostname else "must be an http(s) URL"
    if parts.scheme != "https" or not parts.hostname:
        return "must be an https URL"
    _, private = webhooks.resolve_callback(endpoint)
    return f"resolves to a non-public address ({private})" if private else ""


def check_subscription(data: Any) -> SubscriptionInput:
    """A browser's `PushSubscription.toJSON()`, checked: {field: reason} in ValueError's args when it is not one."""
    problems: dict[str, str] = {}
    if not isinstance(data, dict):
        raise ValueError({"subscription": "must be an object"})
    endpoint = data.get("endpoint")
    given_keys = data.get("keys")
    keys: dict[str, Any] = given_keys if isinstance(given_keys, dict) else {}
    if not isinstance(endpoint, str) or not endpoint or len(endpoint) > 1024:
        problems["endpoint"] = "must be a URL of at most 1024 characters"
    else:
        problem = endpoint_problem(endpoint)
        if problem:
            problems["endpoint"] = problem
    decoded = {}
    for name, size in (("p256dh", 65), ("auth", 16)):
        value = keys.get(name)
        try:
            raw = b64url_decode(value) if isinstance(value, str) and len(value) < 100 else b""
        except ValueError:
            raw = b""
        if len(raw) != size or (name == "p256dh" and raw[:1] != b"\x04"):
            problems[f"keys.{name}"] = f"must be {size} bytes, base64url" + (
                " (an uncompressed P-256 point)" if name == "p256dh" else ""
            )
        decoded[name] = raw
    if "keys.p256dh" not in problems:
        try:
            ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), decoded["p256dh"])
        except ValueError:
            problems["keys.p256dh"] = "is not a point on P-256"
    if problems:
        raise ValueError(problems)
    return SubscriptionInput(str(endpoint), b64url(decoded["p256dh"]), b64url(decoded["auth"]))


def browser_label(user_agent: str) -> str:
    """A label like "Firefox on Android" or "Chrome on macOS": enough for a reviewer to tell their browsers apart."""
    agent = user_agent or ""
    browser = next(
        (
            name
            for token, name in (
                ("Edg/", "Edge"),
                ("OPR/", "Opera"),
                ("Firefox/", "Firefox"),
                ("Chrome/", "Chrome"),
                ("Chromium/", "Chromium"),
                ("Safari/", "Safari"),
            )
            if token in agent
        ),
        "A browser",
    )
    system = next(
        (
            name
            for token, name in (
                ("Android", "Android"),
                ("iPhone", "iPhone"),
                ("iPad", "iPad"),
                ("Mac OS X", "macOS"),
                ("Windows", "Windows"),
                ("CrOS", "ChromeOS"),
                ("Linux", "Linux"),
            )
            if token in agent
        ),
        "",
    )
    return f"{browser} on {system}" if system else browser


def subscribe(user: Any, given: SubscriptionInput, user_agent: str) -> PushSubscription:
    """Save this browser's subscription for the user. An endpoint is one browser profile: if another account
    subscribed it before (a shared computer), it is now this reviewer's only."""
    fields = {
        "user": user,
        "p256dh": given.p256dh,
        "auth": given.auth,
        "label": browser_label(user_agent)[:80],
    }
    try:
        with transaction.atomic():
            found, _ = PushSubscription.objects.update_or_create(
                endpoint=given.endpoint,
                defaults=fields,
                create_defaults={**fields, "created_at": clock.now()},
            )
    except IntegrityError:
        # The same browser subscribing twice at once: the other write won, with the same keys.
        found = PushSubscription.objects.get(endpoint=given.endpoint)
    return found


def unsubscribe(user: Any, *, pk: int | None = None, endpoint: str | None = None) -> int:
    """Delete one of the user's own subscriptions (never another reviewer's); returns how many went."""
    mine = PushSubscription.objects.filter(user=user)
    if pk is not None:
        mine = mine.filter(pk=pk)
    elif endpoint:
        mine = mine.filter(endpoint=endpoint)
    else:
        return 0
    deleted, _ = mine.delete()
    return deleted


def page_context(user: Any) -> dict[str, Any]:
    """What the Preferences page's Web Push part shows: whether push is set up, the key to subscribe with, and
    the reviewer's browsers."""
    usable = configured() and not key_problem().startswith("WEB_PUSH_VAPID")
    return {
        "configured": usable,
        "key": application_server_key() if usable else "",
        "subscriptions": list(PushSubscription.objects.filter(user=user).order_by("id")),
    }


def subscriptions_of(user: Any) -> list[dict[str, Any]]:
    return [
        {
            "id": sub.pk,
            "label": sub.label,
            "pushService": urlsplit(sub.endpoint).hostname or "",
            "createdAt": sub.created_at.isoformat(),
            "lastUsedAt": sub.last_used_at.isoformat() if sub.last_used_at else None,
        }
        for sub in PushSubscription.objects.filter(user=user).order_by("id")
    ]


# --- the notification -----------------------------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def payload(request: ElicitationRequest, user: Any) -> dict[str, Any]:
    """What the service worker shows (static/reviewhub/service-worker.js): plain text only, shown as text by the
    browser, never as markup. A yes/no approval carries its buttons and their tokens (push_actions.py)."""
    title = _clip(f"{request.queue.name}: {request.agent.name} needs a reviewer", 120)
    body = (
        "Its details are only shown in ReviewHub."
        if request.mode == Mode.URL
        else _clip(request.message, BODY_LIMIT)
    )
    data: dict[str, Any] = {
        "v": 1,
        "title": title,
        "body": body,
        "tag": f"request:{request.pk}",
        "url": reverse("request", kwargs={"request_id": request.pk}),
        "icon": static("reviewhub/icon-192.png"),
        "request": str(request.pk),
        "actions": [],
    }
    actions = push_actions.notification_actions(request, user)
    if actions:
        data["answerUrl"] = reverse("push-answer", kwargs={"request_id": request.pk})
        data["actions"] = actions
    return data


_sessions = threading.local()


def _session() -> requests.Session:
    """One HTTP session per sending thread: notices to the same push service reuse its connection."""
    found = getattr(_sessions, "session", None)
    if found is None:
        found = _sessions.session = requests.Session()
    return found


def _ttl(request: ElicitationRequest) -> int:
    """Seconds the push service keeps an undelivered push: no longer than the request can be answered."""
    left = min(request.deadline - clock.now(), MAX_TTL)
    return max(0, int(left.total_seconds()))


def push_to(subscription: PushSubscription, data: dict[str, Any], *, ttl: int, topic: str) -> None:
    """Encrypt and send one push to one browser; WebPushException when the push service refuses it."""
    problem = endpoint_problem(subscription.endpoint)
    if problem:
        raise WebPushException(f"endpoint {problem}; not sent")
    webpush(
        subscription_info={
            "endpoint": subscription.endpoint,
            "keys": {"p256dh": subscription.p256dh, "auth": subscription.auth},
        },
        data=json.dumps(data, separators=(",", ":")),
        vapid_private_key=vapid(),
        vapid_claims={"sub": settings.WEB_PUSH_CONTACT or settings.PUBLIC_URL},
        content_encoding="aes128gcm",
        ttl=ttl,
        timeout=settings.WEB_PUSH_TIMEOUT_SECONDS,
        # A newer push about the same request replaces an undelivered one (RFC 8030 Topic, at most 32 characters).
        headers={"Urgency": "high", "Topic": topic},
        requests_session=_session(),
    )


def send_notice(notice: Notice, request: ElicitationRequest) -> dict[str, Any]:
    """Push the notice to each of its reviewer's browsers. Gone subscriptions (404/410) are deleted; the notice is
    sent when one browser's push service accepted it, else NoBrowserReached (retried with the notice's backoff)."""
    user = notice.user
    subscriptions = list(PushSubscription.objects.filter(user=user)) if user is not None else []
    if not subscriptions:
        raise NoBrowserReached("no browser subscribed")
    data = payload(request, user)
    ttl = _ttl(request)
    failures: list[str] = []
    reached: list[int] = []
    for subscription in subscriptions:
        try:
            push_to(subscription, data, ttl=ttl, topic=request.pk.hex)
        except WebPushException as exc:
            status = getattr(exc.response, "status_code", None)
            if status in GONE:
                subscription.delete()
                logger.info("push subscription %s is gone (%s); deleted", subscription.pk, status)
                failures.append(f"{subscription.label or 'browser'}: gone")
            else:
                failures.append(f"{subscription.label or 'browser'}: {status or exc}")
            continue
        except requests.RequestException as exc:
            failures.append(f"{subscription.label or 'browser'}: {type(exc).__name__}")
            continue
        reached.append(subscription.pk)
    if not reached:
        raise NoBrowserReached("; ".join(failures)[:180])
    PushSubscription.objects.filter(pk__in=reached).update(last_used_at=clock.now())
    return {}
