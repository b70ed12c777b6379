"""Celery tasks of reach (Slack, e-mail, the escalation chain): each takes ids, calls one function, and owns only
its retry policy. The sweeps at the bottom are in CELERY_BEAT_SCHEDULE, so the embedded sweeper runs them too.

Sending runs on the `notices` queue (settings.CELERY_TASK_ROUTES), which a worker of its own consumes, so answers
and sweeps never wait behind a slow Slack or SMTP server. Arrivals (and the chain's tiers) reach it through each
process's arrival window (arrival_window.py): one `notify_arrivals` task per window, not per arrival. Embedded
(eager), `enqueue` hands tasks to the process's background senders (background.py): never in the thread of the
request whose commit queued them."""

import logging
from typing import Any

from celery import shared_task
from celery.signals import task_postrun

from elicitation.delivery import background, notices
from elicitation.delivery.arrival_window import Arrival, ArrivalWindow
from elicitation.models import Notice
from elicitation.queue import transitions

logger = logging.getLogger(__name__)

# How long a process gathers arrivals into one task under load (the first after a quiet moment leaves at once),
# and at most how many one task records.
ARRIVAL_WINDOW_SECONDS = 0.2
ARRIVALS_PER_TASK = 25


def notify_soon(request_id: str, tier: int) -> None:
    """Tell the request's tier (after its commit): with a broker, through the process's arrival window; eager
    (embedded), a task of its own on the background senders at once."""
    if notify_arrivals.app.conf.task_always_eager:
        enqueue(notify_arrivals, [[request_id, tier]])
    else:
        arrivals.add(request_id, tier)


@shared_task(bind=True, ignore_result=True)
def notify_arrivals(self: Any, arrived: list[Arrival]) -> int:
    """Record who is told about a window's arrivals ([request id, tier] each): one read of the requests, routing
    once per queue and tier, one insert. Then each notice goes to the process's senders of its channel
    (background.py), so channels and notices go concurrently and a slow peer holds up only its own; the task does
    not wait for them. Each was recorded `sending` with a lease, so one lost with its process (or dropped from a
    full backlog) is sent by the retry sweep."""
    taken = notices.record_arrivals((request_id, tier) for request_id, tier in arrived)
    for notice in taken:
        background.submit(_send_taken, notice, lane=notice.channel)
    return len(taken)


def _send_taken(notice: Notice) -> None:
    retry_in = notices.send_taken(notice)
    if retry_in is not None:
        enqueue(send_notices, [notice.pk], countdown=retry_in)


@shared_task(bind=True, ignore_result=True)
def notify_tier(self: Any, request_id: str, tier: int) -> int:
    """One request's tier: what a broker may still hold from before arrival windows; new code queues
    `notify_arrivals`. One task per batch of one channel sends them; the first batch is sent here."""
    batches = notices.record_notice_batches(request_id, tier)
    for batch in batches[1:]:
        enqueue(send_notices, batch)
    if batches:
        _send_and_queue_retries(self, batches[0])
    return sum(len(batch) for batch in batches)


@shared_task(bind=True, ignore_result=True)
def send_notices(self: Any, notice_ids: list[int]) -> None:
    """A batch of e-mails (one SMTP connection) or Slack posts. With a broker the failed ones are queued again,
    as a batch, when the last of their backoffs is up; eager (embedded) leaves them to `retry_due_notices`."""
    _send_and_queue_retries(self, notice_ids)


@shared_task(bind=True, ignore_result=True)
def send_notice(self: Any, notice_id: int) -> None:
    """One notice: what a broker may still hold from before batches; new code queues `send_notices`."""
    retry_in = notices.send_notice(notice_id)
    if retry_in is not None and not self.request.is_eager:
        enqueue(send_notices, [notice_id], countdown=retry_in)


def _send_and_queue_retries(task: Any, notice_ids: list[int]) -> None:
    retries = notices.send_notices(notice_ids)
    if retries and not task.request.is_eager:
        enqueue(send_notices, sorted(retries), countdown=max(retries.values()))


@shared_task(ignore_result=True)
def update_slack_messages(request_id: str) -> int:
    return notices.update_slack_messages(request_id)


@shared_task
def run_escalation_chain() -> int:
    return transitions.run_escalation_chain()


@shared_task
def retry_due_notices() -> int:
    batches = notices.due_notice_batches()
    for batch in batches:
        enqueue(send_notices, batch)
    return sum(len(batch) for batch in batches)


@shared_task
def send_reach_digests() -> int:
    return notices.send_due_digests()


arrivals = ArrivalWindow(
    ARRIVAL_WINDOW_SECONDS, ARRIVALS_PER_TASK, lambda arrived: enqueue(notify_arrivals, arrived)
)


@task_postrun.connect
def _hand_on_arrivals_of_the_task(**kwargs: Any) -> None:
    # A Celery task's arrivals (a sweep's tiers) leave as it ends: a prefork child may exit without exit handlers.
    arrivals.flush()


def enqueue(task: Any, *args: Any, countdown: float | None = None) -> None:
    """Queue a task; a broker outage is logged, not raised: the rows are committed and the sweeps catch up.

    Eager (the embedded default, no broker): the task runs on the background senders, off the caller's thread. A
    countdown there is dropped: eager tasks leave their retries to the retry sweep."""
    if task.app.conf.task_always_eager:
        if not countdown:
            background.submit(_run_eagerly, task, args)
        return
    try:
        if countdown:
            task.apply_async(args, countdown=countdown)
        else:
            task.delay(*args)
    except Exception:
        logger.warning("could not queue %s%r; the retry sweep will catch up", task.name, args)


def _run_eagerly(task: Any, args: tuple[Any, ...]) -> None:
    # `apply` runs the task body as Celery's eager mode does (request.is_eager set); throw=True so a failure
    # reaches the background pool's log instead of an EagerResult nobody reads.
    task.apply(args, throw=True)
