"""Every state change of a request, each through the one path `_apply`: lock the row, guarded UPDATE whose row count
says who won, audit row, outbox row where the agent must hear of it, and a signal whose listeners push only after
commit. A loser gets InvalidTransition (409), never a half-written row.

```
pending ──claim──▶ claimed ──respond(accept|decline|cancel)──▶ completed
   ▲                 │
   └──release/lease──┘
pending|claimed ──deadline──▶ expired (or escalated to another queue)
pending|claimed ──agent cancels──▶ withdrawn
```
"""

import functools
import hashlib
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q, Subquery
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from elicitation.models import (
    OPEN_STATUSES,
    Action,
    Agent,
    Approval,
    Channel,
    Draft,
    DraftState,
    ElicitationRequest,
    ExpiryOutcome,
    FlowStatus,
    Mode,
    Queue,
    QueuePolicy,
    ReachRule,
    RequestEvent,
    Status,
)
from elicitation.queue import (
    answer_defaults,
    clock,
    outbox,
    prebuilt_sql,
    quorum,
    rules,
    schemas,
    selectors,
    signals,
)
from elicitation.queue.audit import canonical_json, new_event, record_event, record_transition
from elicitation.queue.errors import (
    AccessDenied,
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    NotFoundError,
)


def schema_limits() -> schemas.SchemaLimits:
    return schemas.SchemaLimits(
        max_properties=settings.MAX_SCHEMA_PROPERTIES, max_options=settings.MAX_SCHEMA_OPTIONS
    )


# --- the one path ----------------------------------------------------------------------------------------------


_WITH_RELATED = ("queue", "agent", "claimed_by")


def _reload(request_id: UUID) -> ElicitationRequest:
    """The request with its queue, agent and holder (`select_related`), its SQL built once per process: every
    reviewer action reads it, and the ORM spent longer building the query than the database running it."""
    found = prebuilt_sql.get_with_related(ElicitationRequest, request_id, _WITH_RELATED)
    if found is None:
        raise ElicitationRequest.DoesNotExist("No such request.")
    return found[0]


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
        _WITH_RELATED,
        extra_columns=(_audit_head_sql(connection.vendor),),
        lock=True,
    )
    if found is None:
        return None
    request, (audit_head,) = found
    request.audit_head = audit_head
    return request


