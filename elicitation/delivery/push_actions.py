"""A push notification's buttons: one-time tokens, and the answer they give through the page's path.

A yes/no approval (its form is one boolean question) pushed to a reviewer carries a token per button, all naming one
`PushAction` row (a random nonce): the notification answers once. Approve and Reject accept with `true` / `false`.
Where an accept must be signed with a passkey (`step_up.required`, the function `respond` asks), every accept is,
"no" included, and only the request page can sign: such a notification has no Approve and no Reject, no token is
made for either, and it carries Decline (a decline needs no passkey) and "Approve with passkey", a button without a
token that opens the page. A token is signed by the server (django.core.signing, SECRET_KEY) and binds the request,
the reviewer and the digest of the answer it gives, so it cannot be turned into another answer, another request's
or another reviewer's. It travels only inside the push payload, encrypted to the reviewer's browser (RFC 8291).

Redeeming one (`verify`, then the door charges the reviewer's rate budget, then `redeem`):
- a bad signature, a token for another request, or one presented by another signed-in reviewer: AccessDenied
  (403), and nothing changes;
- a reviewer no longer active or no longer on the request's queue: AccessDenied;
- a token already used (replayed, or another button of the same notification): InvalidTransition (409);
- otherwise the row is marked used and the request claimed and answered in one transaction, by the same
  transitions as the request page (`claim_request`, `respond`; a quorum's approvers respond without a claim), so
  the claim, quorum, rule, step-up and audit paths are the page's. If the answer is refused (an accept of a
  step-up request: StepUpRequired, 403), the mark is rolled back with it.
"""

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

import rfc8785
from django.core import signing
from django.db import transaction

from elicitation.models import Action, ElicitationRequest, Mode, PushAction
from elicitation.queue import access, clock, quorum, schemas, step_up, transitions
from elicitation.queue.errors import AccessDenied, InvalidTransition

SALT = "elicitation.push-action"
APPROVE, REJECT, DECLINE = "approve", "reject", "decline"
TITLES = {APPROVE: "Approve", REJECT: "Reject", DECLINE: "Decline"}
# The button of a step-up request's notification that answers nothing: it opens the page, where a passkey signs.
APPROVE_ON_PAGE = {"action": "open", "title": "Approve with passkey"}
# Long enough for a phone that was off for a weekend; the request's own deadline usually ends it sooner.
MAX_AGE_SECONDS = 7 * 24 * 3600


def yes_no_question(request: ElicitationRequest) -> schemas.Question | None:
    """The one boolean question an Approve / Reject answers completely, if the form is that simple."""
    if request.mode != Mode.FORM:
        return None
    questions = schemas.questions_from_json(request.questions)
    return questions[0] if len(questions) == 1 and questions[0].kind == "boolean" else None


def offered(request: ElicitationRequest) -> tuple[str, ...]:
    """The token buttons a notification of this request carries: none unless it is a yes/no approval."""
    if yes_no_question(request) is None:
        return ()
    return (DECLINE,) if step_up.required(request) else (APPROVE, REJECT)


def answer_of(question: schemas.Question, button: str) -> tuple[str, dict[str, Any] | None]:
    """(action, content) a button gives: Approve and Reject accept with `true` / `false`; Decline declines."""
    if button == DECLINE:
        return Action.DECLINE.value, None
    return Action.ACCEPT.value, {question.id: button == APPROVE}


def answer_digest(request: ElicitationRequest, action: str, content: dict[str, Any] | None) -> str:
    """SHA-256 of the answer in canonical JSON (RFC 8785): what a token may give, and nothing else."""
    canonical = rfc8785.dumps({"request": str(request.pk), "action": action, "content": content})
    return hashlib.sha256(canonical).hexdigest()


def action_token(row: PushAction, button: str) -> str:
    """The signed token of one button of the notification `row` stands for."""
    question = yes_no_question(row.request)
    if question is None:
        raise ValueError("only a yes/no approval's notification has token buttons")
    claims = {
        "n": row.nonce,
        "r": str(row.request_id),
        "u": row.user_id,
        "a": button,
        "d": answer_digest(row.request, *answer_of(question, button)),
    }
    return signing.dumps(claims, salt=SALT)


