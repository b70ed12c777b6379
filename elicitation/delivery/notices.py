"""Notices: one row per (request, channel, recipient), the thing that makes a notification happen exactly once.

1. `record_notices` (a task, after the request's commit) asks routing.py who is told, and inserts a Notice per
   recipient; the unique constraint means a second run, a second process or a later tier adds nobody twice.
   Recipients held back (quiet hours, e-mail off, no address, no linked Slack account) get a `skipped` row saying
   why; digest readers a `digest` row for `send_due_digests`.
2. `send_notice` sends one pending notice: a guarded UPDATE moves it to `sending` with a lease (so two workers
   never both send it), then the mail or the Slack post, then `sent`. A failure goes back to `pending` with a
   backoff, and `dead` after NOTICE_MAX_ATTEMPTS; the retry sweep sends what is due. The one duplicate left is a
   crash between the server accepting the message and the row saying so, after the lease runs out.
3. `update_slack_messages` rewrites every Slack message of a request once it is closed or moved, wherever that
   happened.

Arrival times per channel (`sent_at`) are what reach_metrics.py charts as time to a human.
"""

import logging
import random
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from slack_sdk.errors import SlackApiError

from elicitation.delivery import email, routing, slack
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


def record_notices(request_id: Any, tier: int, now: datetime | None = None) -> list[int]:
    """Insert this tier's notices of an open request; returns the ids of those to send now."""
    now = now or clock.now()
    request = _request(request_id)
    if request is None or request.status not in OPEN_STATUSES:
        return []
    to_send: list[int] = []
    for recipient in routing.recipients(request, tier, now):
        status = NoticeStatus.PENDING
        if recipient.held == "digest":
            status = NoticeStatus.DIGEST
        elif recipient.held:
            status = NoticeStatus.SKIPPED
        try:
            with transaction.atomic():
                notice = Notice.objects.create(
                    request=request,
                    channel=recipient.channel,
                    recipient=recipient.key,
                    user=recipient.user,
                    tier=tier,
                    status=status,
                    reason=recipient.held if status == NoticeStatus.SKIPPED else "",
                    slack_channel=recipient.slack_channel,
                    created_at=now,
                )
        except IntegrityError:
            continue  # told already (an earlier tier, another process): never twice
        if status == NoticeStatus.PENDING:
            to_send.append(notice.pk)
    return to_send


def _claim(notice_id: int, now: datetime) -> Notice | None:
    """pending (due) → sending, or a `sending` whose lease ran out (its worker died): whoever updates sends."""
    due = Q(status=NoticeStatus.PENDING) & (Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now))
    stale = Q(status=NoticeStatus.SENDING, next_attempt_at__lte=now)
    claimed = Notice.objects.filter(Q(pk=notice_id) & (due | stale)).update(
        status=NoticeStatus.SENDING, next_attempt_at=now + SENDING_LEASE
    )
    if not claimed:
        return None
    return Notice.objects.select_related("user").get(pk=notice_id)


def backoff(attempts: int) -> float:
    """Full-jitter exponential backoff, capped."""
    cap = min(
        settings.NOTICE_BACKOFF_CAP_SECONDS, settings.NOTICE_BACKOFF_BASE_SECONDS * 2 ** max(attempts - 1, 0)
    )
    return random.uniform(cap / 2, cap)  # noqa: S311 - jitter, not a secret


def send_notice(notice_id: int) -> float | None:
    """Send one notice if it is due. Returns seconds until a retry when this attempt failed, else None."""
    now = clock.now()
    notice = _claim(notice_id, now)
    if notice is None:
        return None
    request = _request(notice.request_id)
    if request is None or request.status not in OPEN_STATUSES:
        Notice.objects.filter(pk=notice.pk).update(
            status=NoticeStatus.SKIPPED, reason="closed before sending"
        )
        return None
    try:
        if notice.channel == Channel.EMAIL:
            assert notice.user is not None  # e-mail notices are always to a reviewer
            email.arrival_message(request, notice.user.email).send()
            changes: dict[str, Any] = {}
        else:
            changes = _post_to_slack(notice, request)
    except Exception as exc:
        attempts = notice.attempts + 1
        if attempts >= settings.NOTICE_MAX_ATTEMPTS:
            Notice.objects.filter(pk=notice.pk).update(
                status=NoticeStatus.DEAD, attempts=attempts, reason=_reason(exc), next_attempt_at=None
            )
            logger.warning(
                "%s notice %s is dead after %d attempts: %s", notice.channel, notice.pk, attempts, exc
            )
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
    Notice.objects.filter(pk=notice.pk, status=NoticeStatus.SENDING).update(
        status=NoticeStatus.SENT, sent_at=clock.now(), attempts=notice.attempts + 1, reason="", **changes
    )
    return None


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _post_to_slack(notice: Notice, request: ElicitationRequest) -> dict[str, Any]:
    response = slack.client().chat_postMessage(
        channel=notice.slack_channel,
        text=slack.fallback_text(request),
        blocks=slack.as_dicts(slack.message_blocks(request)),
        unfurl_links=False,
        unfurl_media=False,
    )
    return {
        "slack_channel": response.get("channel") or notice.slack_channel,
        "slack_ts": response.get("ts") or "",
    }


def due_notice_ids(now: datetime | None = None, limit: int = 500) -> list[int]:
    now = now or clock.now()
    due = Q(status=NoticeStatus.PENDING, next_attempt_at__lte=now) | Q(
        status=NoticeStatus.SENDING, next_attempt_at__lte=now
    )
    return list(Notice.objects.filter(due).order_by("next_attempt_at").values_list("pk", flat=True)[:limit])


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


def record_browser_notice(request: ElicitationRequest, user: Any) -> bool:
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
