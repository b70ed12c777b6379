"""Celery tasks of reach (Slack, e-mail, the escalation chain): each takes ids, calls one function, and owns only
its retry policy. The sweeps at the bottom are in CELERY_BEAT_SCHEDULE, so the embedded sweeper runs them too."""

import logging
from typing import Any

from celery import shared_task

from elicitation.delivery import notices
from elicitation.queue import transitions

logger = logging.getLogger(__name__)


@shared_task(bind=True, ignore_result=True)
def notify_tier(self: Any, request_id: str, tier: int) -> int:
    """Record who is told about the request at this tier and make each notice's first attempt here, without a
    second trip through the broker; a failed attempt is retried by its own task (or the retry sweep)."""
    ids = notices.record_notices(request_id, tier)
    for notice_id in ids:
        retry_in = notices.send_notice(notice_id)
        if retry_in is not None and not self.request.is_eager:
            enqueue(send_notice, notice_id, countdown=retry_in)
    return len(ids)


@shared_task(bind=True, ignore_result=True)
def send_notice(self: Any, notice_id: int) -> None:
    """One e-mail or Slack post. With a broker a failure schedules the next attempt by countdown; eager
    (embedded) leaves it to `retry_due_notices`."""
    retry_in = notices.send_notice(notice_id)
    if retry_in is not None and not self.request.is_eager:
        enqueue(send_notice, notice_id, countdown=retry_in)


@shared_task(ignore_result=True)
def update_slack_messages(request_id: str) -> int:
    return notices.update_slack_messages(request_id)


@shared_task
def run_escalation_chain() -> int:
    return transitions.run_escalation_chain()


@shared_task
def retry_due_notices() -> int:
    ids = notices.due_notice_ids()
    for notice_id in ids:
        enqueue(send_notice, notice_id)
    return len(ids)


@shared_task
def send_reach_digests() -> int:
    return notices.send_due_digests()


def enqueue(task: Any, *args: Any, countdown: float | None = None) -> None:
    """Queue a task; a broker outage is logged, not raised: the rows are committed and the sweeps catch up."""
    try:
        if countdown:
            task.apply_async(args, countdown=countdown)
        else:
            task.delay(*args)
    except Exception:
        logger.warning("could not queue %s%r; the retry sweep will catch up", task.name, args)
