"""Sending a held answer when its undo window closes (queue/transitions/held_answers.py holds the answer).

After the hold commits, a timer is set for `send_at`: with a broker, a Celery task with that countdown; in the
embedded deployment (eager Celery, no broker), a timer thread that hands the send to the background senders,
never the request's thread. Either may be lost with its process: the sweep (`send_due_answers`, on the beat
schedule and the in-process sweeper) sends every held answer past its time, so a crash delays an answer by at
most a sweep interval and never loses it."""

import logging
import threading
from typing import Any
from uuid import UUID

from celery import shared_task
from django.db import transaction

from elicitation.delivery import background
from elicitation.models import HeldAnswer
from elicitation.queue import clock, transitions

logger = logging.getLogger(__name__)

# The timer fires this much after `send_at`, so the send never finds the answer not yet due.
LATE_BY_SECONDS = 0.05


@shared_task(ignore_result=True)
def send_held_answer(request_id: str) -> bool:
    return transitions.send_held_answer(UUID(request_id)) is not None


@shared_task(ignore_result=True)
def send_due_answers() -> int:
    return transitions.send_due_answers()


def on_answer_held(sender: Any, held: HeldAnswer, **kwargs: Any) -> None:
    request_id = str(held.pk)
    delay = max(0.0, (held.send_at - clock.now()).total_seconds()) + LATE_BY_SECONDS
    transaction.on_commit(lambda: schedule(request_id, delay), robust=True)


def schedule(request_id: str, delay: float) -> None:
    """A broker outage or a full backlog is logged, not raised: the hold is committed and the sweep sends it."""
    if send_held_answer.app.conf.task_always_eager:
        timer = threading.Timer(delay, _submit, (request_id,))
        timer.daemon = True
        timer.start()
        return
    try:
        send_held_answer.apply_async((request_id,), countdown=delay)
    except Exception:
        logger.warning("could not queue the held answer to %s; the sweep will send it", request_id)


def _submit(request_id: str) -> None:
    background.submit(_send, request_id)


def _send(request_id: str) -> None:
    transitions.send_held_answer(UUID(request_id))
