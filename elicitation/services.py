"""Every write to the review queue. Each transition is a guarded UPDATE whose row count says who won, plus an
audit row, an outbox row where the agent must hear of it, and pushes that leave only after commit."""

import hashlib
import json
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, connection, transaction
from django.db.models import F, OuterRef, Q, Subquery, Value
from django.db.models.functions import Coalesce

from elicitation import clock, events, schemas
from elicitation.exceptions import (
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    NotFound,
    PermissionDenied,
)
from elicitation.keys import IssuedKey, issue_key
from elicitation.models import (
    OPEN_STATUSES,
    Action,
    ActorType,
    Agent,
    AgentEvent,
    Draft,
    DraftState,
    ElicitationRequest,
    ExpiryOutcome,
    Mode,
    Queue,
    RequestEvent,
    ReviewerToken,
    Status,
)

User = AbstractBaseUser


def schema_limits() -> schemas.SchemaLimits:
    return schemas.SchemaLimits(
        max_properties=settings.MAX_SCHEMA_PROPERTIES, max_options=settings.MAX_SCHEMA_OPTIONS
    )


# --- audit and outbox -------------------------------------------------------------------------------------------


def _canonical(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def audit_row_hash(event: RequestEvent) -> str:
    body = {
        "request": str(event.request_id),
        "kind": event.kind,
        "actor_type": event.actor_type,
        "actor_user": event.actor_user_id,
        "actor_agent": event.actor_agent_id,
        "from": event.from_status,
        "to": event.to_status,
        "detail": event.detail,
        "at": event.at.isoformat(),
    }
    return hashlib.sha256(event.prev_hash.encode() + _canonical(body)).hexdigest()


def record_event(
    request: ElicitationRequest,
    kind: str,
    *,
    actor_user: Any = None,
    actor_agent: Agent | None = None,
    from_status: str = "",
    to_status: str = "",
    detail: dict[str, Any] | None = None,
    prev_hash: str | None = None,
) -> RequestEvent:
    """Append an audit row chained to the request's previous one. Callers hold the request's row lock.

    `prev_hash` is the hash of the request's latest audit row when the caller read it under that lock
    (`_transition` does, as `request.audit_head`), saving the lookup."""
    if prev_hash is None:
        prev_hash = (
            RequestEvent.objects.filter(request_id=request.pk)
            .order_by("-id")
            .values_list("hash", flat=True)
            .first()
        ) or ""
    actor_type = ActorType.REVIEWER if actor_user else ActorType.AGENT if actor_agent else ActorType.SYSTEM
    event = RequestEvent(
        request_id=request.pk,
        kind=kind,
        actor_type=actor_type,
        actor_user=actor_user,
        actor_agent=actor_agent,
        from_status=from_status,
        to_status=to_status,
        detail=detail or {},
        at=clock.now(),
        prev_hash=prev_hash,
    )
    event.hash = audit_row_hash(event)
    event.save()
    return event


def record_transition(
    request: ElicitationRequest,
    kind: str,
    *,
    previous: str,
    actor_user: Any = None,
    actor_agent: Agent | None = None,
    detail: dict[str, Any] | None = None,
) -> RequestEvent:
    """The audit row for a `_transition` just made: from `previous` to the row's new status, chained to the
    head `_transition` read under the row lock."""
    return record_event(
        request,
        kind,
        actor_user=actor_user,
        actor_agent=actor_agent,
        from_status=previous,
        to_status=request.status,
        detail=detail,
        prev_hash=request.audit_head,
    )


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
        raise NotFound("No such agent.")
    return int(row[0])


def emit_agent_event(request: ElicitationRequest, kind: str) -> AgentEvent:
    """Append to the agent's outbox, under the next cursor."""
    seq = next_event_seq(request.agent_id)
    payload = agent_event_payload(request, kind, seq)
    event = AgentEvent.objects.create(
        agent_id=request.agent_id, seq=seq, kind=kind, request=request, payload=payload
    )
    events.push_agent_event(request.agent_id, payload)
    callback_url = request.callback_url or request.agent.callback_url
    if callback_url:
        from elicitation import webhooks  # imported late: webhooks imports tasks, which import services

        webhooks.schedule_delivery(event, callback_url)
    return event


def _reload(request_id: UUID) -> ElicitationRequest:
    return ElicitationRequest.objects.select_related("queue", "agent", "claimed_by").get(pk=request_id)


def _lock(request_id: UUID) -> ElicitationRequest | None:
    """The request row, locked until commit (not its queue, agent or holder), read with them and with the
    hash its next audit row chains to (`audit_head`)."""
    latest_hash = RequestEvent.objects.filter(request_id=OuterRef("pk")).order_by("-id").values("hash")[:1]
    return (
        ElicitationRequest.objects.select_for_update(of=("self",))
        .select_related("queue", "agent", "claimed_by")
        # The model declares audit_head (not a column) so that readers type-check; this is where it is set.
        .annotate(audit_head=Coalesce(Subquery(latest_hash), Value("")))  # type: ignore[no-redef]
        .filter(pk=request_id)
        .first()
    )


def _transition(
    request_id: UUID,
    *,
    allowed: Q,
    changes: dict[str, Any],
    what: str,
) -> tuple[str, ElicitationRequest]:
    """Compare-and-set: apply `changes` only where `allowed` still holds. Returns (previous status, fresh row).

    Runs inside the caller's transaction. The row lock taken first makes the recorded previous status exact
    and serialises the request's audit chain; the guarded UPDATE is what decides who won. The row returned is
    the locked one with the changes applied (expressions re-read), and `audit_head` for `record_event`."""
    locked = _lock(request_id)
    if locked is None:
        raise NotFound("No such request.")
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


# --- agents: create, withdraw, URL-flow completion ----------------------------------------------------------------


def body_fingerprint(body: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(body)).hexdigest()


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
    queue = agent.queues.filter(slug=queue_slug).first()
    if queue is None:
        raise InvalidInput("Unknown queue.", {"queue": "unknown queue, or not one this key may post to"})
    questions: list[dict[str, Any]] = []
    if mode == Mode.FORM:
        if requested_schema is None:
            raise InvalidInput(
                "Form mode needs requestedSchema.", {"requestedSchema": "is required in form mode"}
            )
        try:
            parsed = schemas.parse_requested_schema(
                requested_schema, limits=schema_limits(), allow_sensitive=allow_sensitive
            )
        except schemas.SchemaInvalid as exc:
            raise InvalidInput(
                "requestedSchema is not in the MCP elicitation subset.",
                {"requestedSchema" + e["path"].removeprefix("$"): e["reason"] for e in exc.errors},
            ) from None
        questions = schemas.questions_to_json(parsed)
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
    )
    try:
        with transaction.atomic():
            request.save(force_insert=True)
            record_event(request, "created", actor_agent=agent, to_status=Status.PENDING, prev_hash="")
            events.broadcast_new_request(request)
            from elicitation import notifications

            notifications.request_arrived(request)
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


