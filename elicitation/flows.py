"""Hosted secret flows: ReviewHub as the host of an MCP URL-mode elicitation that collects a secret.

A flow is an ordinary URL-mode request whose `url` is ReviewHub's own page `{PUBLIC_URL}/flows/<flow id>/`, plus
a HostedFlow row holding the flow's form. The URL carries no credential: only the reviewer bound to the request
(its claim holder, or a queue member who then claims it) may open and submit it, checked here on every call.
Submitted values are validated, encrypted with AES-256-GCM (associated data = the flow id, so a ciphertext cannot
be moved to another flow) under the current key of settings.FLOW_ENCRYPTION_KEYS, and the request completes with
`accept` and no content, as does any URL-mode request of the same agent that forwarded this exact URL. The agent
that opened the flow fetches the plaintext once (`retrieve_hosted_flow`); the ciphertext is then destroyed.
Unretrieved ciphertexts are purged after settings.FLOW_RETENTION_SECONDS (`purge_expired_flows`).

Functions that hold plaintext are marked `sensitive_variables()` so Django's error reports never show it.
"""

import json
import os
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q, QuerySet
from django.views.decorators.debug import sensitive_variables

from elicitation import clock, events, schemas, selectors, services
from elicitation.exceptions import (
    Gone,
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    NotFound,
    PermissionDenied,
)
from elicitation.models import (
    OPEN_STATUSES,
    Action,
    Agent,
    ElicitationRequest,
    FlowStatus,
    HostedFlow,
    Mode,
    Scope,
    Status,
)

NONCE_BYTES = 12  # the AES-GCM standard nonce; random per encryption, never reused under a key
FLOW_PATH_PREFIX = "/flows/"


class FlowGone(Gone):
    """The flow will never yield a value (again): expired, declined, retrieved or purged. Answers 410."""

    def __init__(self, detail: str, current_status: str) -> None:
        super().__init__(detail)
        self.current_status = current_status


class FlowKeyUnavailable(ImproperlyConfigured):
    """A ciphertext names a key id that is no longer configured: an operator error, never silently dropped."""


# --- URLs -----------------------------------------------------------------------------------------------------


def flow_url(flow_id: UUID | str) -> str:
    return f"{settings.PUBLIC_URL}{FLOW_PATH_PREFIX}{flow_id}/"


def flow_id_from_url(url: str) -> UUID | None:
    """The flow id of one of our own flow URLs (exactly as we issue them), else None."""
    prefix = f"{settings.PUBLIC_URL}{FLOW_PATH_PREFIX}"
    if not url.startswith(prefix) or not url.endswith("/"):
        return None
    try:
        return UUID(url[len(prefix) : -1])
    except ValueError:
        return None


# --- encryption -------------------------------------------------------------------------------------------------


def current_key() -> tuple[str, bytes]:
    keys: dict[str, bytes] = settings.FLOW_ENCRYPTION_KEYS
    if not keys:
        raise ImproperlyConfigured("FLOW_ENCRYPTION_KEYS is empty; hosted flows need at least one key.")
    key_id = next(iter(keys))
    return key_id, keys[key_id]


def associated_data(flow_id: UUID | str) -> bytes:
    return str(flow_id).encode()


@sensitive_variables()
def encrypt_content(flow_id: UUID | str, content: dict[str, Any]) -> tuple[str, bytes, bytes]:
    """Returns (key id, nonce, ciphertext) of the JSON content, bound to this flow id."""
    key_id, key = current_key()
    nonce = os.urandom(NONCE_BYTES)
    plaintext = json.dumps(content, separators=(",", ":")).encode()
    return key_id, nonce, AESGCM(key).encrypt(nonce, plaintext, associated_data(flow_id))


@sensitive_variables()
def decrypt_content(
    flow_id: UUID | str, key_id: str, nonce: bytes | memoryview, ciphertext: bytes | memoryview
) -> dict[str, Any]:
    """Raises FlowKeyUnavailable for an unknown key id and InvalidTag for tampered or misplaced ciphertext."""
    key = settings.FLOW_ENCRYPTION_KEYS.get(key_id)
    if key is None:
        raise FlowKeyUnavailable(
            f"Hosted flow {flow_id} was encrypted under key id {key_id!r}, which FLOW_ENCRYPTION_KEYS no "
            "longer lists; add the key back (after the current one) to read it."
        )
    plaintext = AESGCM(key).decrypt(bytes(nonce), bytes(ciphertext), associated_data(flow_id))
    content: dict[str, Any] = json.loads(plaintext)
    return content


# --- agents: open and retrieve ------------------------------------------------------------------------------------


