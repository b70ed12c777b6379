"""Hosted secret flows: ReviewHub as the host of an MCP URL-mode elicitation that collects a secret.

A flow is an ordinary URL-mode request whose `url` is ReviewHub's own page `{PUBLIC_URL}/flows/<flow id>/`, plus
a HostedFlow row holding the flow's form. The URL carries no credential: only the reviewer bound to the request
(its claim holder) may submit it, and only a reviewer of its queue may open it; checked here on every call.
Opening the page reads; claiming it is a POST, like any other claim.
Submitted values are validated, encrypted (crypto.py), and the request completes with
`accept` and no content, as does any URL-mode request of the same agent that forwarded this exact URL. The agent
that opened the flow fetches the plaintext once (`retrieve_hosted_flow`); the ciphertext is then destroyed.
Unretrieved ciphertexts are purged after settings.FLOW_RETENTION_SECONDS (`purge_expired_flows`).

Functions that hold plaintext are marked `sensitive_variables()` so Django's error reports never show it.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

from django.conf import settings
from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q, QuerySet
from django.views.decorators.debug import sensitive_variables

from elicitation.flows.crypto import decrypt_content, encrypt_content
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
from elicitation.queue import access, audit, clock, schemas, transitions
from elicitation.queue.errors import (
    AccessDenied,
    Gone,
    IdempotencyConflict,
    InvalidInput,
    InvalidTransition,
    NotFoundError,
)

FLOW_PATH_PREFIX = "/flows/"


class FlowGone(Gone):
    """The flow will never yield a value (again): expired, declined, retrieved or purged. Answers 410."""


# --- URLs -----------------------------------------------------------------------------------------------------


def flow_url(flow_id: UUID | str) -> str:
    return f"{settings.PUBLIC_URL}{FLOW_PATH_PREFIX}{flow_id}/"


def is_flow_url(url: str) -> bool:
    """Whether `url` is one of ReviewHub's own flow pages, exactly as flow_url writes them (reviewer pages show
    such a link as ReviewHub's, not as another site's)."""
    prefix = f"{settings.PUBLIC_URL}{FLOW_PATH_PREFIX}"
    if not url.startswith(prefix) or not url.endswith("/"):
        return False
    flow_id = url[len(prefix) : -1]
    try:
        return str(UUID(flow_id)) == flow_id
    except ValueError:
        return False


# --- encryption -------------------------------------------------------------------------------------------------


# --- agents: open and retrieve ------------------------------------------------------------------------------------


def require_flows_scope(agent: Agent) -> None:
    if not agent.has_scope(Scope.FLOWS_SECRETS):
        raise AccessDenied(f"This key lacks the {Scope.FLOWS_SECRETS.value} scope.")


def parse_flow_schema(requested_schema: Any) -> list[schemas.Question]:
    questions = transitions.parse_schema_questions(requested_schema, allow_sensitive=True)
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
        request, created = transitions.create_request(
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
        raise NotFoundError("No such flow.")
    return flow


def past_retention(flow: HostedFlow, now: datetime) -> bool:
    cutoff = now - timedelta(seconds=settings.FLOW_RETENTION_SECONDS)
    return flow.submitted_at is not None and flow.submitted_at <= cutoff


def effective_status(flow: HostedFlow, now: datetime) -> str:
    """The flow's status as the sweeper will leave it: an open flow whose request closed or passed its deadline
    is expired, a secret past its retention is purged. Reads use this; they never write."""
    request = flow.request
    if flow.status == FlowStatus.OPEN and (request.status not in OPEN_STATUSES or request.deadline <= now):
        return FlowStatus.EXPIRED
    if flow.status == FlowStatus.SUBMITTED and past_retention(flow, now):
        return FlowStatus.PURGED
    return flow.status


def load_flow(flow_id: UUID | str) -> HostedFlow:
    flow = (
        HostedFlow.objects.select_related("request__queue", "request__agent", "request__claimed_by")
        .filter(pk=flow_id)
        .first()
    )
    if flow is None:
        raise NotFoundError("No such flow.")
    return flow


def settle_flow(flow_id: UUID | str, now: datetime | None = None) -> HostedFlow:
    """Before a write acts on the flow: an overdue request expires, a closed request without a secret closes its
    flow, a secret past its retention is purged. Each step is a guarded update, safe to repeat."""
    now = now or clock.now()
    flow = HostedFlow.objects.select_related("request").get(pk=flow_id)
    request = transitions.expire_if_overdue(flow.request)
    if flow.status == FlowStatus.OPEN and request.status not in OPEN_STATUSES:
        HostedFlow.objects.filter(pk=flow.pk, status=FlowStatus.OPEN).update(status=FlowStatus.EXPIRED)
    elif flow.status == FlowStatus.SUBMITTED and flow.submitted_at is not None and past_retention(flow, now):
        _purge(flow.pk)
    return load_flow(flow_id)


@sensitive_variables()
def retrieve_hosted_flow(flow_id: UUID | str, *, agent: Agent) -> dict[str, Any]:
    """The one-time read: returns the plaintext and destroys the ciphertext in the same transaction.

    Of two concurrent retrievals exactly one wins the guarded update; the other gets 410 like any later one.
    """
    require_flows_scope(agent)
    flow = settle_flow(agent_flow(agent, flow_id).pk)
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
        audit.record_event(flow.request, "flow_retrieved", actor_agent=agent)
    return content


# --- reviewers: open, submit, decline ------------------------------------------------------------------------------


def holds_forwarded_claim(flow: HostedFlow, user: User, now: datetime) -> bool:
    """A reviewer holding the claim of a request that forwards this flow's URL was handed this flow."""
    return (
        forwarded_requests(flow)
        .filter(status=Status.CLAIMED, claimed_by=user, lease_expires_at__gt=now)
        .exists()
    )