def withdraw_request(request_id: UUID, *, agent: Agent) -> ElicitationRequest:
    """The agent's turn ended: the open request is abandoned and vanishes from reviewers' pages."""
    with transaction.atomic():
        previous, request = _transition(
            request_id,
            allowed=Q(agent=agent, status__in=OPEN_STATUSES),
            changes={
                "status": Status.WITHDRAWN,
                "claimed_by": None,
                "lease_expires_at": None,
                "closed_at": clock.now(),
            },
            what="withdraw",
        )
        record_transition(
            request,
            "withdrawn",
            actor_agent=agent,
            previous=previous,
        )
        emit_agent_event(request, "withdrawn")
        events.broadcast_request_change(request, "withdrawn")
    return request


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
        request = _reload(target.pk)
        record_event(request, "url_flow_completed", actor_agent=agent)
        events.broadcast_request_change(request, "url_flow_completed")
    return True


# --- reviewers: claims ---------------------------------------------------------------------------------------------


def _claim_changes(user: Any, queue: Queue, now: datetime) -> dict[str, Any]:
    return {
        "status": Status.CLAIMED,
        "claimed_by": user,
        "claimed_at": now,
        "lease_expires_at": now + timedelta(seconds=queue.lease_seconds),
        "first_claimed_at": Coalesce(F("first_claimed_at"), now),
    }


