"""The agent's outbox: a durable, gap-free, per-agent ordered feed of what it must be told (completed, expired,
withdrawn). Pushes and webhooks carry these rows; the feed and the sockets' rechecks read them back."""

from typing import Any

from django.db import connection

from elicitation.models import Agent, AgentEvent, ElicitationRequest
from elicitation.queue import signals
from elicitation.queue.errors import NotFoundError


def agent_event_payload(request: ElicitationRequest, kind: str, seq: int) -> dict[str, Any]:
    payload: dict[str, Any] = {"type": kind, "id": str(request.id), "cursor": seq, "status": request.status}
    result = request.result()
    if result is not None:
        payload["result"] = result
    return payload


NEXT_EVENT_SEQ_SQL = (
    f"UPDATE {Agent._meta.db_table} SET last_event_seq = last_event_seq + 1 "  # noqa: S608 - model's own table
    "WHERE id = %s RETURNING last_event_seq"
)


def next_event_seq(agent_id: int) -> int:
    """Bump the agent's cursor in one statement. The UPDATE locks the agent row until commit, so cursors
    commit in order."""
    with connection.cursor() as cursor:
        cursor.execute(NEXT_EVENT_SEQ_SQL, [agent_id])
        row = cursor.fetchone()
    if row is None:
        raise NotFoundError("No such agent.")
    return int(row[0])


def emit_agent_event(request: ElicitationRequest, kind: str) -> AgentEvent:
    """Append to the agent's outbox, under the next cursor."""
    seq = next_event_seq(request.agent_id)
    payload = agent_event_payload(request, kind, seq)
    event = AgentEvent.objects.create(
        agent_id=request.agent_id, seq=seq, kind=kind, request=request, payload=payload
    )
    signals.agent_event_recorded.send(
        sender=AgentEvent, event=event, callback_url=request.callback_url or request.agent.callback_url
    )
    return event