@dataclass(frozen=True)
class FlowView:
    """What a reviewer may see of a flow, read without writing: the flow, its status as the sweeper will leave
    it, and whether this reviewer holds the claim (only the holder may submit)."""

    flow: HostedFlow
    status: str
    holds_claim: bool


def flow_for_reviewer(flow_id: UUID | str, user: User) -> FlowView:
    """The server-side check behind the flow page. A reviewer of the request's queue (or the holder of a
    forwarding request's claim) may look; another reviewer's live claim -> 403; a flow whose request closed ->
    410, except for the reviewer who answered it, who sees it done."""
    flow = load_flow(flow_id)
    request = flow.request
    now = clock.now()
    status = effective_status(flow, now)
    if request.status not in OPEN_STATUSES or status != FlowStatus.OPEN:
        if status != FlowStatus.EXPIRED and request.answered_by_id == getattr(user, "pk", None):
            return FlowView(flow=flow, status=status, holds_claim=False)
        raise FlowGone(f"This flow is closed: the request is {request.status}.", request.status)
    if request.status == Status.CLAIMED and request.lease_expires_at and request.lease_expires_at > now:
        if request.claimed_by_id == user.pk:
            return FlowView(flow=flow, status=status, holds_claim=True)
        raise AccessDenied("Another reviewer holds this request.")
    if not (access.can_review(user, request.queue) or holds_forwarded_claim(flow, user, now)):
        raise AccessDenied("You are not a reviewer of this request.")
    return FlowView(flow=flow, status=status, holds_claim=False)


def claim_flow(flow_id: UUID | str, user: User) -> HostedFlow:
    """Claim the flow's request for this reviewer (the page's Claim button): the same checks as looking, then an
    ordinary claim."""
    view = flow_for_reviewer(flow_id, user)
    if view.holds_claim:
        return view.flow
    if view.status != FlowStatus.OPEN:
        raise FlowGone("This flow is closed.", view.status)
    try:
        transitions.claim_request(view.flow.request_id, user=user)
    except InvalidTransition:
        raise AccessDenied("Another reviewer has just claimed this request.") from None
    return load_flow(flow_id)


def _close_request(
    request_id: UUID, *, user: User, action: str, allowed: Q, flow: HostedFlow
) -> ElicitationRequest:
    return transitions.complete_url_request(
        request_id, user=user, action=action, allowed=allowed, detail={"hosted_flow": str(flow.pk)}
    )