def issue(request: ElicitationRequest, user: Any) -> dict[str, str]:
    """{button: token} for a yes/no approval pushed to this reviewer, else {} (the notification only opens it)."""
    buttons = offered(request)
    if not buttons or user is None:
        return {}
    row = PushAction.objects.create(
        nonce=secrets.token_urlsafe(32), request=request, user=user, created_at=clock.now()
    )
    return {button: action_token(row, button) for button in buttons}


def notification_actions(request: ElicitationRequest, user: Any) -> list[dict[str, str]]:
    """The notification's buttons as the service worker shows them: each token button with its title and token,
    led by "Approve with passkey" (no token: it opens the page) where an accept needs a passkey; [] for a request
    that is not a yes/no approval."""
    tokens = issue(request, user)
    actions = [
        {"action": button, "title": TITLES[button], "token": token} for button, token in tokens.items()
    ]
    if actions and step_up.required(request):
        actions.insert(0, dict(APPROVE_ON_PAGE))
    return actions


@dataclass(frozen=True)
class Verified:
    """A token that may be redeemed: whose it is, its button, and the answer (`action`, `content`) it gives."""

    row: PushAction
    user: Any
    request: ElicitationRequest
    button: str
    action: str
    content: dict[str, Any] | None


def verify(token: Any, request_id: Any, presented_by: Any = None) -> Verified:
    """Check a token presented for `request_id` (by the signed-in `presented_by`, if any) without using it."""
    if not isinstance(token, str) or not token or len(token) > 2000:
        raise AccessDenied("This is not a ReviewHub action token.", {"token": "is missing or malformed"})
    try:
        claims = signing.loads(token, salt=SALT, max_age=MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise AccessDenied(
            "This action has expired: open the request instead.", {"token": "expired"}
        ) from None
    except signing.BadSignature:
        raise AccessDenied("This is not a ReviewHub action token.", {"token": "bad signature"}) from None
    if (
        not isinstance(claims, dict)
        or claims.get("a") not in TITLES
        or not isinstance(claims.get("u"), int)
        or not isinstance(claims.get("n"), str)
    ):
        raise AccessDenied("This is not a ReviewHub action token.", {"token": "malformed"})
    if claims.get("r") != str(request_id):
        raise AccessDenied("This action token is for another request.", {"token": "another request's"})
    if presented_by is not None and presented_by.is_authenticated and presented_by.pk != claims.get("u"):
        raise AccessDenied(
            "This action token is another reviewer's: you are signed in as someone else.",
            {"token": "another reviewer's"},
        )
    row = (
        PushAction.objects.select_related("request__queue", "user")
        .filter(nonce=claims["n"], request_id=request_id, user_id=claims["u"])
        .first()
    )
    if row is None:
        raise AccessDenied("This action token names no notification we sent.", {"token": "unknown"})
    user = row.user
    request = row.request
    if not user.is_active or not access.can_review(user, request.queue):
        raise AccessDenied("This reviewer may no longer answer requests of this queue.")
    question = yes_no_question(request)
    answer = answer_of(question, claims["a"]) if question is not None else None
    if answer is None or answer_digest(request, *answer) != claims.get("d"):
        raise AccessDenied(
            "This action token does not match the request's answer.", {"token": "digest mismatch"}
        )
    action, content = answer
    return Verified(row=row, user=user, request=request, button=claims["a"], action=action, content=content)


def redeem(verified: Verified) -> ElicitationRequest:
    """Use the token once and answer through the page's transitions, all in one transaction."""
    request = verified.request
    with transaction.atomic():
        marked = PushAction.objects.filter(pk=verified.row.pk, used_at__isnull=True).update(
            used_at=clock.now(), used_for=verified.button
        )
        if not marked:
            used = PushAction.objects.filter(pk=verified.row.pk).values_list("used_for", flat=True).first()
            raise InvalidTransition(
                f"This notification's action was already used ({TITLES.get(used or '', 'answered')}); "
                "nothing was changed.",
                current_status=request.status,
            )
        if quorum.requirement(request) is None:
            transitions.claim_request(request.pk, user=verified.user)
        return transitions.respond(
            request.pk, user=verified.user, action=verified.action, content=verified.content
        )