def require_flows_scope(agent: Agent) -> None:
    if not agent.has_scope(Scope.FLOWS_SECRETS):
        raise PermissionDenied(f"This key lacks the {Scope.FLOWS_SECRETS.value} scope.")


def parse_flow_schema(requested_schema: Any) -> list[schemas.Question]:
    try:
        questions = schemas.parse_requested_schema(
            requested_schema, limits=services.schema_limits(), allow_sensitive=True
        )
    except schemas.SchemaInvalid as exc:
        raise InvalidInput(
            "requestedSchema is not in the MCP elicitation subset.",
            {"requestedSchema" + e["path"].removeprefix("$"): e["reason"] for e in exc.errors},
        ) from None
    if not questions:
        raise InvalidInput(
            "A hosted flow asks at least one question.", {"requestedSchema.properties": "empty"}
        )
    return questions


def create_hosted_flow(
    *,
    agent: Agent,
    queue_slug: str,
    message: str,
    requested_schema: dict[str, Any],
    context: dict[str, Any] | None = None,
    callback_url: str = "",
    priority: int = 0,
    expires_in: int | None = None,
    elicitation_id: str = "",
    idempotency_key: str | None = None,
    fingerprint: str = "",
) -> tuple[HostedFlow, bool]:
    """Open a flow: a URL-mode request pointing at our own flow page. Returns (flow, created)."""
    require_flows_scope(agent)
    questions = parse_flow_schema(requested_schema)
    flow_id = uuid4()
    with transaction.atomic():
        request, created = services.create_request(
            agent=agent,
            queue_slug=queue_slug,
            message=message,
            mode=Mode.URL,
            url=flow_url(flow_id),
            elicitation_id=elicitation_id or str(flow_id),
            context=context,
            callback_url=callback_url,
            priority=priority,
            expires_in=expires_in,
            idempotency_key=idempotency_key,
            fingerprint=fingerprint,
        )
        if not created:
            existing = HostedFlow.objects.select_related("request__queue").filter(request=request).first()
            if existing is None:
                raise IdempotencyConflict(
                    "This Idempotency-Key was already used for a request that is not a hosted flow.",
                    {"Idempotency-Key": "reused"},
                )
            return existing, False
        flow = HostedFlow.objects.create(
            id=flow_id,
            request=request,
            requested_schema=requested_schema,
            questions=schemas.questions_to_json(questions),
        )
    return flow, True


def agent_flow(agent: Agent, flow_id: UUID | str) -> HostedFlow:
    """An agent sees only its own flows; another agent's id looks exactly like a missing one."""
    flow = (
        HostedFlow.objects.select_related("request__queue", "request__agent")
        .filter(pk=flow_id, request__agent=agent)
        .first()
    )
    if flow is None:
        raise NotFound("No such flow.")
    return flow


def past_retention(flow: HostedFlow, now: datetime) -> bool:
    cutoff = now - timedelta(seconds=settings.FLOW_RETENTION_SECONDS)
    return flow.submitted_at is not None and flow.submitted_at <= cutoff


def flow_state(flow_id: UUID | str, now: datetime | None = None) -> HostedFlow:
    """Settle the flow before anyone reads it: an overdue request expires, a closed request without a secret
    closes its flow, a secret past its retention is purged. Each step is a guarded update, safe to repeat."""
    now = now or clock.now()
    flow = HostedFlow.objects.select_related("request").get(pk=flow_id)
    request = services.expire_if_overdue(flow.request)
    if flow.status == FlowStatus.OPEN and request.status not in OPEN_STATUSES:
        HostedFlow.objects.filter(pk=flow.pk, status=FlowStatus.OPEN).update(status=FlowStatus.EXPIRED)
    elif flow.status == FlowStatus.SUBMITTED and flow.submitted_at is not None and past_retention(flow, now):
        _purge(flow.pk)
    return HostedFlow.objects.select_related("request__queue", "request__agent", "request__claimed_by").get(
        pk=flow_id
    )


@sensitive_variables()
def retrieve_hosted_flow(flow_id: UUID | str, *, agent: Agent) -> dict[str, Any]:
    """The one-time read: returns the plaintext and destroys the ciphertext in the same transaction.

    Of two concurrent retrievals exactly one wins the guarded update; the other gets 410 like any later one.
    """
    require_flows_scope(agent)
    flow = flow_state(agent_flow(agent, flow_id).pk)
    if flow.status == FlowStatus.OPEN:
        raise InvalidTransition("Nothing to retrieve yet: the flow has not been submitted.", "open")
    if flow.status != FlowStatus.SUBMITTED:
        raise FlowGone(f"The flow's value is gone: the flow is {flow.status}.", flow.status)
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=flow.request_id).first()
        locked = HostedFlow.objects.select_for_update().get(pk=flow.pk)
        if locked.status != FlowStatus.SUBMITTED or locked.ciphertext is None or locked.nonce is None:
            raise FlowGone(f"The flow's value is gone: the flow is {locked.status}.", locked.status)
        content = decrypt_content(locked.pk, locked.key_id, locked.nonce, locked.ciphertext)
        taken = HostedFlow.objects.filter(pk=locked.pk, status=FlowStatus.SUBMITTED).update(
            status=FlowStatus.RETRIEVED, ciphertext=None, nonce=None, retrieved_at=clock.now()
        )
        if taken == 0:
            raise FlowGone("The flow's value was already retrieved.", FlowStatus.RETRIEVED)
        services.record_event(flow.request, "flow_retrieved", actor_agent=agent)
    return content


