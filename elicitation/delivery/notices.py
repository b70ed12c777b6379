"""Notices: one row per (request, channel, recipient), the thing that makes a notification happen exactly once.

1. `record_arrivals` (reach_tasks.notify_arrivals, one task per window of arrivals) asks routing.py who is told,
   once per queue and tier, and inserts a Notice per recipient in one statement; the unique constraint means a
   second run, a second process or a later tier adds nobody twice. Recipients held back (quiet hours, e-mail off,
   no address, no linked Slack account) get a `skipped` row saying why; digest readers a `digest` row for
   `send_due_digests`. Those to tell now are recorded `sending`, with a lease: the recorder sends each one
   (`send_taken`) from its process's senders of that channel, so channels go concurrently and a slow peer holds
   up only its own; one that waited for a sender renews its lease first, unless the retry sweep took it meanwhile,
   and checks its request is still open. `record_notice_batches` (one request, `pending`; what `notify_tier`
   from before windows and the tests use) returns them in batches of one channel (NOTICE_BATCH_SIZE at most).
2. `send_notices` sends a batch (the retry sweep's, a retry's, `notify_tier`'s): each notice is taken by a guarded
   UPDATE to `sending` with a lease just before it is sent (so two workers never both send it), then the mail, the
   Slack post or the Web Push (web_push.py, to each of the reviewer's browsers), then `sent`. A batch's mails
   share one SMTP connection; every post goes through the process's one Slack client. A failure goes back to
   `pending` with a backoff, and `dead` after NOTICE_MAX_ATTEMPTS; the retry sweep sends what is due. A peer that
   did not answer is left alone by the process a while (`PeerWatch`), so it holds threads for one timeout. A notice is
   recorded with a lease too: if its first attempt has not happened by then (its job was lost with a process, or
   dropped from a full backlog), the sweep sends it. The one duplicate left is a crash between the server
   accepting the message and the row saying so, after the lease runs out.
3. `update_slack_messages` rewrites every Slack message of a request once it is closed or moved, wherever that
   happened.

Arrival times per channel (`sent_at`) are what reach_metrics.py charts as time to a human.
"""

import logging
import random
import smtplib
import threading
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any
from urllib.error import URLError
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.core.mail import EmailMessage, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from django.db import IntegrityError, transaction
from django.db.models import Q
from slack_sdk.errors import SlackApiError

from elicitation.delivery import email, routing, slack, web_push
from elicitation.models import OPEN_STATUSES, Channel, ElicitationRequest, Notice, NoticeStatus
from elicitation.queue import clock

logger = logging.getLogger(__name__)

SENDING_LEASE = timedelta(seconds=60)


def _request(request_id: Any) -> ElicitationRequest | None:
    return (
        ElicitationRequest.objects.select_related("queue", "agent", "answered_by", "claimed_by")
        .filter(pk=request_id)
        .first()
    )


def record_notice_batches(request_id: Any, tier: int, now: datetime | None = None) -> list[list[int]]:
    """Insert this tier's notices of an open request; returns those to send now, in batches of one channel."""
    now = now or clock.now()
    # The row alone: routing reads its queue id and priority, and the joins `_request` makes cost more CPU than
    # the rest of recording (a profile of the notices worker).
    try:
        request = ElicitationRequest.objects.get(pk=request_id)
    except ElicitationRequest.DoesNotExist:
        return []
    if request.status not in OPEN_STATUSES:
        return []
    by_channel: dict[str, list[int]] = {}
    for notice in _record([(request, tier, routing.recipients(request, tier, now))], now, taken=False):
        by_channel.setdefault(notice.channel, []).append(notice.pk)
    return [batch for ids in by_channel.values() for batch in _in_batches(ids)]


