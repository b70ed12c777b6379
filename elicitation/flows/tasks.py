"""Celery beat's sweep of hosted flows."""

from celery import shared_task

from elicitation.flows import hosted_flows


@shared_task
def purge_expired_flows() -> int:
    return hosted_flows.purge_expired_flows()
