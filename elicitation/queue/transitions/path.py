"""The one path every transition takes: lock the request row, a guarded UPDATE whose row count says who won, the
audit row, an outbox row where the agent must hear of it, and a signal whose listeners push only after commit. A
loser gets InvalidTransition (409), never a half-written row.

A new transition calls `apply_transition`, or `guarded_update` then `announce` when it needs the locked row first
or takes several steps in one transaction."""

import functools
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.models import Q

from elicitation.models import Agent, ElicitationRequest, RequestEvent
from elicitation.queue import clock, outbox, prebuilt_sql, signals
from elicitation.queue.access import AGENT_VIEW_RELATIONS, request_with_relations
from elicitation.queue.audit import record_transition
from elicitation.queue.errors import InvalidTransition, NotFoundError


def reload_request(request_id: UUID) -> ElicitationRequest:
    """The request with its queue, agent and holder (`access.request_with_relations`); DoesNotExist if it is gone."""
    found = request_with_relations(request_id)
    if found is None:
        raise ElicitationRequest.DoesNotExist("No such request.")
    return found


@functools.cache
def _audit_head_sql(vendor: str) -> str:
    """The hash of the request's latest audit row, or '' (a column over the request's table)."""
    quote, request, event = connection.ops.quote_name, ElicitationRequest._meta, RequestEvent._meta
    request_pk = f"{quote(request.db_table)}.{quote('id')}"
    return (
        f"COALESCE((SELECT {quote('hash')} FROM {quote(event.db_table)} "  # noqa: S608 - metadata only
        f"WHERE {quote('request_id')} = {request_pk} ORDER BY {quote('id')} DESC LIMIT 1), '')"
    )


def lock_request(request_id: UUID) -> ElicitationRequest | None:
    """The request row, locked until commit (not its queue, agent or holder), read with them and with the
    hash its next audit row chains to (`audit_head`). Every transition takes it, so its SQL is built once per
    process (it was a quarter of the answering process's CPU)."""
    found = prebuilt_sql.get_with_related(
        ElicitationRequest,
        request_id,
        AGENT_VIEW_RELATIONS,
        extra_columns=(_audit_head_sql(connection.vendor),),
        lock=True,
    )
    if found is None:
        return None
    request, (audit_head,) = found
    request.audit_head = audit_head
    return request


def guarded_update(
    request_id: UUID, *, allowed: Q, changes: dict[str, Any], what: str
) -> tuple[str, ElicitationRequest]:
    """Compare-and-set: apply `changes` only where `allowed` still holds. Returns (previous status, fresh row).

    The row lock taken first makes the recorded previous status exact and serialises the request's audit chain;
    the guarded UPDATE is what decides who won. The row returned is the locked one with the changes applied
    (expressions re-read), and `audit_head` for the audit row."""
    locked = lock_request(request_id)
    if locked is None:
        raise NotFoundError("No such request.")
    previous = locked.status
    now = clock.now()
    updated = ElicitationRequest.objects.filter(Q(pk=request_id) & allowed).update(**changes, updated_at=now)
    if updated == 0:
        raise InvalidTransition(f"Cannot {what}: the request is {previous}.", current_status=previous)
    computed = [name for name, value in changes.items() if hasattr(value, "resolve_expression")]
    for name, value in changes.items():
        if name not in computed:
            setattr(locked, name, value)
    locked.updated_at = now
    if computed:
        locked.refresh_from_db(fields=computed)
    return previous, locked


def announce(
    request: ElicitationRequest,
    kind: str,
    *,
    previous: str,
    actor_user: User | None = None,
    actor_agent: Agent | None = None,
    detail: dict[str, Any] | None = None,
    tell_agent: str | None = None,
    page_kind: str | None = None,
    left_queue_id: int | None = None,
) -> None:
    """The tail every transition shares: audit row, outbox row (`tell_agent`), and the signal pushes listen to."""
    record_transition(
        request, kind, previous=previous, actor_user=actor_user, actor_agent=actor_agent, detail=detail
    )
    if tell_agent:
        outbox.emit_agent_event(request, tell_agent)
    signals.request_changed.send(
        sender=ElicitationRequest, request=request, kind=page_kind or kind, left_queue_id=left_queue_id
    )


def apply_transition(
    request_id: UUID,
    *,
    allowed: Q,
    changes: dict[str, Any],
    what: str,
    kind: str,
    actor_user: User | None = None,
    actor_agent: Agent | None = None,
    detail: dict[str, Any] | None = None,
    tell_agent: str | None = None,
    page_kind: str | None = None,
) -> ElicitationRequest:
    """One transition in its own transaction (a savepoint when the caller has one open)."""
    with transaction.atomic():
        previous, request = guarded_update(request_id, allowed=allowed, changes=changes, what=what)
        announce(
            request,
            kind,
            previous=previous,
            actor_user=actor_user,
            actor_agent=actor_agent,
            detail=detail,
            tell_agent=tell_agent,
            page_kind=page_kind,
        )
    return request