def record_arrivals(arrivals: Iterable[tuple[Any, int]], now: datetime | None = None) -> list[Notice]:
    """Insert the notices of a window's arrivals ((request id, tier) each; reach_tasks.notify_arrivals) with one
    read of their requests, routing's reads once per queue and tier, and one insert. Returns those to send now,
    recorded as `sending` with a lease: taken by the caller, which sends them with `send_taken` (no claim to
    make: nobody else sends them before the lease runs out, and then the retry sweep does). Each carries its
    request (with its queue and agent) and its reviewer, what the message says."""
    now = now or clock.now()
    wanted = dict.fromkeys((UUID(str(request_id)), tier) for request_id, tier in arrivals)
    requests = ElicitationRequest.objects.select_related("queue", "agent").filter(
        pk__in={request_id for request_id, _ in wanted}, status__in=OPEN_STATUSES
    )
    found = {request.pk: request for request in requests}
    by_tier: dict[int, list[ElicitationRequest]] = {}
    for request_id, tier in wanted:
        if request_id in found:
            by_tier.setdefault(tier, []).append(found[request_id])
    told: list[tuple[ElicitationRequest, int, list[routing.Recipient]]] = []
    for tier, arrived in by_tier.items():
        addressees = routing.recipients_of(arrived, tier, now)
        told += [(request, tier, addressees[request.pk]) for request in arrived]
    return _record(told, now, taken=True)


def _record(
    told: Sequence[tuple[ElicitationRequest, int, Sequence[routing.Recipient]]], now: datetime, taken: bool
) -> list[Notice]:
    """Insert a notice per (request, recipient) not told on that channel yet; returns those to send now (`sending`
    when `taken`, else `pending`), each with its lease. The unique constraint decides when two recorders race."""
    rows: list[Notice] = []
    for request, tier, recipients in told:
        for recipient in recipients:
            status = NoticeStatus.SENDING if taken else NoticeStatus.PENDING
            if recipient.held == "digest":
                status = NoticeStatus.DIGEST
            elif recipient.held:
                status = NoticeStatus.SKIPPED
            to_send = status in (NoticeStatus.PENDING, NoticeStatus.SENDING)
            rows.append(
                Notice(
                    request=request,
                    channel=recipient.channel,
                    recipient=recipient.key,
                    user=recipient.user,
                    tier=tier,
                    status=status,
                    reason=recipient.held if status == NoticeStatus.SKIPPED else "",
                    slack_channel=recipient.slack_channel,
                    created_at=now,
                    next_attempt_at=now + SENDING_LEASE if to_send else None,
                )
            )
    if not rows:
        return []
    # Told already (an earlier tier, the queue a request was moved from): never twice.
    known = set(
        Notice.objects.filter(request_id__in={row.request_id for row in rows}).values_list(
            "request_id", "channel", "recipient"
        )
    )
    new: dict[tuple[Any, str, str], Notice] = {}
    for row in rows:
        if (key := (row.request_id, row.channel, row.recipient)) not in known:
            new.setdefault(key, row)
    if not new:
        return []
    try:
        with transaction.atomic():
            Notice.objects.bulk_create(new.values())
        inserted = list(new.values())
    except IntegrityError:
        # Another process recorded some of them meanwhile: row by row, and whoever inserts a row tells.
        inserted = [row for row in new.values() if _insert_alone(row)]
    return [row for row in inserted if row.status in (NoticeStatus.PENDING, NoticeStatus.SENDING)]


def _insert_alone(row: Notice) -> bool:
    row.pk, row._state.adding = None, True
    try:
        with transaction.atomic():
            row.save(force_insert=True)
    except IntegrityError:
        return False
    return True


def _in_batches(ids: Sequence[int]) -> list[list[int]]:
    size = settings.NOTICE_BATCH_SIZE
    return [list(ids[start : start + size]) for start in range(0, len(ids), size)]


def _claim(notice_id: int, now: datetime) -> Notice | None:
    """pending (never tried, or due again) → sending, or a `sending` whose lease ran out (its worker died):
    whoever updates sends."""
    due = Q(status=NoticeStatus.PENDING) & (
        Q(attempts=0) | Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    )
    stale = Q(status=NoticeStatus.SENDING, next_attempt_at__lte=now)
    claimed = Notice.objects.filter(Q(pk=notice_id) & (due | stale)).update(
        status=NoticeStatus.SENDING, next_attempt_at=now + SENDING_LEASE
    )
    if not claimed:
        return None
    # With what the message says about its request, in the same read.
    return Notice.objects.select_related("user", "request__queue", "request__agent").get(pk=notice_id)