def forwarded_requests(flow: HostedFlow) -> QuerySet[ElicitationRequest]:
    """Open URL-mode requests of the same agent that forward this exact flow URL (an MCP client relaying it)."""
    return ElicitationRequest.objects.filter(
        agent_id=flow.request.agent_id, mode=Mode.URL, url=flow_url(flow.pk), status__in=OPEN_STATUSES
    ).exclude(pk=flow.request_id)


def _close_forwarded(flow: HostedFlow, *, user: User, action: str, now: datetime) -> int:
    closed = 0
    for request_id in forwarded_requests(flow).filter(deadline__gt=now).values_list("pk", flat=True):
        try:
            _close_request(
                request_id,
                user=user,
                action=action,
                allowed=Q(status__in=OPEN_STATUSES, deadline__gt=now),
                flow=flow,
            )
        except InvalidTransition:
            continue  # withdrawn or answered since we looked
        closed += 1
    return closed


def _holder(user: User, now: datetime) -> Q:
    return Q(status=Status.CLAIMED, claimed_by=user, deadline__gt=now)


@sensitive_variables()
def complete_hosted_flow(flow_id: UUID | str, *, user: User, content: Any) -> HostedFlow:
    """Validate, encrypt and store the values; complete the request (and its forwards) with accept, no content.

    Only the claim holder completes, once: the flow row is locked and moved open -> submitted with a guarded
    update, in the same transaction as the request's transition, its audit row and its outbox event.
    """
    flow = HostedFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFoundError("No such flow.")
    questions = schemas.questions_from_json(flow.questions)
    try:
        clean = schemas.validate_content(questions, content)
    except schemas.AnswerInvalid as exc:
        raise InvalidInput(
            "The answers are not valid.", transitions.content_error_fields(exc.errors)
        ) from None
    now = clock.now()
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=flow.request_id).first()
        locked = HostedFlow.objects.select_for_update().select_related("request").get(pk=flow.pk)
        if locked.status != FlowStatus.OPEN:
            raise FlowGone(f"This flow was already {locked.status}.", locked.status)
        key_id, nonce, ciphertext = encrypt_content(locked.pk, clean)
        closed = _close_request(
            locked.request_id, user=user, action=Action.ACCEPT, allowed=_holder(user, now), flow=locked
        )
        HostedFlow.objects.filter(pk=locked.pk, status=FlowStatus.OPEN).update(
            status=FlowStatus.SUBMITTED, key_id=key_id, nonce=nonce, ciphertext=ciphertext, submitted_at=now
        )
        locked.request = closed
        _close_forwarded(locked, user=user, action=Action.ACCEPT, now=now)
    return HostedFlow.objects.select_related("request").get(pk=flow.pk)


def decline_hosted_flow(flow_id: UUID | str, *, user: User, action: str) -> HostedFlow:
    """The reviewer refuses (decline) or dismisses (cancel) the flow: no secret, and the forwards get the same."""
    if action not in (Action.DECLINE, Action.CANCEL):
        raise InvalidInput("Unknown action.", {"action": "must be decline or cancel"})
    flow = HostedFlow.objects.filter(pk=flow_id).first()
    if flow is None:
        raise NotFoundError("No such flow.")
    now = clock.now()
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=flow.request_id).first()
        locked = HostedFlow.objects.select_for_update().select_related("request").get(pk=flow.pk)
        if locked.status != FlowStatus.OPEN:
            raise FlowGone(f"This flow was already {locked.status}.", locked.status)
        locked.request = _close_request(
            locked.request_id, user=user, action=action, allowed=_holder(user, now), flow=locked
        )
        HostedFlow.objects.filter(pk=locked.pk, status=FlowStatus.OPEN).update(status=FlowStatus.EXPIRED)
        _close_forwarded(locked, user=user, action=action, now=now)
    return HostedFlow.objects.select_related("request").get(pk=flow.pk)


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
            audit.record_event(flow.request, "flow_purged", detail={"reason": "retention"})
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
