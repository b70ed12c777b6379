"""Emails to queue members, batched into one digest per queue so a burst of urgent requests sends one message.

Nothing is sent when a request arrives. A periodic sweep (`send_due_digests`: Celery beat in the services
deployment, the in-process sweeper in the embedded one) looks for what members have not yet been told about:

- *urgent*: an open request at or above the queue's `priority_threshold`. The first one starts a batch window
  (`NOTIFICATION_BATCH_SECONDS`, default 60 s); when it has passed, one digest lists every urgent request that is
  still open, however many arrived meanwhile. Requests already handled inside the window are never mailed about.
- *deadline near*: a pending (unclaimed) request whose remaining time is within its warning window:
  10 % of its lifetime but at least 5 minutes, and never more than half its lifetime (so a short-lived request
  is not "near its deadline" the moment it arrives). Claimed requests are left alone: someone is on them, and so
  are requests living under two minutes: no email is read in time to help them.

A queue gets at most one digest per batch window. Each request mentioned gets a `notified_urgent` or
`notified_deadline` audit row, which is what makes the sweep idempotent and safe to run from several processes
(the queue row is locked while a digest is composed).
"""

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import transaction
from django.db.models import Exists, Max, OuterRef, QuerySet, Subquery

from elicitation.models import OPEN_STATUSES, ElicitationRequest, Queue, RequestEvent, Status
from elicitation.queue import audit, clock

logger = logging.getLogger(__name__)

NOTIFIED_URGENT = "notified_urgent"
NOTIFIED_DEADLINE = "notified_deadline"
NOTIFIED_KINDS = (NOTIFIED_URGENT, NOTIFIED_DEADLINE)
DEADLINE_WARNING_FRACTION = 0.10
DEADLINE_WARNING_MINIMUM = timedelta(minutes=5)
MIN_USEFUL_WARNING = timedelta(minutes=1)
MAX_LISTED = 50  # per section of one digest; the rest are counted, and told about in the next one


def batch_window() -> timedelta:
    return timedelta(seconds=getattr(settings, "NOTIFICATION_BATCH_SECONDS", 60))


def deadline_warning(created_at: datetime, deadline: datetime) -> timedelta:
    """How long before its deadline a request counts as "deadline near"."""
    lifetime = max(deadline - created_at, timedelta(0))
    return min(max(lifetime * DEADLINE_WARNING_FRACTION, DEADLINE_WARNING_MINIMUM), lifetime / 2)


@dataclass(frozen=True)
class Digest:
    queue: Queue
    urgent: list[ElicitationRequest]
    deadline_near: list[ElicitationRequest]
    recipients: list[str]


def _already(kind: str) -> Exists:
    return Exists(RequestEvent.objects.filter(request=OuterRef("pk"), kind=kind))


def _with_arrival(requests: QuerySet[ElicitationRequest]) -> QuerySet[ElicitationRequest]:
    """Annotate `arrived_at`: when the request entered this queue (created, or escalated into it), per the audit."""
    arrivals = RequestEvent.objects.filter(request=OuterRef("pk"), kind__in=("created", "escalated"))
    return requests.annotate(arrived_at=Subquery(arrivals.order_by("-id").values("at")[:1]))


def _unreported_urgent(queue: Queue) -> QuerySet[ElicitationRequest]:
    if queue.priority_threshold is None:
        return ElicitationRequest.objects.none()
    return _with_arrival(
        queue.requests.filter(status__in=OPEN_STATUSES, priority__gte=queue.priority_threshold)
        .exclude(_already(NOTIFIED_URGENT))
        .order_by("-priority", "created_at")
    )


def _arrived(request: ElicitationRequest) -> datetime:
    return getattr(request, "arrived_at", None) or request.created_at


def _unreported_deadline_near(queue: Queue, now: datetime) -> list[ElicitationRequest]:
    # The warning window depends on each request's lifetime, which SQLite cannot compute portably: filter the
    # pending requests, soonest deadline first, in Python.
    candidates = _with_arrival(
        queue.requests.filter(status=Status.PENDING, deadline__gt=now)
        .exclude(_already(NOTIFIED_DEADLINE))
        .order_by("deadline")
    )[:1000]
    near = []
    for request in candidates:
        warning = deadline_warning(_arrived(request), request.deadline)
        # An email cannot help a request that lives under two minutes: nobody reads it in time.
        if warning >= MIN_USEFUL_WARNING and now >= request.deadline - warning:
            near.append(request)
    return near