def backoff(attempts: int) -> float:
    """Full-jitter exponential backoff, capped."""
    cap = min(
        settings.NOTICE_BACKOFF_CAP_SECONDS, settings.NOTICE_BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0)
    )
    return random.uniform(cap / 2, cap)  # noqa: S311 - jitter, not a secret


def send_notice(notice_id: int) -> float | None:
    """Send one notice if it is due. Returns seconds until a retry when this attempt failed, else None."""
    return send_notices([notice_id]).get(notice_id)


# Errors that say the peer did not answer (or could not be reached), as opposed to answering with a refusal.
UNREACHABLE = (
    TimeoutError,
    ConnectionError,
    URLError,
    smtplib.SMTPServerDisconnected,
    smtplib.SMTPConnectError,
)
PEER_PAUSE = timedelta(seconds=30)


class PeerSilent(Exception):
    """A notice not tried: its peer did not answer this process a moment ago."""


class PeerWatch:
    """The peers (one per channel) that did not answer this process lately. After a timeout or a refused
    connection a channel is paused for PEER_PAUSE: its notices fail at once (an attempt, retried with its
    backoff) instead of each holding a worker thread for a whole timeout while the other channel's notices wait
    for a thread. Then one notice goes through to find out whether the peer is back; the others still fail at once
    until it has its answer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused_until: dict[str, datetime] = {}
        self._probing: set[str] = set()

    def admit(self, channel: str, now: datetime) -> None:
        """Return when a call to the channel's peer may go out now; raise PeerSilent otherwise."""
        with self._lock:
            until = self._paused_until.get(channel)
            if until is None:
                return
            if now < until or channel in self._probing:
                raise PeerSilent(f"{channel} did not answer at {until - PEER_PAUSE:%H:%M:%S}; not tried")
            self._probing.add(channel)

    def answered(self, channel: str) -> None:
        with self._lock:
            self._paused_until.pop(channel, None)
            self._probing.discard(channel)

    def silent(self, channel: str, now: datetime) -> None:
        with self._lock:
            self._paused_until[channel] = now + PEER_PAUSE
            self._probing.discard(channel)


peers = PeerWatch()


def send_notices(notice_ids: Iterable[int]) -> dict[int, float]:
    """Send a batch of notices (one channel's, as `record_notice_batches` makes them) that are due; those taken by
    another worker meanwhile are left alone. Returns {notice id: seconds until its retry} for attempts that failed.
    The Slack message is built once per request."""
    retries: dict[int, float] = {}
    blocks: dict[Any, list[dict[str, Any]]] = {}
    with _BatchMailer() as mailer:
        for notice_id in notice_ids:
            now = clock.now()
            notice = _claim(notice_id, now)
            if notice is None:
                continue
            if notice.request.status not in OPEN_STATUSES:
                _closed_before_sending(notice)
                continue
            retry_in = _attempt(notice, mailer, blocks, now)
            if retry_in is not None:
                retries[notice.pk] = retry_in
    return retries


# A notice that waited this long for a sender (a backlog) checks it is still its own and its request still open.
RECHECK_AFTER = timedelta(seconds=1)


def send_taken(notice: Notice) -> float | None:
    """Send a notice `record_arrivals` took (recorded `sending`, with its request and reviewer): no claim to make
    unless it waited for a sender. Returns seconds until its retry when the attempt failed, else None."""
    now = clock.now()
    if now - notice.created_at > RECHECK_AFTER:
        # Its lease renewed if it is still the one recorded: past it, the retry sweep may have taken it.
        lease = now + SENDING_LEASE
        still_taken = Notice.objects.filter(
            pk=notice.pk, status=NoticeStatus.SENDING, next_attempt_at=notice.next_attempt_at
        ).update(next_attempt_at=lease)
        if not still_taken:
            return None
        notice.next_attempt_at = lease
        if not ElicitationRequest.objects.filter(pk=notice.request_id, status__in=OPEN_STATUSES).exists():
            _closed_before_sending(notice)
            return None
    with _BatchMailer() as mailer:
        return _attempt(notice, mailer, {}, now)


