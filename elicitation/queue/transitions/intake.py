"""An agent's side of a request: create it (idempotently, through the queue's answer rules, which may decide it
at once), withdraw it, and report that its URL flow completed."""

import hashlib
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, OuterRef, Q

from elicitation.models import (
    OPEN_STATUSES,
    Action,
    Agent,
    Channel,
    ElicitationRequest,
    Mode,
    Queue,
    ReachRule,
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
    """The queue `slug` if the agent may post to it, in one query with what intake reads of it: its policy
    (`rules.queue_policy`, None without a query when it has none) and `arrival_reach`, whether an arrival there
    is news for a reach rule beyond the browser (delivery/reach_receivers.py reads it instead of asking again)."""
    reaches_beyond_browser = ReachRule.objects.filter(queue=OuterRef("pk"), tier=0).exclude(
        channel=Channel.BROWSER
    )
    return (
        Queue.objects.filter(agents=agent_id, slug=slug)
        .select_related("policy")
        .annotate(arrival_reach=Exists(reaches_beyond_browser))
        .first()
    )


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
) -> tuple[ElicitationRequest, bool]:
    """Queue a request. With an idempotency key a retry returns the first request; returns (request, created)."""
    if idempotency_key:
        existing = _find_idempotent(agent, idempotency_key, fingerprint)
        if existing is not None:
            return existing, False
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
        arrival_queue=queue,
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
        writes_more = decision is not None and decision.writes_more
        if not writes_more and prebuilt_sql.inserts_in_one_statement() and not connection.in_atomic_block:
            # The busiest write (and a policy's request that waits for a person as it came): the request and its
            # audit row in one statement, atomic on its own, so no BEGIN and COMMIT round trips. The listeners run
            # after that commit; their pushes leave at once.
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
        changes=completion_changes(None, action, content, now, request=request, meta=meta),
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