def _last_digest_at(queue: Queue) -> datetime | None:
    last: datetime | None = RequestEvent.objects.filter(
        request__queue=queue, kind__in=NOTIFIED_KINDS
    ).aggregate(last=Max("at"))["last"]
    return last


def _recipients(queue: Queue) -> list[str]:
    emails = queue.members.filter(is_active=True).exclude(email="").values_list("email", flat=True)
    return sorted(set(emails))


def due_digest(queue: Queue, now: datetime) -> Digest | None:
    """What the queue's members should be told now, or None when nothing is due yet."""
    recipients = _recipients(queue)
    if not recipients:
        return None
    last = _last_digest_at(queue)
    if last is not None and now - last < batch_window():
        return None
    urgent = list(_unreported_urgent(queue)[:MAX_LISTED])
    near = _unreported_deadline_near(queue, now)[:MAX_LISTED]
    # Urgent arrivals wait out the batch window that the first of them opened, so a burst shares one message.
    urgent_ready = bool(urgent) and min(_arrived(r) for r in urgent) + batch_window() <= now
    if not urgent_ready and not near:
        return None
    # A digest that goes out anyway (for a deadline) takes every urgent request along rather than delay them.
    return Digest(queue=queue, urgent=urgent, deadline_near=near, recipients=recipients)


def _line(request: ElicitationRequest, now: datetime) -> str:
    message = " ".join(request.message.split())[:120]
    left = max(int((request.deadline - now).total_seconds()), 0)
    return (
        f"- [priority {request.priority}] {message}\n"
        f"  due in {left // 60} min {left % 60} s: {settings.PUBLIC_URL}/requests/{request.pk}/"
    )


def compose(digest: Digest, now: datetime) -> EmailMessage:
    parts: list[str] = []
    if digest.urgent:
        parts.append(f"Urgent requests waiting ({len(digest.urgent)}):")
        parts.extend(_line(r, now) for r in digest.urgent)
    if digest.deadline_near:
        if parts:
            parts.append("")
        parts.append(f"Deadlines near, nobody has claimed these yet ({len(digest.deadline_near)}):")
        parts.extend(_line(r, now) for r in digest.deadline_near)
    parts += ["", f"Queue: {settings.PUBLIC_URL}/queues/{digest.queue.slug}/"]
    count = len(digest.urgent) + len(digest.deadline_near)
    subject = f"[ReviewHub] {digest.queue.name}: {count} request(s) need attention"
    return EmailMessage(
        subject=subject,
        body="\n".join(parts),
        from_email=settings.DEFAULT_FROM_EMAIL,
        to=digest.recipients,
    )


def send_queue_digest(queue_id: int, now: datetime | None = None) -> int:
    """Send the queue's digest if one is due. Returns the number of emails sent (0 or 1)."""
    now = now or clock.now()
    with transaction.atomic():
        # The queue row lock serialises digest senders across processes: one digest per window, never two.
        queue = Queue.objects.select_for_update().filter(pk=queue_id).first()
        if queue is None:
            return 0
        digest = due_digest(queue, now)
        if digest is None:
            return 0
        for kind, requests in ((NOTIFIED_URGENT, digest.urgent), (NOTIFIED_DEADLINE, digest.deadline_near)):
            for request in requests:
                ElicitationRequest.objects.select_for_update().filter(pk=request.pk).first()
                audit.record_event(request, kind, detail={"recipients": len(digest.recipients)})
        # Sent inside the transaction: if the mail server refuses, the audit rows roll back and the next sweep
        # tries again; the price is a rare duplicate if the commit itself fails after sending.
        compose(digest, now).send()
    logger.info(
        "emailed %d member(s) of %s about %d urgent and %d near-deadline request(s)",
        len(digest.recipients),
        digest.queue.slug,
        len(digest.urgent),
        len(digest.deadline_near),
    )
    return 1


def queues_with_notifications() -> QuerySet[Queue]:
    return Queue.objects.filter(members__is_active=True, members__email__gt="").distinct()


def send_due_digests(now: datetime | None = None) -> int:
    """Sweep: one digest per queue that has something due. Idempotent: a second run sends nothing."""
    now = now or clock.now()
    sent = 0
    for queue_id in queues_with_notifications().values_list("pk", flat=True):
        try:
            sent += send_queue_digest(queue_id, now)
        except Exception:
            # One queue's mail failure must not starve the others; it is retried on the next sweep.
            logger.exception("notification digest for queue %s failed", queue_id)
    return sent