def _closed_before_sending(notice: Notice) -> None:
    Notice.objects.filter(pk=notice.pk).update(status=NoticeStatus.SKIPPED, reason="closed before sending")


def _attempt(
    notice: Notice, mailer: "_BatchMailer", blocks: dict[Any, list[dict[str, Any]]], now: datetime
) -> float | None:
    """One attempt at a notice this worker holds (`sending`): `sent`, or back to `pending` with a backoff (the
    seconds returned) or `dead` (None). `blocks` keeps each request's Slack message for the rest of a batch."""
    request = notice.request
    try:
        peers.admit(notice.channel, now)
        try:
            if notice.channel == Channel.EMAIL:
                assert notice.user is not None  # e-mail notices are always to a reviewer
                mailer.send(email.arrival_message(request, notice.user.email))
                changes: dict[str, Any] = {}
            elif notice.channel == Channel.PUSH:
                changes = web_push.send_notice(notice, request)
            else:
                if request.pk not in blocks:
                    blocks[request.pk] = slack.as_dicts(slack.message_blocks(request))
                changes = _post_to_slack(notice, request, blocks[request.pk])
        except UNREACHABLE:
            peers.silent(notice.channel, clock.now())
            raise
        except Exception:
            peers.answered(notice.channel)  # a refusal is an answer: the peer is there
            raise
        peers.answered(notice.channel)
    except Exception as exc:
        return _failed(notice, exc, now)
    Notice.objects.filter(pk=notice.pk, status=NoticeStatus.SENDING).update(
        status=NoticeStatus.SENT,
        sent_at=clock.now(),
        attempts=notice.attempts + 1,
        reason="",
        **changes,
    )
    return None


def _failed(notice: Notice, exc: Exception, now: datetime) -> float | None:
    """Back to `pending` with a backoff (returned, in seconds), or `dead` after NOTICE_MAX_ATTEMPTS (None)."""
    attempts = notice.attempts + 1
    if attempts >= settings.NOTICE_MAX_ATTEMPTS:
        Notice.objects.filter(pk=notice.pk).update(
            status=NoticeStatus.DEAD, attempts=attempts, reason=_reason(exc), next_attempt_at=None
        )
        logger.warning("%s notice %s is dead after %d attempts: %s", notice.channel, notice.pk, attempts, exc)
        return None
    delay = backoff(attempts)
    Notice.objects.filter(pk=notice.pk).update(
        status=NoticeStatus.PENDING,
        attempts=attempts,
        reason=_reason(exc),
        next_attempt_at=now + timedelta(seconds=delay),
    )
    logger.info("%s notice %s failed (%s); retrying in %.0f s", notice.channel, notice.pk, exc, delay)
    return delay


class _BatchMailer:
    """One SMTP connection (Django's `get_connection()`) for a batch's mails, opened by the first one. Each mail
    is its own `send_messages` call on it, so a message the server refuses fails alone and the rest go through
    on the same connection; a connection that broke is dropped, and the next mail opens a new one."""

    def __init__(self) -> None:
        self.connection: BaseEmailBackend | None = None

    def __enter__(self) -> "_BatchMailer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, message: EmailMessage) -> None:
        if self.connection is None:
            connection = get_connection()
            connection.open()
            self.connection = connection
        try:
            self.connection.send_messages([message])
        except UNREACHABLE:
            self.close()
            raise

    def close(self) -> None:
        if self.connection is None:
            return
        try:
            self.connection.close()
        except Exception:  # a connection that broke may fail to say goodbye; it is dropped either way
            logger.debug("closing the SMTP connection failed", exc_info=True)
        self.connection = None


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _post_to_slack(
    notice: Notice, request: ElicitationRequest, blocks: list[dict[str, Any]]
) -> dict[str, Any]:
    response = slack.client().chat_postMessage(
        channel=notice.slack_channel,
        text=slack.fallback_text(request),
        blocks=blocks,
        unfurl_links=False,
        unfurl_media=False,
    )
    return {
        "slack_channel": response.get("channel") or notice.slack_channel,
        "slack_ts": response.get("ts") or "",
    }


