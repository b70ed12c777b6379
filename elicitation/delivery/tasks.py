"""Celery tasks of delivery: each takes an id, calls one function of webhooks.py, and owns only its retry policy.

The retry count, backoff and dead letter live in the delivery row, shared with the sweep and admin replay, which is
why Celery's autoretry_for/retry_backoff are not used (README, dependency notes)."""

import logging
from typing import Any

from celery import shared_task
from django.db import transaction

from elicitation.delivery import webhooks
from elicitation.models import WebhookDelivery

logger = logging.getLogger(__name__)


@shared_task(bind=True, ignore_result=True)
def deliver_webhook(self: Any, delivery_id: str) -> str:
    """One signed POST. With a broker a failure schedules the next attempt by countdown (backoff with jitter);
    eager (embedded) only records `next_attempt_at`, and `retry_due_webhooks` sends it when due."""
    eager = bool(self.request.is_eager)
    outcome = webhooks.attempt_delivery(delivery_id, timeout=webhooks.attempt_timeout(eager))
    if outcome.retry_in is not None and not eager:
        enqueue(delivery_id, countdown=outcome.retry_in)
    return outcome.status


@shared_task(ignore_result=True)
def retry_due_webhooks() -> int:
    """The sweep: queue every pending delivery whose next attempt is due. Returns how many it queued.

    Eager (embedded): each attempt runs here, in the sweeper's thread. With a broker the countdown tasks normally
    get there first; the sweep only picks up deliveries a minute overdue (a lost task, a broker outage)."""
    eager = bool(deliver_webhook.app.conf.task_always_eager)
    ids = webhooks.due_delivery_ids(grace_seconds=0 if eager else webhooks.ATTEMPT_LEASE_SECONDS)
    for delivery_id in ids:
        enqueue(delivery_id)
    return len(ids)


def replay(delivery: WebhookDelivery) -> WebhookDelivery:
    """The admin's replay: the delivery starts again from its first attempt, queued once the reset commits."""
    replayed = webhooks.replay_delivery(delivery)
    delivery_id = str(replayed.pk)
    transaction.on_commit(lambda: enqueue(delivery_id), robust=True)
    return replayed


def enqueue(delivery_id: str, countdown: float | None = None) -> None:
    """Queue an attempt. A broker outage is logged, not raised: the row is committed and the sweep sends it."""
    try:
        if countdown:
            deliver_webhook.apply_async((delivery_id,), countdown=countdown)
        else:
            deliver_webhook.delay(delivery_id)
    except Exception:
        logger.warning("could not queue webhook delivery %s; the retry sweep will send it", delivery_id)
