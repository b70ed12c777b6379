"""Answers to a request that needs a quorum (the arithmetic is `queue/quorum.py`'s): the first approval proposes
the content and later ones approve it as it stands, a decline or cancel vetoes, refusals are audited, and the
agent hears only the final outcome."""

from collections.abc import Mapping
from typing import Any

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import Q

from elicitation.models import OPEN_STATUSES, Action, Approval, ElicitationRequest, Mode, Status
from elicitation.queue import answer_defaults, clock, quorum, schemas, step_up
from elicitation.queue.audit import record_event
from elicitation.queue.errors import AccessDenied, InvalidInput, InvalidTransition, NotFoundError
from elicitation.queue.transitions.claims import RELEASED
from elicitation.queue.transitions.completion import completion_changes, content_error_fields
from elicitation.queue.transitions.drafts import content_from_drafts
from elicitation.queue.transitions.path import announce, guarded_update, lock_request


def respond_in_quorum(
    request: ElicitationRequest,
    *,
    user: User,
    action: str,
    content: dict[str, Any] | None,
    assertion: Mapping[str, Any] | None = None,
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
            # Each approver of a step-up request signs the digest; the signatures go into the receipt's bundle.
            signed = step_up.verified_approval(locked, user, action, assertion)
            Approval.objects.create(request=locked, reviewer=user, group=verdict.group, at=now)
            state = quorum.with_approval(
                state, username=user.get_username(), group=verdict.group, at=now, proposal=clean
            )
            if signed is not None:
                state["approvals"][-1]["stepUp"] = signed
            progress = quorum.progress(state) or {}
            detail = {"action": action, "group": verdict.group, "progress": progress.get("text")}
            if verdict.final:
                changes = {
                    **completion_changes(
                        user,
                        Action.ACCEPT,
                        clean if locked.mode == Mode.FORM else None,
                        now,
                        request=locked,
                        meta=quorum.result_meta(state),
                        step_up=[a["stepUp"] for a in state["approvals"] if "stepUp" in a] or None,
                    ),
                    "policy": state,
                }
                previous, done = guarded_update(locked.pk, allowed=open_now, changes=changes, what="answer")
                announce(
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
            previous, moved = guarded_update(locked.pk, allowed=open_now, changes=changes, what="approve")
            announce(
                moved, "approved", previous=previous, actor_user=user, detail=detail, page_kind="approved"
            )
            return moved
        elif verdict.final:
            changes = completion_changes(
                user,
                action,
                None,
                now,
                request=locked,
                meta=quorum.result_meta(state, vetoed_by=user.get_username()),
            )
            previous, done = guarded_update(locked.pk, allowed=open_now, changes=changes, what="answer")
            announce(
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
            previous, moved = guarded_update(
                locked.pk, allowed=open_now, changes={**RELEASED, "policy": state}, what="object"
            )
            announce(
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
