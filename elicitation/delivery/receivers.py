"""Delivery's listeners to the core's signals: pushes to pages and waiting agents, and webhooks."""

from typing import Any

from django.db import transaction

from elicitation.delivery import held_answers, pushes, reach_receivers, tasks, webhooks
from elicitation.models import AgentEvent
from elicitation.queue import signals


def schedule_webhook(sender: Any, event: AgentEvent, callback_url: str = "", **kwargs: Any) -> None:
    """The delivery row is written with the event (same transaction); the first attempt is queued after commit.
    robust: a broker outage must not fail the reviewer's answer."""
    if not callback_url:
        return
    delivery_id = str(webhooks.schedule_delivery(event, callback_url).pk)
    transaction.on_commit(lambda: tasks.enqueue(delivery_id), robust=True)


def connect() -> None:
    signals.request_created.connect(pushes.on_request_created, dispatch_uid="delivery.request_created")
    signals.request_changed.connect(pushes.on_request_changed, dispatch_uid="delivery.request_changed")
    signals.draft_changed.connect(pushes.on_draft_changed, dispatch_uid="delivery.draft_changed")
    signals.agent_event_recorded.connect(pushes.on_agent_event_recorded, dispatch_uid="delivery.agent_push")
    signals.agent_event_recorded.connect(schedule_webhook, dispatch_uid="delivery.webhook")
    signals.agent_key_changed.connect(pushes.on_agent_key_changed, dispatch_uid="delivery.agent_key_changed")
    # An answer in its undo window is sent when the window closes.
    signals.answer_held.connect(held_answers.on_answer_held, dispatch_uid="delivery.answer_held")
    # Reach: Slack and e-mail on arrival and escalation steps; Slack messages rewritten when a request closes.
    signals.request_created.connect(reach_receivers.on_request_created, dispatch_uid="reach.request_created")
    signals.request_changed.connect(reach_receivers.on_request_changed, dispatch_uid="reach.request_changed")
    signals.escalation_step_taken.connect(reach_receivers.on_escalation_step, dispatch_uid="reach.escalation")
