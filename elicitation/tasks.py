"""Celery tasks: thin wrappers that take ids, call one service, and own only their retry policy."""

from typing import Any

from celery import shared_task

from elicitation import services


@shared_task
def expire_overdue_requests() -> int:
    return services.expire_overdue_requests()


@shared_task
def release_expired_claims() -> int:
    return services.release_expired_claims()


@shared_task
def purge_expired_flows() -> int:
    from elicitation import flows

    return flows.purge_expired_flows()


@shared_task
def notify_queue_members(queue_id: int) -> int:
    from elicitation import notifications

    return notifications.send_queue_digest(queue_id)


@shared_task
def send_notification_digests() -> int:
    from elicitation import notifications

    return notifications.send_due_digests()


@shared_task(bind=True, ignore_result=True)
def deliver_webhook(self: Any, delivery_id: str) -> str:
    """One signed POST. With a broker a failure schedules the next attempt by countdown (backoff with jitter);
    eager (embedded) only records `next_attempt_at`, and `retry_due_webhooks` sends it when due."""
    from elicitation import webhooks

    eager = bool(self.request.is_eager)
    outcome = webhooks.attempt_delivery(delivery_id, timeout=webhooks.attempt_timeout(eager))
    if outcome.retry_in is not None and not eager:
        webhooks.enqueue(delivery_id, countdown=outcome.retry_in)
    return outcome.status


@shared_task(ignore_result=True)
def retry_due_webhooks() -> int:
    from elicitation import webhooks

    return webhooks.retry_due_deliveries()
