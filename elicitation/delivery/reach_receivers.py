"""Reach's listeners to the core's signals: tell people about arrivals (tier 0) and escalation steps (tier 1 at
T1; tier 2, the holder and supervisors, at T2 when a claim kept the request), and rewrite Slack messages once a
request closes or moves. Each only queues a task after commit (tiers through the process's arrival window)."""

import functools
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from elicitation.delivery import reach_tasks, routing
from elicitation.models import Channel, ElicitationRequest, Notice, ReachRule

CLOSING_KINDS = frozenset({"completed", "expired", "withdrawn", "escalated"})


@functools.cache
def _has_rules_sql(vendor: str) -> str:
    quote, meta = connection.ops.quote_name, ReachRule._meta

    def column(name: str) -> str:
        return quote(str(meta.get_field(name).column))  # type: ignore[union-attr]

    return (
        f"SELECT 1 FROM {quote(meta.db_table)} WHERE {column('queue')} = %s "  # noqa: S608 - model metadata only
        f"AND {column('tier')} = %s AND {column('channel')} <> %s LIMIT 1"
    )


def _has_rules(queue_id: int, tier: int) -> bool:
    """`ReachRule.objects.filter(queue_id=…, tier=…).exclude(channel=BROWSER).exists()`, as SQL built once per
    process: every create asks it, and the ORM spent ~10x longer building the query than running it."""
    with connection.cursor() as cursor:
        cursor.execute(_has_rules_sql(connection.vendor), [queue_id, tier, Channel.BROWSER.value])
        return cursor.fetchone() is not None


def _notify_after_commit(request: ElicitationRequest, tier: int) -> None:
    # A create read its queue with `arrival_reach` (queue/transitions.postable_queue): no query of its own here.
    queue = ElicitationRequest._meta.get_field("queue").get_cached_value(request, None)
    known = getattr(queue, "arrival_reach", None) if tier == 0 else None
    if not (known if known is not None else _has_rules(request.queue_id, tier)):
        return
    request_id = str(request.pk)
    transaction.on_commit(lambda: reach_tasks.notify_soon(request_id, tier), robust=True)


def on_request_created(sender: Any, request: ElicitationRequest, **kwargs: Any) -> None:
    _notify_after_commit(request, 0)


def on_request_changed(sender: Any, request: ElicitationRequest, kind: str, **kwargs: Any) -> None:
    if kind not in CLOSING_KINDS:
        return
    # Without a bot token no Slack message can be rewritten, and every answer would pay a query to find that out.
    posted = Notice.objects.filter(request_id=request.pk, channel=Channel.SLACK).exclude(slack_ts="")
    if settings.SLACK_BOT_TOKEN and posted.exists():
        request_id = str(request.pk)
        transaction.on_commit(
            lambda: reach_tasks.enqueue(reach_tasks.update_slack_messages, request_id), robust=True
        )
    if kind == "escalated":
        _notify_after_commit(request, 0)  # an arrival in the new queue


def on_escalation_step(sender: Any, request: ElicitationRequest, step: int, **kwargs: Any) -> None:
    if step == 1:
        _notify_after_commit(request, 1)
    elif step == 2:
        # A request its holder kept past T2 (policy `notify`): tier 2 has no rules to ask about; it always tells.
        request_id = str(request.pk)
        transaction.on_commit(lambda: reach_tasks.notify_soon(request_id, routing.HOLDER_TIER), robust=True)