def _claimable(now: datetime) -> Q:
    # A claim whose lease ran out is as good as pending even before the sweep returns it.
    return Q(deadline__gt=now) & (
        Q(status=Status.PENDING) | Q(status=Status.CLAIMED, lease_expires_at__lte=now)
    )


def claim_request(request_id: UUID, *, user: Any) -> ElicitationRequest:
    now = clock.now()
    request = _reload(request_id)
    with transaction.atomic():
        previous, claimed = _transition(
            request_id,
            allowed=_claimable(now) | Q(status=Status.CLAIMED, claimed_by=user),
            changes=_claim_changes(user, request.queue, now),
            what="claim",
        )
        record_transition(
            claimed,
            "claimed",
            actor_user=user,
            previous=previous,
        )
        events.broadcast_request_change(claimed, "claimed")
    return claimed


def claim_next(queue: Queue, *, user: Any, attempts: int = 20) -> ElicitationRequest | None:
    """Claim the queue's most urgent pending request: priority first, then age. None when the queue is empty."""
    from elicitation import selectors

    for _ in range(attempts):
        now = clock.now()
        with transaction.atomic():
            candidate = selectors.next_claimable_id(queue, now)
            if candidate is None:
                return None
            updated = ElicitationRequest.objects.filter(Q(pk=candidate) & _claimable(now)).update(
                **_claim_changes(user, queue, now), updated_at=now
            )
            if updated == 0:
                continue  # another reviewer took it between our read and write (SQLite path): try the next one
            claimed = _lock(candidate)  # already ours: the UPDATE holds the row until commit
            assert claimed is not None
            record_transition(claimed, "claimed", actor_user=user, previous=Status.PENDING)
            events.broadcast_request_change(claimed, "claimed")
            return claimed
    raise InvalidTransition("The queue is too contended right now; try again.")


def take_over_claim(request_id: UUID, *, supervisor: Any) -> ElicitationRequest:
    now = clock.now()
    request = _reload(request_id)
    previous_holder = request.claimed_by.get_username() if request.claimed_by else None
    with transaction.atomic():
        previous, claimed = _transition(
            request_id,
            allowed=Q(status__in=OPEN_STATUSES, deadline__gt=now),
            changes=_claim_changes(supervisor, request.queue, now),
            what="take over",
        )
        record_transition(
            claimed,
            "taken_over",
            actor_user=supervisor,
            previous=previous,
            detail={"previous_holder": previous_holder},
        )
        events.broadcast_request_change(claimed, "claimed")
    return claimed


def renew_claim(request_id: UUID, *, user: Any) -> ElicitationRequest:
    """Heartbeat: extend the lease, only while this reviewer still holds the claim."""
    now = clock.now()
    request = _reload(request_id)
    with transaction.atomic():
        _, renewed = _transition(
            request_id,
            allowed=Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now),
            changes={"lease_expires_at": now + timedelta(seconds=request.queue.lease_seconds)},
            what="renew the claim",
        )
    return renewed


def release_claim(request_id: UUID, *, user: Any) -> ElicitationRequest:
    with transaction.atomic():
        previous, released = _transition(
            request_id,
            allowed=Q(status=Status.CLAIMED, claimed_by=user),
            changes={
                "status": Status.PENDING,
                "claimed_by": None,
                "claimed_at": None,
                "lease_expires_at": None,
            },
            what="release",
        )
        record_transition(
            released,
            "released",
            actor_user=user,
            previous=previous,
        )
        events.broadcast_request_change(released, "released")
    return released


def release_claim_as_operator(request_id: UUID, *, operator: Any) -> ElicitationRequest:
    """An operator (the admin's release action) returns a claim to the queue; the audit names operator and holder."""
    request = _reload(request_id)
    holder = request.claimed_by
    with transaction.atomic():
        previous, released = _transition(
            request_id,
            # Pinned to the holder we read: if the claim changed hands meanwhile, the operator must look again.
            allowed=Q(status=Status.CLAIMED, claimed_by=holder),
            changes={
                "status": Status.PENDING,
                "claimed_by": None,
                "claimed_at": None,
                "lease_expires_at": None,
            },
            what="release",
        )
        record_transition(
            released,
            "released",
            actor_user=operator,
            previous=previous,
            detail={"holder": holder.get_username() if holder else None, "by": "operator"},
        )
        events.broadcast_request_change(released, "released")
    return released