# --- reviewers: open, submit, decline ------------------------------------------------------------------------------


def holds_forwarded_claim(flow: HostedFlow, user: Any, now: datetime) -> bool:
    """A reviewer holding the claim of a request that forwards this flow's URL was handed this flow."""
    return (
        forwarded_requests(flow)
        .filter(status=Status.CLAIMED, claimed_by=user, lease_expires_at__gt=now)
        .exists()
    )


def bind_reviewer(flow_id: UUID | str, user: Any) -> HostedFlow:
    """The server-side check behind the flow page: returns the flow once `user` holds its request's claim.

    Holding the claim binds; otherwise a member of the request's queue (or the holder of a forwarded request's
    claim) claims it now, as opening a request page does. Another reviewer's live claim -> 403. A flow whose
    request closed -> 410, except for the reviewer who submitted it, who sees it done.
    """
    if not HostedFlow.objects.filter(pk=flow_id).exists():
        raise NotFound("No such flow.")
    flow = flow_state(flow_id)
    request = flow.request
    if request.status not in OPEN_STATUSES:
        if flow.status != FlowStatus.EXPIRED and request.answered_by_id == getattr(user, "pk", None):
            return flow
        raise FlowGone(f"This flow is closed: the request is {request.status}.", request.status)
    now = clock.now()
    if request.status == Status.CLAIMED and request.lease_expires_at and request.lease_expires_at > now:
        if request.claimed_by_id == user.pk:
            return flow
        raise PermissionDenied("Another reviewer holds this request.")
    if not (selectors.can_review(user, request.queue) or holds_forwarded_claim(flow, user, now)):
        raise PermissionDenied("You are not a reviewer of this request.")
    try:
        services.claim_request(request.pk, user=user)
    except InvalidTransition:
        raise PermissionDenied("Another reviewer has just claimed this request.") from None
    return flow_state(flow_id)


def _closing_changes(user: Any, action: str, now: datetime) -> dict[str, Any]:
    return {
        "status": Status.COMPLETED,
        "claimed_by": None,
        "lease_expires_at": None,
        "action": action,
        "content": None,
        "answered_by": user,
        "closed_at": now,
        "url_flow_completed_at": now,
    }


def _close_request(
    request_id: UUID, *, user: Any, action: str, now: datetime, allowed: Q, detail: dict[str, Any]
) -> ElicitationRequest:
    previous, closed = services._transition(
        request_id, allowed=allowed, changes=_closing_changes(user, action, now), what="complete the flow"
    )
    services.record_transition(
        closed, "completed", actor_user=user, previous=previous, detail={"action": action, **detail}
    )
    services.emit_agent_event(closed, "completed")
    events.broadcast_request_change(closed, "completed")
    return closed


def forwarded_requests(flow: HostedFlow) -> QuerySet[ElicitationRequest]:
    """Open URL-mode requests of the same agent that forward this exact flow URL (an MCP client relaying it)."""
    return ElicitationRequest.objects.filter(
        agent_id=flow.request.agent_id, mode=Mode.URL, url=flow_url(flow.pk), status__in=OPEN_STATUSES
    ).exclude(pk=flow.request_id)


def _close_forwarded(flow: HostedFlow, *, user: Any, action: str, now: datetime) -> int:
    closed = 0
    for request_id in forwarded_requests(flow).filter(deadline__gt=now).values_list("pk", flat=True):
        try:
            _close_request(
                request_id,
                user=user,
                action=action,
                now=now,
                allowed=Q(status__in=OPEN_STATUSES, deadline__gt=now),
                detail={"hosted_flow": str(flow.pk)},
            )
        except InvalidTransition:
            continue  # withdrawn or answered since we looked
        closed += 1
    return closed


def _holder(user: Any, now: datetime) -> Q:
    return Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now)


