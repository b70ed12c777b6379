"""An agent's side of a request: create it (idempotently, through the queue's answer rules, which may decide it
at once), withdraw it, and report that its URL flow completed. The queue an agent posts to is read with its
policy in one statement built once per process (`prebuilt_sql.postable_queue_sql`)."""

import hashlib
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q

from elicitation.models import (
    OPEN_STATUSES,
    Action,
    Agent,
    Channel,
    ElicitationRequest,
    Mode,
    Queue,
    QueuePolicy,
    Status,
)
from elicitation.queue import clock, prebuilt_sql, quorum, rules, schemas, signals
from elicitation.queue.audit import canonical_json, new_event, record_event
from elicitation.queue.errors import IdempotencyConflict, InvalidInput
from elicitation.queue.transitions.completion import completion_changes
from elicitation.queue.transitions.path import apply_transition, reload_request


def schema_limits() -> schemas.SchemaLimits:
    return schemas.SchemaLimits(
        max_properties=settings.MAX_SCHEMA_PROPERTIES, max_options=settings.MAX_SCHEMA_OPTIONS
    )


def body_fingerprint(body: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(body)).hexdigest()


def parse_schema_questions(requested_schema: Any, *, allow_sensitive: bool = False) -> list[schemas.Question]:
    """The request's questions, or InvalidInput naming each offending JSON path under `requestedSchema`."""
    try:
        return schemas.parse_requested_schema(
            requested_schema, limits=schema_limits(), allow_sensitive=allow_sensitive
        )
    except schemas.SchemaInvalid as exc:
        raise InvalidInput(
            "requestedSchema is not in the MCP elicitation subset.",
            {"requestedSchema" + e["path"].removeprefix("$"): e["reason"] for e in exc.errors},
        ) from None


def postable_queue(agent_id: int, slug: str) -> Queue | None:
    """The queue `slug` if the agent may post to it, with its policy loaded (`queue.policy`, None-safe through
    `rules.queue_policy`): what `agent.queues.filter(slug=…).select_related("policy").first()` returns. Every
    create reads it, and the ORM spent several times longer building that query than the database running it,
    so its SQL is built once per process. `queue.arrival_reach` says whether an arrival is news for a reach rule
    (delivery/reach_receivers.py), which every create would otherwise ask in a query of its own."""
    with connection.cursor() as cursor:
        cursor.execute(
            prebuilt_sql.postable_queue_sql(connection.vendor), [Channel.BROWSER.value, agent_id, slug]
        )
        row = cursor.fetchone()
    return None if row is None else _queue_from_row(row)


def agent_with_postable_queue(key_prefix: str, slug: str) -> tuple[Agent | None, Queue | None]:
    """The agent with this key prefix (unchecked: see keys.agent_and_queue_for_key), and what
    `postable_queue(agent, slug)` would return for it, in one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            prebuilt_sql.agent_with_postable_queue_sql(connection.vendor),
            [Channel.BROWSER.value, slug, key_prefix],
        )
        row = cursor.fetchone()
    if row is None:
        return None, None
    split = len(Agent._meta.concrete_fields)
    agent: Agent = prebuilt_sql.instance_from_row(Agent, row[:split])
    queue_pk = row[split + Queue._meta.concrete_fields.index(Queue._meta.pk)]
    return agent, None if queue_pk is None else _queue_from_row(row[split:])


def _queue_from_row(row: Any) -> Queue:
    """The queue, its policy (or None) and `arrival_reach` from the queue's part of a row of
    `prebuilt_sql.postable_queue_sql` or `prebuilt_sql.agent_with_postable_queue_sql`."""
    *row, arrival_reach = row
    split = len(Queue._meta.concrete_fields)
    queue: Queue = prebuilt_sql.instance_from_row(Queue, row[:split])
    queue.arrival_reach = bool(arrival_reach)  # type: ignore[attr-defined]
    policy_pk = row[split + QueuePolicy._meta.concrete_fields.index(QueuePolicy._meta.pk)]
    policy = prebuilt_sql.instance_from_row(QueuePolicy, row[split:]) if policy_pk is not None else None
    # What select_related leaves: the reverse one-to-one cached (None too, so reading it runs no query).
    Queue._meta.get_field("policy").set_cached_value(queue, policy)  # type: ignore[union-attr]
    if policy is not None:
        QueuePolicy._meta.get_field("queue").set_cached_value(policy, queue)  # type: ignore[union-attr]
    return queue


def create_request(
    *,
    agent: Agent,
    queue_slug: str,
    message: str,
    mode: str,
    requested_schema: dict[str, Any] | None = None,
    url: str = "",
    elicitation_id: str = "",
    context: dict[str, Any] | None = None,
    callback_url: str = "",
    priority: int = 0,
    expires_in: int | None = None,
    idempotency_key: str | None = None,
    fingerprint: str = "",
    allow_sensitive: bool = False,
    queue_read: tuple[str, Queue | None] | None = None,
) -> tuple[ElicitationRequest, bool]:
    """Queue a request. With an idempotency key a retry returns the first request; returns (request, created).
    `queue_read` is (slug, postable_queue(agent, slug)) when the caller read it already, with the agent's key."""
    if idempotency_key:
        existing = _find_idempotent(agent, idempotency_key, fingerprint)
        if existing is not None:
            return existing, False
    if queue_read is not None and queue_read[0] == queue_slug:
        queue = queue_read[1]
    else:
        queue = postable_queue(agent.pk, queue_slug)
    if queue is None:
        raise InvalidInput("Unknown queue.", {"queue": "unknown queue, or not one this key may post to"})
    questions: list[dict[str, Any]] = []
    if mode == Mode.FORM:
        if requested_schema is None:
            raise InvalidInput(
                "Form mode needs requestedSchema.", {"requestedSchema": "is required in form mode"}
            )
        parsed = parse_schema_questions(requested_schema, allow_sensitive=allow_sensitive)
        questions = schemas.questions_to_json(parsed)
    # Answer rules and quorum (queue/rules.py): None, and nothing changes, for a queue without a policy.
    decision = rules.intake_decision(queue, agent, message, mode, requested_schema, context, questions)
    if decision is not None:
        queue, priority = decision.queue, priority if decision.priority is None else decision.priority
        expires_in = decision.deadline_seconds or expires_in
    now = clock.now()
    seconds = expires_in if expires_in is not None else queue.default_deadline_seconds
    request = ElicitationRequest(
        queue=queue,
        agent=agent,
        idempotency_key=idempotency_key or None,
        body_fingerprint=fingerprint,
        message=message,
        mode=mode,
        requested_schema=requested_schema if mode == Mode.FORM else None,
        questions=questions,
        url=url,
        elicitation_id=elicitation_id,
        context=context or {},
        callback_url=callback_url,
        priority=priority,
        deadline=now + timedelta(seconds=seconds),
        policy=decision.request_policy if decision is not None else None,
    )
    created = new_event(request, "created", actor_agent=agent, to_status=Status.PENDING, prev_hash="")
    try:
        if decision is None and prebuilt_sql.inserts_in_one_statement() and not connection.in_atomic_block:
            # The busiest write: the request and its audit row in one statement, atomic on its own, so no BEGIN
            # and COMMIT round trips. The listeners run after that commit; their pushes leave at once.
            prebuilt_sql.insert_together(request, created)
            signals.request_created.send(sender=ElicitationRequest, request=request)
        else:
            with transaction.atomic():
                prebuilt_sql.insert_together(request, created)
                decided = _apply_intake_decision(request, decision) if decision is not None else None
                if decided is None:
                    signals.request_created.send(sender=ElicitationRequest, request=request)
                else:
                    request = decided
    except IntegrityError:
        # Lost a race with a concurrent retry carrying the same key: the winner's row is the answer.
        if not idempotency_key:
            raise
        existing = _find_idempotent(agent, idempotency_key, fingerprint)
        if existing is None:
            raise
        return existing, False
    return request, True