def release_expired_claims(now: datetime | None = None) -> int:
    """Sweep: claims whose lease ran out go back to the queue. Running it twice changes nothing the second time."""
    now = now or clock.now()
    released = 0
    overdue = ElicitationRequest.objects.filter(status=Status.CLAIMED, lease_expires_at__lte=now)
    for request_id in overdue.values_list("pk", flat=True)[:1000]:
        with transaction.atomic():
            try:
                previous, request = _transition(
                    request_id,
                    allowed=Q(status=Status.CLAIMED, lease_expires_at__lte=now),
                    changes={
                        "status": Status.PENDING,
                        "claimed_by": None,
                        "claimed_at": None,
                        "lease_expires_at": None,
                    },
                    what="release an expired lease",
                )
            except InvalidTransition:
                continue  # renewed or answered since we looked
            record_transition(
                request,
                "lease_expired",
                previous=previous,
            )
            events.broadcast_request_change(request, "released")
            released += 1
    return released


# --- reviewers: drafts and answers ---------------------------------------------------------------------------------


def _question(request: ElicitationRequest, question_id: str) -> schemas.Question:
    for question in schemas.questions_from_json(request.questions):
        if question.id == question_id:
            return question
    raise InvalidInput(
        "No such question.", {"question": f"{question_id!r} is not a question of this request"}
    )


def save_draft(
    request_id: UUID, *, user: Any, question_id: str, value: Any, state: str = DraftState.DRAFT
) -> Draft:
    """Save one question's shared draft. Only the claim holder writes; submitted answers must be valid."""
    request = _reload(request_id)
    question = _question(request, question_id)
    if state == DraftState.SKIPPED:
        value = None
    elif state == DraftState.SUBMITTED:
        try:
            value = schemas.validate_answer(question, value)
        except schemas.AnswerInvalid as exc:
            raise InvalidInput("The answer is not valid.", exc.errors) from None
    with transaction.atomic():
        locked = ElicitationRequest.objects.select_for_update().filter(pk=request_id).first()
        if locked is None or locked.status != Status.CLAIMED or locked.claimed_by_id != user.pk:
            raise InvalidTransition(
                "Only the reviewer holding the claim can edit answers.",
                current_status=locked.status if locked else None,
            )
        draft, _ = Draft.objects.update_or_create(
            request_id=request_id,
            question_id=question_id,
            defaults={"value": value, "state": state, "updated_by": user},
        )
        events.broadcast_draft_change(request_id, draft_payload(draft, user))
    return draft


def draft_payload(draft: Draft, user: Any) -> dict[str, Any]:
    return {
        "question": draft.question_id,
        "value": draft.value,
        "state": draft.state,
        "updated_by": user.get_username() if user else None,
        "updated_at": draft.updated_at.isoformat(),
    }


def content_from_drafts(request: ElicitationRequest) -> dict[str, Any]:
    return {
        draft.question_id: draft.value
        for draft in request.drafts.all()
        if draft.state == DraftState.SUBMITTED and draft.value is not None
    }


def respond(
    request_id: UUID,
    *,
    user: Any,
    action: str,
    content: dict[str, Any] | None = None,
    loaded: ElicitationRequest | None = None,
) -> ElicitationRequest:
    """Complete a claimed request. Accept validates the content (or the submitted drafts); decline/cancel carry none.

    `loaded` is the request as the caller just read it, for the checks made before the row is locked (the
    guarded UPDATE re-checks them)."""
    # Past its deadline the request has expired, whether or not the sweep has run: the agent gets one outcome.
    request = expire_if_overdue(loaded if loaded is not None else _reload(request_id))
    if request.status != Status.CLAIMED or request.claimed_by_id != user.pk:
        raise InvalidTransition(
            "Only the reviewer holding the claim can answer it.", current_status=request.status
        )
    if action not in Action.values:
        raise InvalidInput("Unknown action.", {"action": "must be accept, decline or cancel"})
    if action == Action.ACCEPT and request.mode == Mode.URL:
        from elicitation import flows  # imported late: flows imports services

        flows.refuse_direct_accept(request)  # hosted flows are accepted only by submitting their page
    clean: dict[str, Any] | None = None
    if action == Action.ACCEPT and request.mode == Mode.FORM:
        if hasattr(request, "hosted_flow"):
            raise InvalidInput(
                "A hosted flow is answered on its own page.", {"action": "use the hosted flow page"}
            )
        submitted = content if content is not None else content_from_drafts(request)
        try:
            clean = schemas.validate_content(schemas.questions_from_json(request.questions), submitted)
        except schemas.AnswerInvalid as exc:
            raise InvalidInput("The answers are not valid.", content_error_fields(exc.errors)) from None
    elif content:
        raise InvalidInput(
            "Content is only sent with accept.", {"content": "only allowed with action accept on a form"}
        )
    return _complete(request_id, user=user, action=action, content=clean)