def _guarded_update(
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


def _announce(
    request: ElicitationRequest,
    kind: str,
    *,
    previous: str,
    actor_user: Any = None,
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


def _apply(
    request_id: UUID,
    *,
    allowed: Q,
    changes: dict[str, Any],
    what: str,
    kind: str,
    actor_user: Any = None,
    actor_agent: Agent | None = None,
    detail: dict[str, Any] | None = None,
    tell_agent: str | None = None,
    page_kind: str | None = None,
) -> ElicitationRequest:
    """One transition in its own transaction (a savepoint when the caller has one open)."""
    with transaction.atomic():
        previous, request = _guarded_update(request_id, allowed=allowed, changes=changes, what=what)
        _announce(
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


# --- agents: create, withdraw, URL-flow completion ----------------------------------------------------------------


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


def _ref(table: str, column: str | None) -> str:
    quote = connection.ops.quote_name
    return f"{quote(table)}.{quote(str(column))}"


@functools.cache
def _queue_columns_sql(vendor: str) -> str:
    """A queue's columns, its policy's (NULLs when it has none), and whether an arrival there reaches anyone beyond
    the browser (reach rules of tier 0; one %s, the browser channel); built from the models' metadata, so a column
    another module adds is read too. The FROM clause must join the queue and LEFT JOIN its policy."""
    queue, policy, reach = Queue._meta, QueuePolicy._meta, ReachRule._meta
    columns = [_ref(queue.db_table, f.column) for f in queue.concrete_fields]
    columns += [_ref(policy.db_table, f.column) for f in policy.concrete_fields]
    queue_pk = _ref(queue.db_table, queue.pk.column)  # type: ignore[union-attr]
    quote = connection.ops.quote_name
    columns.append(
        f"EXISTS (SELECT 1 FROM {quote(reach.db_table)} "  # noqa: S608 - model metadata only
        f"WHERE {_ref(reach.db_table, reach.get_field('queue').column)} = {queue_pk} "
        f"AND {_ref(reach.db_table, reach.get_field('tier').column)} = 0 "
        f"AND {_ref(reach.db_table, reach.get_field('channel').column)} <> %s)"
    )
    return ", ".join(columns)


def _policy_join_sql() -> str:
    quote = connection.ops.quote_name
    queue, policy = Queue._meta, QueuePolicy._meta
    queue_pk = _ref(queue.db_table, queue.pk.column)  # type: ignore[union-attr]
    return (
        f"LEFT OUTER JOIN {quote(policy.db_table)} "
        f"ON {_ref(policy.db_table, policy.get_field('queue').column)} = {queue_pk}"
    )


@functools.cache
def _postable_queue_sql(vendor: str) -> str:
    """SELECT a queue (by slug, among an agent's) with `_queue_columns_sql`."""
    quote = connection.ops.quote_name
    queue = Queue._meta
    m2m = Agent._meta.get_field("queues")
    through = m2m.remote_field.through._meta.db_table  # type: ignore[union-attr]
    queue_pk = _ref(queue.db_table, queue.pk.column)  # type: ignore[union-attr]
    return (
        f"SELECT {_queue_columns_sql(vendor)} FROM {quote(queue.db_table)} "  # noqa: S608 - model metadata only
        f"INNER JOIN {quote(through)} ON {_ref(through, m2m.m2m_reverse_name())} = {queue_pk} "  # type: ignore[attr-defined]
        f"{_policy_join_sql()} "
        f"WHERE {_ref(through, m2m.m2m_column_name())} = %s "  # type: ignore[attr-defined]
        f"AND {_ref(queue.db_table, queue.get_field('slug').column)} = %s"
    )


@functools.cache
def _agent_with_postable_queue_sql(vendor: str) -> str:
    """SELECT the agent with a key prefix, and in the same row the queue `slug` if the agent may post to it (its
    columns NULL otherwise), with `_queue_columns_sql`."""
    quote = connection.ops.quote_name
    agent, queue = Agent._meta, Queue._meta
    m2m = Agent._meta.get_field("queues")
    through = m2m.remote_field.through._meta.db_table  # type: ignore[union-attr]
    through_agent = _ref(through, m2m.m2m_column_name())  # type: ignore[attr-defined]
    through_queue = _ref(through, m2m.m2m_reverse_name())  # type: ignore[attr-defined]
    agent_columns = ", ".join(_ref(agent.db_table, f.column) for f in agent.concrete_fields)
    agent_pk = _ref(agent.db_table, str(agent.pk.column))  # type: ignore[union-attr]
    queue_pk = _ref(queue.db_table, str(queue.pk.column))  # type: ignore[union-attr]
    queue_slug = _ref(queue.db_table, queue.get_field("slug").column)  # type: ignore[union-attr]
    return (
        f"SELECT {agent_columns}, {_queue_columns_sql(vendor)} "  # noqa: S608 - model metadata only
        f"FROM {quote(agent.db_table)} "
        f"LEFT OUTER JOIN {quote(through)} ON {through_agent} = {agent_pk} "
        f"AND {through_queue} IN (SELECT {queue_pk} FROM {quote(queue.db_table)} WHERE {queue_slug} = %s) "
        f"LEFT OUTER JOIN {quote(queue.db_table)} ON {queue_pk} = {through_queue} "
        f"{_policy_join_sql()} "
        f"WHERE {_ref(agent.db_table, agent.get_field('key_prefix').column)} = %s"  # type: ignore[union-attr]
    )


def postable_queue(agent_id: int, slug: str) -> Queue | None:
    """The queue `slug` if the agent may post to it, with its policy loaded (`queue.policy`, None-safe through
    `rules.queue_policy`): what `agent.queues.filter(slug=…).select_related("policy").first()` returns. Every
    create reads it, and the ORM spent several times longer building that query than the database running it,
    so its SQL is built once per process. `queue.arrival_reach` says whether an arrival is news for a reach rule
    (delivery/reach_receivers.py), which every create would otherwise ask in a query of its own."""
    with connection.cursor() as cursor:
        cursor.execute(_postable_queue_sql(connection.vendor), [Channel.BROWSER.value, agent_id, slug])
        row = cursor.fetchone()
    return None if row is None else _queue_from_row(row)


def agent_with_postable_queue(key_prefix: str, slug: str) -> tuple[Agent | None, Queue | None]:
    """The agent with this key prefix (unchecked: see keys.agent_and_queue_for_key), and what
    `postable_queue(agent, slug)` would return for it, in one round trip."""
    with connection.cursor() as cursor:
        cursor.execute(
            _agent_with_postable_queue_sql(connection.vendor), [Channel.BROWSER.value, slug, key_prefix]
        )
        row = cursor.fetchone()
    if row is None:
        return None, None
    split = len(Agent._meta.concrete_fields)
    agent: Agent = prebuilt_sql.instance_from_row(Agent, row[:split])
    queue_pk = row[split + Queue._meta.concrete_fields.index(Queue._meta.pk)]
    return agent, None if queue_pk is None else _queue_from_row(row[split:])


def _queue_from_row(row: Any) -> Queue:
    """The queue, its policy (or None) and `arrival_reach` from a row of `_queue_columns_sql`."""
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


def withdraw_request(request_id: UUID, *, agent: Agent) -> ElicitationRequest:
    """The agent's turn ended: the open request is abandoned and vanishes from reviewers' pages."""
    return _apply(
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
        request = _reload(target.pk)
        record_event(request, "url_flow_completed", actor_agent=agent)
        signals.request_changed.send(sender=ElicitationRequest, request=request, kind="url_flow_completed")
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


RELEASED = {"status": Status.PENDING, "claimed_by": None, "claimed_at": None, "lease_expires_at": None}


def _claimable(now: datetime) -> Q:
    # A claim whose lease ran out is as good as pending even before the sweep returns it.
    return Q(deadline__gt=now) & (
        Q(status=Status.PENDING) | Q(status=Status.CLAIMED, lease_expires_at__lte=now)
    )


def claim_request(request_id: UUID, *, user: Any) -> ElicitationRequest:
    now = clock.now()
    request = _reload(request_id)
    return _apply(
        request_id,
        allowed=_claimable(now) | Q(status=Status.CLAIMED, claimed_by=user),
        changes=_claim_changes(user, request.queue, now),
        what="claim",
        kind="claimed",
        actor_user=user,
    )


def claim_next(queue: Queue, *, user: Any, attempts: int = 20) -> ElicitationRequest | None:
    """Claim the queue's most urgent pending request: priority first, then age. None when the queue is empty."""
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
            claimed = lock_request(candidate)  # already ours: the UPDATE holds the row until commit
            assert claimed is not None
            _announce(claimed, "claimed", previous=Status.PENDING, actor_user=user)
            return claimed
    raise InvalidTransition("The queue is too contended right now; try again.")


def take_over_claim(request_id: UUID, *, supervisor: Any) -> ElicitationRequest:
    now = clock.now()
    request = _reload(request_id)
    previous_holder = request.claimed_by.get_username() if request.claimed_by else None
    return _apply(
        request_id,
        allowed=Q(status__in=OPEN_STATUSES, deadline__gt=now),
        changes=_claim_changes(supervisor, request.queue, now),
        what="take over",
        kind="taken_over",
        page_kind="claimed",
        actor_user=supervisor,
        detail={"previous_holder": previous_holder},
    )


def renew_claim(request_id: UUID, *, user: Any) -> ElicitationRequest:
    """Heartbeat: extend the lease, only while this reviewer still holds the claim. Not audited: nothing changed
    hands."""
    now = clock.now()
    request = _reload(request_id)
    with transaction.atomic():
        _, renewed = _guarded_update(
            request_id,
            allowed=Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now),
            changes={"lease_expires_at": now + timedelta(seconds=request.queue.lease_seconds)},
            what="renew the claim",
        )
    return renewed


def release_claim(request_id: UUID, *, user: Any) -> ElicitationRequest:
    return _apply(
        request_id,
        allowed=Q(status=Status.CLAIMED, claimed_by=user),
        changes=RELEASED,
        what="release",
        kind="released",
        actor_user=user,
    )


def release_claim_as_operator(request_id: UUID, *, operator: Any) -> ElicitationRequest:
    """An operator (the admin's release action) returns a claim to the queue; the audit names operator and holder."""
    holder = _reload(request_id).claimed_by
    return _apply(
        request_id,
        # Pinned to the holder we read: if the claim changed hands meanwhile, the operator must look again.
        allowed=Q(status=Status.CLAIMED, claimed_by=holder),
        changes=RELEASED,
        what="release",
        kind="released",
        actor_user=operator,
        detail={"holder": holder.get_username() if holder else None, "by": "operator"},
    )


def release_expired_claims(now: datetime | None = None) -> int:
    """Sweep: claims whose lease ran out go back to the queue. Running it twice changes nothing the second time."""
    now = now or clock.now()
    released = 0
    overdue = ElicitationRequest.objects.filter(status=Status.CLAIMED, lease_expires_at__lte=now)
    for request_id in overdue.values_list("pk", flat=True)[:1000]:
        try:
            _apply(
                request_id,
                allowed=Q(status=Status.CLAIMED, lease_expires_at__lte=now),
                changes=RELEASED,
                what="release an expired lease",
                kind="lease_expired",
                page_kind="released",
            )
        except InvalidTransition:
            continue  # renewed or answered since we looked
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
        signals.draft_changed.send(sender=Draft, request_id=request_id, draft=draft_payload(draft, user))
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


def forwards_open_hosted_flow(request: ElicitationRequest) -> bool:
    """A URL-mode request whose URL is the page of an open hosted flow of the same agent (its own, or one an MCP
    client forwarded)."""
    return (
        request.mode == Mode.URL
        and ElicitationRequest.objects.filter(
            agent_id=request.agent_id, url=request.url, hosted_flow__status=FlowStatus.OPEN
        ).exists()
    )


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
    if quorum.requirement(request) is not None:
        return respond_in_quorum(request, user=user, action=action, content=content)
    if request.status != Status.CLAIMED or request.claimed_by_id != user.pk:
        raise InvalidTransition(
            "Only the reviewer holding the claim can answer it.", current_status=request.status
        )
    if action not in Action.values:
        raise InvalidInput("Unknown action.", {"action": "must be accept, decline or cancel"})
    if action == Action.ACCEPT and forwards_open_hosted_flow(request):
        # `accept` without the secret would tell the MCP client a flow finished that never did.
        raise InvalidInput(
            "A hosted flow is accepted by submitting it on its own page.",
            {"action": "open the flow page to submit it, or decline"},
        )
    clean: dict[str, Any] | None = None
    if action == Action.ACCEPT and request.mode == Mode.FORM:
        if hasattr(request, "hosted_flow"):
            raise InvalidInput(
                "A hosted flow is answered on its own page.", {"action": "use the hosted flow page"}
            )
        submitted = content if content is not None else content_from_drafts(request)
        questions = schemas.questions_from_json(request.questions)
        submitted = answer_defaults.fill_defaults(questions, submitted, answer_defaults.skipped_ids(request))
        try:
            clean = schemas.validate_content(questions, submitted)
        except schemas.AnswerInvalid as exc:
            raise InvalidInput("The answers are not valid.", content_error_fields(exc.errors)) from None
    elif content:
        raise InvalidInput(
            "Content is only sent with accept.", {"content": "only allowed with action accept on a form"}
        )
    now = clock.now()
    return _apply(
        request_id,
        allowed=Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now),
        changes=completion_changes(user, action, clean, now),
        what="answer",
        kind="completed",
        actor_user=user,
        detail={"action": action},
        tell_agent="completed",
    )


def completion_changes(
    user: Any, action: str, content: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    return {
        "status": Status.COMPLETED,
        "claimed_by": None,
        "lease_expires_at": None,
        "action": action,
        "content": content,
        "answered_by": user,
        "closed_at": now,
    }


def complete_url_request(
    request_id: UUID, *, user: Any, action: str, allowed: Q, detail: dict[str, Any]
) -> ElicitationRequest:
    """Close a URL-mode request that a hosted flow answered (accept carries no content: the secret stays in
    the flow). The caller holds the transaction in which the flow itself changes."""
    now = clock.now()
    return _apply(
        request_id,
        allowed=allowed,
        changes={**completion_changes(user, action, None, now), "url_flow_completed_at": now},
        what="complete the flow",
        kind="completed",
        actor_user=user,
        detail={"action": action, **detail},
        tell_agent="completed",
    )


def content_error_fields(errors: dict[str, str]) -> dict[str, str]:
    """Answer errors keyed as API fields: `content.<question>`, or `content` for the whole object."""
    return {
        "content" + ("" if key == "$" else "." + key.removeprefix("$.")): reason
        for key, reason in errors.items()
    }


# --- decision policies: answer rules at intake, quorum on answers (queue/rules.py, queue/quorum.py) ------------------


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
    return _apply(
        request.pk,
        allowed=Q(status=Status.PENDING),
        changes={**completion_changes(None, action, content, now), "result_meta": meta},
        what="decide by rule",
        kind="completed",
        detail=detail,
        tell_agent="completed",
    )


def respond_in_quorum(
    request: ElicitationRequest, *, user: Any, action: str, content: dict[str, Any] | None
) -> ElicitationRequest:
    """An answer to a request that needs a quorum: the first approval proposes the content, later ones approve
    it as it stands; a decline or cancel vetoes (unless the policy says none). The agent hears only the final
    outcome. Refusals (approving twice, an excluded owner, a group already full) are audited, then raised."""
    if action not in Action.values:
        raise InvalidInput("Unknown action.", {"action": "must be accept, decline or cancel"})
    refusal: tuple[str, str] | None = None
    with transaction.atomic():
        locked = lock_request(request.pk)
        if locked is None:
            raise NotFoundError("No such request.")
        now = clock.now()
        free = locked.status == Status.PENDING or (
            locked.status == Status.CLAIMED
            and (locked.claimed_by_id == user.pk or (locked.lease_expires_at or now) <= now)
        )
        if not free or locked.deadline <= now:
            raise InvalidTransition(
                f"Cannot answer: the request is {locked.status}"
                + (f" and held by {locked.claimed_by.get_username()}." if locked.claimed_by else "."),
                current_status=locked.status,
            )
        state = dict(locked.policy or {})
        requirement = state.get("quorum") or {}
        is_owner = locked.agent.owners.filter(pk=user.pk).exists()
        open_now = Q(pk=locked.pk, status__in=OPEN_STATUSES, deadline__gt=now)
        if action == Action.ACCEPT:
            recorded = list(Approval.objects.filter(request=locked).values_list("reviewer_id", "group"))
            groups = set(user.groups.values_list("name", flat=True))
            verdict = quorum.judge_approval(
                requirement, recorded, user_id=user.pk, user_groups=groups, is_owner=is_owner
            )
        else:
            verdict = quorum.judge_veto(requirement, is_owner=is_owner)
        if not verdict.allowed:
            record_event(
                locked,
                verdict.audit_kind,
                actor_user=user,
                from_status=locked.status,
                to_status=locked.status,
                detail={"action": action, "reason": verdict.reason},
                prev_hash=locked.audit_head,
            )
            refusal = (verdict.audit_kind, verdict.reason)
        elif action == Action.ACCEPT:
            proposed = quorum.proposal(state)
            clean = _quorum_content(locked, content, proposed)
            Approval.objects.create(request=locked, reviewer=user, group=verdict.group, at=now)
            state = quorum.with_approval(
                state, username=user.get_username(), group=verdict.group, at=now, proposal=clean
            )
            progress = quorum.progress(state) or {}
            detail = {"action": action, "group": verdict.group, "progress": progress.get("text")}
            if verdict.final:
                changes = {
                    **completion_changes(
                        user, Action.ACCEPT, clean if locked.mode == Mode.FORM else None, now
                    ),
                    "policy": state,
                    "result_meta": quorum.result_meta(state),
                }
                previous, done = _guarded_update(locked.pk, allowed=open_now, changes=changes, what="answer")
                _announce(
                    done,
                    "approved",
                    previous=previous,
                    actor_user=user,
                    detail=detail,
                    tell_agent="completed",
                    page_kind="completed",
                )
                return done
            changes = {**RELEASED, "policy": state}
            previous, moved = _guarded_update(locked.pk, allowed=open_now, changes=changes, what="approve")
            _announce(
                moved, "approved", previous=previous, actor_user=user, detail=detail, page_kind="approved"
            )
            return moved
        elif verdict.final:
            changes = {
                **completion_changes(user, action, None, now),
                "result_meta": quorum.result_meta(state, vetoed_by=user.get_username()),
            }
            previous, done = _guarded_update(locked.pk, allowed=open_now, changes=changes, what="answer")
            _announce(
                done,
                "vetoed",
                previous=previous,
                actor_user=user,
                detail={"action": action},
                tell_agent="completed",
                page_kind="completed",
            )
            return done
        else:
            state = quorum.with_objection(state, username=user.get_username(), action=action, at=now)
            previous, moved = _guarded_update(
                locked.pk, allowed=open_now, changes={**RELEASED, "policy": state}, what="object"
            )
            _announce(
                moved,
                "objected",
                previous=previous,
                actor_user=user,
                detail={"action": action},
                page_kind="approved",
            )
            return moved
    kind, reason = refusal
    if kind == "approval_excluded":
        raise AccessDenied(f"You may not decide this request: {reason}.")
    raise InvalidTransition(f"Your approval was not counted: {reason}.", current_status=request.status)


def _quorum_content(
    request: ElicitationRequest, content: dict[str, Any] | None, proposed: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The first approver's content, validated; later approvers approve the proposal exactly as it stands."""
    if request.mode != Mode.FORM:
        if content:
            raise InvalidInput("Content is only sent on a form.", {"content": "only allowed on a form"})
        return None
    if proposed is not None:
        if content is not None and content != proposed:
            raise InvalidInput(
                "Approve the proposed answer as it stands, or decline.",
                {"content": "differs from the proposed answer; send none to approve it"},
            )
        return proposed
    submitted = content if content is not None else content_from_drafts(request)
    questions = schemas.questions_from_json(request.questions)
    submitted = answer_defaults.fill_defaults(questions, submitted, answer_defaults.skipped_ids(request))
    try:
        return schemas.validate_content(questions, submitted)
    except schemas.AnswerInvalid as exc:
        raise InvalidInput("The answers are not valid.", content_error_fields(exc.errors)) from None


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
            previous, moved = _guarded_update(
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
            _announce(
                moved,
                "escalated",
                previous=previous,
                actor_user=actor_user,
                detail={"from_queue": queue.slug, "to_queue": target.slug},
                left_queue_id=queue.pk,
            )
            return moved
        action = Action.DECLINE if queue.expiry_outcome == ExpiryOutcome.DECLINE else Action.CANCEL
        return _apply(
            request_id,
            allowed=due,
            changes={**cleared, "status": Status.EXPIRED, "action": action, "closed_at": now},
            what="expire",
            kind="expired",
            actor_user=actor_user,
            detail={"action": action},
            tell_agent="expired",
        )


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
    """Before a write acts on a request: one past its deadline is expired first, sweep or no sweep. Reads never
    call this; they show such a request as overdue until the sweeper closes it."""
    if request.status in OPEN_STATUSES and request.deadline <= clock.now():
        try:
            return expire_request(request.pk)
        except InvalidTransition:
            return _reload(request.pk)
    return request


# --- the escalation chain (reach) ------------------------------------------------------------------------------
#
# Per queue (models.EscalationPolicy): not claimed within T1 → tell tier 1 (`notify_next_tier`); not answered by
# T2 → move to the escalation queue or assign to a supervisor (`reassign_unanswered`); at the deadline the queue's
# expiry outcome (`expire_request`, which may itself escalate) is the last step. Times count from the request's
# arrival in its current queue, so a request moved to another queue starts that queue's chain afresh. Each step is
# an audit row written under the request's row lock after checking that the step has not been taken since the
# arrival: two sweepers racing on one request take it once.

TIER_NOTIFIED = "tier_notified"
REASSIGNED = "reassigned_to_supervisor"
ARRIVAL_KINDS = ("created", "escalated")


def _since_arrival(request_id: UUID) -> list[RequestEvent]:
    """The request's audit rows since it arrived in its current queue (that arrival row first)."""
    events = list(RequestEvent.objects.filter(request_id=request_id).order_by("-id")[:200])
    since: list[RequestEvent] = []
    for event in events:
        since.append(event)
        if event.kind in ARRIVAL_KINDS:
            break
    return list(reversed(since))


def _step_due(
    request: ElicitationRequest, seconds: int | None, now: datetime, step_kinds: tuple[str, ...]
) -> bool:
    if seconds is None:
        return False
    history = _since_arrival(request.pk)
    arrived = history[0].at if history else request.created_at
    if now < arrived + timedelta(seconds=seconds):
        return False
    return not any(event.kind in step_kinds for event in history[1:])


def notify_next_tier(request_id: UUID, *, now: datetime | None = None) -> bool:
    """Step 1: a request still unclaimed T1 after its arrival is announced to the queue's tier 1. Returns whether
    this call took the step (False: not due, already taken, claimed or closed)."""
    now = now or clock.now()
    with transaction.atomic():
        request = lock_request(request_id)
        if request is None or request.status != Status.PENDING:
            return False
        policy = getattr(request.queue, "escalation_policy", None)
        if policy is None or not _step_due(request, policy.unclaimed_after_seconds, now, (TIER_NOTIFIED,)):
            return False
        record_event(
            request,
            TIER_NOTIFIED,
            from_status=request.status,
            to_status=request.status,
            detail={"step": 1, "queue": request.queue.slug, "after_seconds": policy.unclaimed_after_seconds},
            prev_hash=request.audit_head,
        )
        signals.escalation_step_taken.send(sender=ElicitationRequest, request=request, step=1)
    return True


def reassign_unanswered(request_id: UUID, *, now: datetime | None = None) -> bool:
    """Step 2: a request still open T2 after its arrival moves to the queue's escalation queue (keeping the
    agent's deadline) or is assigned to the queue's first active supervisor (a claim lasting until the
    deadline). Returns whether this call took the step."""
    now = now or clock.now()
    with transaction.atomic():
        request = lock_request(request_id)
        if request is None or request.status not in OPEN_STATUSES or request.deadline <= now:
            return False
        queue = request.queue
        policy = getattr(queue, "escalation_policy", None)
        if policy is None or not _step_due(request, policy.unanswered_after_seconds, now, (REASSIGNED,)):
            return False
        if policy.unanswered_goes_to == "supervisor":
            supervisor = queue.supervisors.filter(is_active=True).order_by("pk").first()
            if supervisor is None or request.claimed_by_id == supervisor.pk:
                return False
            previous, moved = _guarded_update(
                request_id,
                allowed=Q(status__in=OPEN_STATUSES, queue=queue),
                changes={
                    "status": Status.CLAIMED,
                    "claimed_by": supervisor,
                    "claimed_at": now,
                    "lease_expires_at": request.deadline,
                    "first_claimed_at": Coalesce(F("first_claimed_at"), now),
                },
                what="assign to a supervisor",
            )
            _announce(
                moved,
                REASSIGNED,
                previous=previous,
                detail={"step": 2, "queue": queue.slug, "supervisor": supervisor.get_username()},
                page_kind="claimed",
            )
            return True
        target = _escalation_target_of(request, queue.escalation_queue)
        if target is None:
            return False
        previous, moved = _guarded_update(
            request_id,
            allowed=Q(status__in=OPEN_STATUSES, queue=queue),
            changes={
                "status": Status.PENDING,
                "queue": target,
                "claimed_by": None,
                "claimed_at": None,
                "lease_expires_at": None,
            },
            what="escalate",
        )
        _announce(
            moved,
            "escalated",
            previous=previous,
            detail={"from_queue": queue.slug, "to_queue": target.slug, "step": 2, "reason": "unanswered"},
            left_queue_id=queue.pk,
        )
    return True


def _escalation_target_of(request: ElicitationRequest, candidate: Queue | None) -> Queue | None:
    """`candidate`, unless the request has already been in it (a cycle a→b→a ends instead of looping)."""
    if candidate is None:
        return None
    visited = {request.queue.slug}
    hops = RequestEvent.objects.filter(request_id=request.pk, kind="escalated").values_list(
        "detail", flat=True
    )
    for detail in hops:
        visited.update({detail.get("from_queue"), detail.get("to_queue")})
    return None if candidate.slug in visited else candidate


def _may_be_due(arrived_at: datetime | None, seconds: int | None, now: datetime) -> bool:
    return seconds is not None and (arrived_at is None or arrived_at + timedelta(seconds=seconds) <= now)


def _step_taken_here(*step_kinds: str) -> Exists:
    """An audit row of one of these steps, taken in the request's current queue."""
    return Exists(
        RequestEvent.objects.filter(request=OuterRef("pk"), kind__in=step_kinds)
        .annotate(step_queue=KT("detail__queue"))
        .filter(step_queue=OuterRef("queue__slug"))
    )


def run_escalation_chain(now: datetime | None = None) -> int:
    """Sweep: take every escalation step that is due, in each queue with a policy. Returns the steps taken.
    Idempotent and safe to run from several processes at once."""
    now = now or clock.now()
    taken = 0
    # Unlocked first cut, so a sweep does not lock every open request: steps already taken in the current queue
    # (a request never re-enters a queue) and steps whose time has not come are left out. The locked check in
    # each step function is the one that decides.
    candidates = (
        ElicitationRequest.objects.filter(
            status__in=OPEN_STATUSES, queue__escalation_policy__isnull=False, deadline__gt=now
        )
        .annotate(
            t1_taken=_step_taken_here(TIER_NOTIFIED),
            t2_taken=_step_taken_here(REASSIGNED),
            arrived_at=Subquery(
                RequestEvent.objects.filter(request=OuterRef("pk"), kind__in=ARRIVAL_KINDS)
                .order_by("-id")
                .values("at")[:1]
            ),
        )
        .filter(
            Q(
                status=Status.PENDING,
                t1_taken=False,
                queue__escalation_policy__unclaimed_after_seconds__isnull=False,
            )
            | Q(t2_taken=False, queue__escalation_policy__unanswered_after_seconds__isnull=False)
        )
        .order_by("created_at")
        .values_list(
            "pk",
            "status",
            "arrived_at",
            "t1_taken",
            "queue__escalation_policy__unclaimed_after_seconds",
            "queue__escalation_policy__unanswered_after_seconds",
        )
    )
    for request_id, status, arrived_at, t1_taken, t1, t2 in candidates[:1000]:
        t1_may_be_due = status == Status.PENDING and not t1_taken and _may_be_due(arrived_at, t1, now)
        t2_may_be_due = _may_be_due(arrived_at, t2, now)
        try:
            if t1_may_be_due and notify_next_tier(request_id, now=now):
                taken += 1
            if t2_may_be_due and reassign_unanswered(request_id, now=now):
                taken += 1
        except InvalidTransition:
            continue  # answered, withdrawn or moved since we looked
    return taken
