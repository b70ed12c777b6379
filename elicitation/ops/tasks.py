"""Celery beat's periodic sweeps of ops: each calls one function and owns only its schedule (settings.py)."""

from celery import shared_task

from elicitation.ops import notifications
from elicitation.queue import transitions


@shared_task
def expire_overdue_requests() -> int:
    return transitions.expire_overdue_requests()


@shared_task
def release_expired_claims() -> int:
    return transitions.release_expired_claims()


@shared_task
def send_notification_digests() -> int:
    return notifications.send_due_digests()