def content_error_fields(errors: dict[str, str]) -> dict[str, str]:
    """Answer errors keyed as API fields: `content.<question>`, or `content` for the whole object."""
    return {
        "content" + ("" if key == "$" else "." + key.removeprefix("$.")): reason
        for key, reason in errors.items()
    }


def _complete(
    request_id: UUID, *, user: Any, action: str, content: dict[str, Any] | None
) -> ElicitationRequest:
    now = clock.now()
    with transaction.atomic():
        previous, completed = _transition(
            request_id,
            allowed=Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now),
            changes={
                "status": Status.COMPLETED,
                "claimed_by": None,
                "lease_expires_at": None,
                "action": action,
                "content": content,
                "answered_by": user,
                "closed_at": now,
            },
            what="answer",
        )
        record_transition(
            completed,
            "completed",
            actor_user=user,
            previous=previous,
            detail={"action": action},
        )
        emit_agent_event(completed, "completed")
        events.broadcast_request_change(completed, "completed")
    return completed


def record_view(request: ElicitationRequest, *, user: Any) -> None:
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=request.pk).first()
        record_event(request, "viewed", actor_user=user, from_status=request.status, to_status=request.status)


# --- deadlines -----------------------------------------------------------------------------------------------------


def expire_request(
    request_id: UUID, *, now: datetime | None = None, actor_user: Any = None
) -> ElicitationRequest:
    """Apply the queue's expiry outcome: answer cancel/decline for the reviewer, or escalate to another queue."""
    now = now or clock.now()
    request = _reload(request_id)
    queue = request.queue
    # Pinned to the queue we read: of two racing expiries (sweep and admin), only one escalates.
    due = Q(status__in=OPEN_STATUSES, queue=queue) & (Q(deadline__lte=now) if actor_user is None else Q())
    cleared = {"claimed_by": None, "claimed_at": None, "lease_expires_at": None}
    with transaction.atomic():
        target = _escalation_target(request)
        if target is not None:
            previous, moved = _transition(
                request_id,
                allowed=due,
                changes={
                    **cleared,
                    "status": Status.PENDING,
                    "queue": target,
                    "deadline": now + timedelta(seconds=target.default_deadline_seconds),
                },
                what="escalate",
            )
            record_transition(
                moved,
                "escalated",
                actor_user=actor_user,
                previous=previous,
                detail={"from_queue": queue.slug, "to_queue": target.slug},
            )
            # The old queue's pages drop it; the new queue's pages gain it.
            events.send_on_commit(
                events.queue_group(queue.pk),
                {
                    "type": "queue.update",
                    "kind": "escalated",
                    "request": {**events.request_summary(moved), "status": "escalated", "queue": queue.pk},
                },
            )
            events.broadcast_request_change(moved, "created")
            return moved
        action = Action.DECLINE if queue.expiry_outcome == ExpiryOutcome.DECLINE else Action.CANCEL
        previous, expired = _transition(
            request_id,
            allowed=due,
            changes={**cleared, "status": Status.EXPIRED, "action": action, "closed_at": now},
            what="expire",
        )
        record_transition(
            expired,
            "expired",
            actor_user=actor_user,
            previous=previous,
            detail={"action": action},
        )
        emit_agent_event(expired, "expired")
        events.broadcast_request_change(expired, "expired")
    return expired


