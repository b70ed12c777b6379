"""Channel-layer group names, the payloads pushed to them, and sending them once the transaction commits."""

import logging
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from elicitation.models import ElicitationRequest

logger = logging.getLogger(__name__)

MESSAGE_EXCERPT_LENGTH = 160


def agent_group(agent_id: int) -> str:
    return f"agent.{agent_id}"


def queue_group(queue_id: int) -> str:
    return f"queue.{queue_id}"


def request_group(request_id: Any) -> str:
    return f"request.{request_id}"


def request_summary(request: ElicitationRequest) -> dict[str, Any]:
    """What reviewer pages are told about a request: never content, never secrets."""
    return {
        "id": str(request.id),
        "queue": request.queue_id,
        "status": request.status,
        "mode": request.mode,
        "priority": request.priority,
        "agent": request.agent.name,
        "message_excerpt": request.message[:MESSAGE_EXCERPT_LENGTH],
        "created_at": request.created_at.isoformat(),
        "deadline": request.deadline.isoformat(),
        "claimed_by": request.claimed_by.get_username() if request.claimed_by else None,
        "claimed_at": request.claimed_at.isoformat() if request.claimed_at else None,
        "lease_expires_at": request.lease_expires_at.isoformat() if request.lease_expires_at else None,
        "url_flow_completed": request.url_flow_completed_at is not None,
    }


def send_to_group(group: str, message: dict[str, Any]) -> None:
    """Best effort: a push that fails is recovered by the durable feed and the long-poll recheck."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(group, message)
    except Exception:
        logger.warning(
            "channel layer push to %s failed; waiters fall back to the event feed", group, exc_info=True
        )


def send_on_commit(group: str, message: dict[str, Any]) -> None:
    transaction.on_commit(lambda: send_to_group(group, message))


def broadcast_request_change(request: ElicitationRequest, kind: str) -> None:
    """Tell every open queue page and request page about a transition, after commit."""
    summary = request_summary(request)
    send_on_commit(queue_group(request.queue_id), {"type": "queue.update", "kind": kind, "request": summary})
    send_on_commit(request_group(request.id), {"type": "request.update", "kind": kind, "request": summary})


def broadcast_draft_change(request_id: Any, draft: dict[str, Any]) -> None:
    send_on_commit(request_group(request_id), {"type": "request.draft", "draft": draft})


def push_agent_event(agent_id: int, payload: dict[str, Any]) -> None:
    send_on_commit(agent_group(agent_id), {"type": "agent.event", "event": payload})


def close_agent_sockets(agent_id: int) -> None:
    send_on_commit(agent_group(agent_id), {"type": "agent.revoked"})