@sensitive_variables()
def complete_hosted_flow(flow_id: UUID | str, *, user: Any, content: Any) -> HostedFlow:
    """Validate, encrypt and store the values; complete the request (and its forwards) with accept, no content.

    Only the claim holder completes, once: the flow row is locked and moved open -> submitted with a guarded
    update, in the same transaction as the request's transition, its audit row and its outbox event.
    """
    flow = HostedFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFound("No such flow.")
    questions = schemas.questions_from_json(flow.questions)
    try:
        clean = schemas.validate_content(questions, content)
    except schemas.AnswerInvalid as exc:
        raise InvalidInput("The answers are not valid.", services.content_error_fields(exc.errors)) from None
    now = clock.now()
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=flow.request_id).first()
        locked = HostedFlow.objects.select_for_update().select_related("request").get(pk=flow.pk)
        if locked.status != FlowStatus.OPEN:
            raise FlowGone(f"This flow was already {locked.status}.", locked.status)
        key_id, nonce, ciphertext = encrypt_content(locked.pk, clean)
        closed = _close_request(
            locked.request_id,
            user=user,
            action=Action.ACCEPT,
            now=now,
            allowed=_holder(user, now),
            detail={"hosted_flow": str(locked.pk)},
        )
        HostedFlow.objects.filter(pk=locked.pk, status=FlowStatus.OPEN).update(
            status=FlowStatus.SUBMITTED, key_id=key_id, nonce=nonce, ciphertext=ciphertext, submitted_at=now
        )
        locked.request = closed
        _close_forwarded(locked, user=user, action=Action.ACCEPT, now=now)
    return HostedFlow.objects.select_related("request").get(pk=flow.pk)


def decline_hosted_flow(flow_id: UUID | str, *, user: Any, action: str) -> HostedFlow:
    """The reviewer refuses (decline) or dismisses (cancel) the flow: no secret, and the forwards get the same."""
    if action not in (Action.DECLINE, Action.CANCEL):
        raise InvalidInput("Unknown action.", {"action": "must be decline or cancel"})
    flow = HostedFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFound("No such flow.")
    now = clock.now()
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=flow.request_id).first()
        locked = HostedFlow.objects.select_for_update().select_related("request").get(pk=flow.pk)
        if locked.status != FlowStatus.OPEN:
            raise FlowGone(f"This flow was already {locked.status}.", locked.status)
        locked.request = _close_request(
            locked.request_id,
            user=user,
            action=action,
            now=now,
            allowed=_holder(user, now),
            detail={"hosted_flow": str(locked.pk)},
        )
        HostedFlow.objects.filter(pk=locked.pk, status=FlowStatus.OPEN).update(status=FlowStatus.EXPIRED)
        _close_forwarded(locked, user=user, action=action, now=now)
    return HostedFlow.objects.select_related("request").get(pk=flow.pk)


def refuse_direct_accept(request: ElicitationRequest) -> None:
    """`accept` without the secret would tell the MCP client a flow finished that never did; the flow page
    (complete_hosted_flow) is the only way to accept a hosted flow or a request forwarding one."""
    if request.mode != Mode.URL:
        return
    flow_id = flow_id_from_url(request.url)
    if flow_id is None:
        return
    if HostedFlow.objects.filter(
        pk=flow_id, request__agent_id=request.agent_id, status=FlowStatus.OPEN
    ).exists():
        raise InvalidInput(
            "A hosted flow is accepted by submitting it on its own page.",
            {"action": "open the flow page to submit it, or decline"},
        )


# --- retention -------------------------------------------------------------------------------------------------


def _purge(flow_id: UUID) -> bool:
    with transaction.atomic():
        flow = HostedFlow.objects.select_related("request").filter(pk=flow_id).first()
        if flow is None:
            return False
        ElicitationRequest.objects.select_for_update().filter(pk=flow.request_id).first()
        purged = HostedFlow.objects.filter(pk=flow_id, status=FlowStatus.SUBMITTED).update(
            status=FlowStatus.PURGED, ciphertext=None, nonce=None
        )
        if purged:
            services.record_event(flow.request, "flow_purged", detail={"reason": "retention"})
    return bool(purged)


def purge_expired_flows(now: datetime | None = None) -> int:
    """Sweep: destroy secrets nobody retrieved within FLOW_RETENTION_SECONDS, and close open flows whose
    request closed without one. Idempotent; returns how many flows changed."""
    now = now or clock.now()
    cutoff = now - timedelta(seconds=settings.FLOW_RETENTION_SECONDS)
    stale = HostedFlow.objects.filter(status=FlowStatus.SUBMITTED, submitted_at__lte=cutoff)
    changed = sum(_purge(flow_id) for flow_id in stale.values_list("pk", flat=True)[:1000])
    changed += (
        HostedFlow.objects.filter(status=FlowStatus.OPEN)
        .exclude(request__status__in=OPEN_STATUSES)
        .update(status=FlowStatus.EXPIRED)
    )
    return changed