def _find_idempotent(agent: Agent, key: str, fingerprint: str) -> ElicitationRequest | None:
    existing = (
        ElicitationRequest.objects.select_related("queue", "agent", "claimed_by")
        .filter(agent=agent, idempotency_key=key)
        .first()
    )
    if existing is not None and existing.body_fingerprint != fingerprint:
        raise IdempotencyConflict(
            "This Idempotency-Key was already used with a different body.", {"Idempotency-Key": "reused"}
        )
    return existing


def _apply_intake_decision(
    request: ElicitationRequest, decision: rules.IntakeDecision
) -> ElicitationRequest | None:
    """Audit what the rules did to a request just stored; close it when a rule (or a scripted queue) decided.
    Returns the closed request, or None when it waits for a person."""
    for kind, what in decision.audit:
        record_event(request, kind, from_status=Status.PENDING, to_status=Status.PENDING, detail=what)
    detail: dict[str, Any]
    if decision.outcome is not None:
        action, content, rule = decision.outcome
        meta = {quorum.DECISION_META: {"digest": rules.request_digest_of(request), "rule": rule}}
        detail = {"action": action, "rule": rule}
    elif decision.unmatched_reason is not None:
        action, content = Action.DECLINE, None
        meta = {quorum.DECISION_META: {"reason": decision.unmatched_reason}}
        detail = {"action": action, "reason": decision.unmatched_reason}
    else:
        return None
    now = clock.now()
    return apply_transition(
        request.pk,
        allowed=Q(status=Status.PENDING),
        changes={**completion_changes(None, action, content, now), "result_meta": meta},
        what="decide by rule",
        kind="completed",
        detail=detail,
        tell_agent="completed",
    )


def withdraw_request(request_id: UUID, *, agent: Agent) -> ElicitationRequest:
    """The agent's turn ended: the open request is abandoned and vanishes from reviewers' pages."""
    return apply_transition(
        request_id,
        allowed=Q(agent=agent, status__in=OPEN_STATUSES),
        changes={
            "status": Status.WITHDRAWN,
            "claimed_by": None,
            "lease_expires_at": None,
            "closed_at": clock.now(),
        },
        what="withdraw",
        kind="withdrawn",
        actor_agent=agent,
        tell_agent="withdrawn",
    )


def report_url_flow_complete(
    agent: Agent, *, request_id: UUID | None = None, elicitation_id: str = ""
) -> bool:
    """MCP's notifications/elicitation/complete: unknown or closed ids are ignored, as the spec requires."""
    matches = ElicitationRequest.objects.filter(agent=agent, mode=Mode.URL, status__in=OPEN_STATUSES)
    if request_id is not None:
        matches = matches.filter(pk=request_id)
    elif elicitation_id:
        matches = matches.filter(elicitation_id=elicitation_id)
    else:
        return False
    with transaction.atomic():
        target = matches.select_for_update().first()
        if target is None or target.url_flow_completed_at is not None:
            return False
        ElicitationRequest.objects.filter(pk=target.pk).update(url_flow_completed_at=clock.now())
        request = reload_request(target.pk)
        record_event(request, "url_flow_completed", actor_agent=agent)
        signals.request_changed.send(sender=ElicitationRequest, request=request, kind="url_flow_completed")
    return True