def _escalation_target(request: ElicitationRequest) -> Queue | None:
    """The queue to escalate to, or None for a final outcome. A request never re-enters a queue it has been in,
    so a cycle of escalating queues (a→b→a) still ends with an answer to the agent (cancel)."""
    queue = request.queue
    if queue.expiry_outcome != ExpiryOutcome.ESCALATE or queue.escalation_queue is None:
        return None
    hops = RequestEvent.objects.filter(request_id=request.pk, kind="escalated").order_by("id")
    visited = {queue.slug}
    for detail in hops.values_list("detail", flat=True):
        visited.update({detail.get("from_queue"), detail.get("to_queue")})
    return None if queue.escalation_queue.slug in visited else queue.escalation_queue


def expire_overdue_requests(now: datetime | None = None) -> int:
    """Sweep: every open request past its deadline gets its queue's outcome. Idempotent."""
    now = now or clock.now()
    done = 0
    overdue = ElicitationRequest.objects.filter(status__in=OPEN_STATUSES, deadline__lte=now)
    for request_id in overdue.values_list("pk", flat=True)[:1000]:
        try:
            expire_request(request_id, now=now)
        except InvalidTransition:
            continue  # answered or withdrawn since we looked
        done += 1
    return done


def expire_if_overdue(request: ElicitationRequest) -> ElicitationRequest:
    """Reads never report an overdue request as still open, even between sweeps."""
    if request.status in OPEN_STATUSES and request.deadline <= clock.now():
        try:
            return expire_request(request.pk)
        except InvalidTransition:
            return _reload(request.pk)
    return request


# --- keys ----------------------------------------------------------------------------------------------------------


def create_agent(name: str, *, queue_slugs: list[str], scopes: list[str] | None = None) -> tuple[Agent, str]:
    """Create an agent and return its full key, which is never stored or shown again."""
    key = issue_key("rh")
    with transaction.atomic():
        agent = Agent.objects.create(
            name=name, key_prefix=key.prefix, key_hash=key.hash, scopes=scopes or ["requests"]
        )
        agent.queues.set(ensure_queues(queue_slugs))
    return agent, key.full


def rotate_agent_key(agent: Agent) -> str:
    key: IssuedKey = issue_key("rh")
    Agent.objects.filter(pk=agent.pk).update(key_prefix=key.prefix, key_hash=key.hash)
    agent.key_prefix, agent.key_hash = key.prefix, key.hash
    transaction.on_commit(
        lambda: events.send_to_group(events.agent_group(agent.pk), {"type": "agent.revoked"})
    )
    return key.full


def revoke_agent(agent: Agent) -> None:
    """Revocation is immediate: the next request is refused and open sockets are closed."""
    now = clock.now()
    Agent.objects.filter(pk=agent.pk, revoked_at__isnull=True).update(revoked_at=now)
    agent.revoked_at = agent.revoked_at or now
    transaction.on_commit(
        lambda: events.send_to_group(events.agent_group(agent.pk), {"type": "agent.revoked"})
    )


def create_reviewer_token(user: Any, name: str = "") -> str:
    key = issue_key("rhr")
    ReviewerToken.objects.create(user=user, name=name, key_prefix=key.prefix, key_hash=key.hash)
    return key.full


def revoke_reviewer_token(token: ReviewerToken) -> None:
    """Immediate: the token's next request is refused."""
    now = clock.now()
    ReviewerToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
    token.revoked_at = token.revoked_at or now


def ensure_queues(slugs: list[str]) -> list[Queue]:
    queues = []
    for slug in slugs:
        queue, _ = Queue.objects.get_or_create(
            slug=slug,
            defaults={
                "name": slug.replace("-", " ").title(),
                "default_deadline_seconds": settings.DEFAULT_DEADLINE_SECONDS,
                "lease_seconds": settings.DEFAULT_LEASE_SECONDS,
            },
        )
        queues.append(queue)
    return queues


def check_reviewer_access(request: ElicitationRequest, user: Any) -> None:
    from elicitation import selectors

    if not selectors.can_review(user, request.queue):
        raise PermissionDenied("You are not a reviewer of this queue.")