def _due(now: datetime) -> Q:
    return Q(status=NoticeStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=NoticeStatus.SENDING, next_attempt_at__lte=now
    )


def due_notice_batches(now: datetime | None = None, limit: int = 500) -> list[list[int]]:
    """What the retry sweep sends: due notices in batches of one channel, as `record_notice_batches` makes them."""
    due = Notice.objects.filter(_due(now or clock.now())).order_by("next_attempt_at")
    by_channel: dict[str, list[int]] = {}
    for notice_id, channel in due.values_list("pk", "channel")[:limit]:
        by_channel.setdefault(channel, []).append(notice_id)
    return [batch for ids in by_channel.values() for batch in _in_batches(ids)]


def update_slack_messages(request_id: Any) -> int:
    """Rewrite the request's Slack messages to say how it ended (or where it went). Returns messages updated."""
    request = _request(request_id)
    if request is None:
        return 0
    posted = Notice.objects.filter(request_id=request_id, channel=Channel.SLACK).exclude(slack_ts="")
    blocks = slack.as_dicts(slack.closed_blocks(request))
    updated = 0
    for channel_id, ts in posted.values_list("slack_channel", "slack_ts"):
        try:
            slack.client().chat_update(
                channel=channel_id, ts=ts, text=slack.fallback_text(request), blocks=blocks
            )
        except SlackApiError as exc:
            logger.warning(
                "could not update Slack message %s in %s: %s", ts, channel_id, exc.response.get("error")
            )
            continue
        updated += 1
    return updated


def send_due_digests(now: datetime | None = None) -> int:
    """Sweep: one e-mail per reviewer whose oldest digest notice has waited REACH_DIGEST_SECONDS. Requests closed
    meanwhile are dropped. Returns the e-mails sent. The notice rows are locked while a digest is composed, so two
    sweepers never send the same one."""
    now = now or clock.now()
    window = timedelta(seconds=settings.REACH_DIGEST_SECONDS)
    users = (
        Notice.objects.filter(status=NoticeStatus.DIGEST, created_at__lte=now - window)
        .values_list("user_id", flat=True)
        .distinct()
    )
    sent = 0
    for user_id in list(users):
        try:
            sent += _send_digest(user_id, now)
        except Exception:
            logger.exception("reach digest for user %s failed; retried next sweep", user_id)
    return sent


def _send_digest(user_id: int, now: datetime) -> int:
    with transaction.atomic():
        notices = list(
            Notice.objects.select_for_update(skip_locked=True)
            .filter(user_id=user_id, status=NoticeStatus.DIGEST)
            .select_related("user", "request__queue", "request__agent")
            .order_by("id")[:100]
        )
        if not notices:
            return 0
        still_open = [n for n in notices if n.request.status in OPEN_STATUSES]
        if still_open:
            # Sent inside the transaction: a refusal rolls the rows back for the next sweep.
            reader = notices[0].user
            assert reader is not None  # digest notices are always to a reviewer
            email.digest_message([n.request for n in still_open], reader.email).send()
        Notice.objects.filter(pk__in=[n.pk for n in still_open]).update(status=NoticeStatus.SENT, sent_at=now)
        Notice.objects.filter(pk__in=[n.pk for n in notices if n not in still_open]).update(
            status=NoticeStatus.SKIPPED, reason="closed before the digest"
        )
    return 1 if still_open else 0


def record_browser_notice(request: ElicitationRequest, user: User) -> bool:
    """The reviewer's page showed a desktop notification for this request: the browser channel's `sent_at`.
    Returns False when it was recorded before (a second tab)."""
    try:
        with transaction.atomic():
            Notice.objects.create(
                request=request,
                channel=Channel.BROWSER,
                recipient=f"user:{user.pk}",
                user=user,
                status=NoticeStatus.SENT,
                created_at=clock.now(),
                sent_at=clock.now(),
            )
    except IntegrityError:
        return False
    return True
