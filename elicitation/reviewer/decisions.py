"""Decision policies in the reviewer's browser: the request page's decision panel (quorum progress, the proposed
answer to approve or decline, the rule that decided), its live JSON, remembered decisions (made from a request
page after a preview of what they will match) and the supervisor's list to revoke them.

GET never writes; the approve button posts to the request page (views.answer_request), remembering and revoking
post here and call queue/rules.py."""

import math
from datetime import datetime
from typing import Any
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from elicitation.models import AnswerRule, ElicitationRequest, RequestEvent, Status
from elicitation.queue import access, clock, quorum, rules, schemas
from elicitation.queue.errors import AccessDenied, InvalidInput, NotFoundError
from elicitation.reviewer import presenters
from elicitation.reviewer.errors import domain_errors_as_pages
from elicitation.reviewer.rate_budget import within_reviewer_rate
from elicitation.reviewer.signed_in import SignedInRequest

DEFAULT_DAYS = 30
MAX_DAYS = 365
RULE_EVENTS = ("rule_applied", "rule_skipped", "routed")


def proposal_rows(found: ElicitationRequest, content: dict[str, Any]) -> list[tuple[str, str]]:
    rows = []
    for item in found.questions or []:
        question = schemas.Question.from_dict(dict(item))
        if question.id in content:
            rows.append(
                (question.title or question.id, presenters.answer_text(question, content[question.id]))
            )
    return rows


def panel(found: ElicitationRequest, user: User) -> dict[str, Any]:
    """What the request page's decision panel shows; `show` is False for a request no policy touched."""
    progress = quorum.progress(found.policy)
    decision = (found.result_meta or {}).get(quorum.DECISION_META) or {}
    proposed = quorum.proposal(found.policy)
    approvers = progress["approvers"] if progress else []
    username = user.get_username() if user and user.is_authenticated else ""
    rule_events = [
        {"kind": event.kind, "rule": (event.detail or {}).get("rule", {}).get("name"), "detail": event.detail}
        for event in RequestEvent.objects.filter(request=found, kind__in=RULE_EVENTS).order_by("id")
    ]
    remember = (
        found.status == Status.COMPLETED
        and found.answered_by_id is not None
        and found.action in ("accept", "decline")
        and access.can_remember_decisions(user, found.queue)
    )
    return {
        "show": bool(progress or decision or rule_events or remember),
        "progress": progress,
        "proposal": proposal_rows(found, proposed) if proposed is not None else None,
        "proposed_by": (found.policy or {}).get("proposal", {}).get("by") if proposed is not None else None,
        "can_approve": found.is_open
        and progress is not None
        and proposed is not None
        and username not in approvers,
        "decided_by_rule": (decision.get("rule") or {}).get("name"),
        "scripted_reason": decision.get("reason"),
        "digest": decision.get("digest") or (progress or {}).get("digest"),
        "rule_events": rule_events,
        "can_remember": remember,
    }


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def decision_json(request: HttpRequest, request_id: UUID) -> JsonResponse:
    """The panel's live figures, fetched by static/reviewhub/quorum.js when the request page hears of a change."""
    found = access.reviewable_request(request.user, request_id)
    return JsonResponse({"status": found.status, "progress": quorum.progress(found.policy)})


# --- remembered decisions --------------------------------------------------------------------------------------


def _argument_choices(found: ElicitationRequest, data: QueryDict | None) -> list[dict[str, Any]]:
    """Per scalar argument of the request: the operator chosen (default: equals) and the value."""
    _, _, arguments, _ = rules.context_call(found.context)
    choices = []
    for name, value in sorted(arguments.items()):
        if not (value is None or isinstance(value, (str, int, float, bool))):
            continue
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        op = data.get(f"op-{name}", "eq") if data is not None else "eq"
        if op not in rules.REMEMBER_OPERATORS or (op in ("lte", "gte") and not numeric):
            op = "eq"
        bound: Any = value
        if op in ("lte", "gte") and data is not None:
            bound = _finite_bound(name, data.get(f"value-{name}", value))
        choices.append({"name": name, "value": value, "numeric": numeric, "op": op, "bound": bound})
    return choices


def _finite_bound(name: str, given: Any) -> int | float:
    """A remembered decision's bound as a number: `nan`, `inf` and `1e999` are floats to Python but no number a
    rule can hold (its JSON would not store: a 500 on SQLite and PostgreSQL), so they are refused like `lots`."""
    try:
        bound = float(str(given))
    except (TypeError, ValueError):
        bound = math.nan
    if not math.isfinite(bound):
        raise InvalidInput(
            f"The bound for {name} must be a finite number.", {f"value-{name}": "must be a finite number"}
        )
    return int(bound) if bound.is_integer() else bound


def _days(data: QueryDict | None) -> int:
    try:
        days = int(str(data.get("days", DEFAULT_DAYS))) if data is not None else DEFAULT_DAYS
    except (TypeError, ValueError):
        days = DEFAULT_DAYS
    return max(1, min(MAX_DAYS, days))


def _rememberable(request: HttpRequest, request_id: UUID) -> ElicitationRequest:
    found = access.reviewable_request(request.user, request_id)
    if not access.can_remember_decisions(request.user, found.queue):
        raise AccessDenied("You may not remember decisions in this queue.")
    if (
        found.status != Status.COMPLETED
        or found.answered_by_id is None
        or found.action not in ("accept", "decline")
    ):
        raise NotFoundError("Only an answer a person gave can be remembered.")
    return found


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_http_methods(["GET", "POST"])
def remember_page(request: SignedInRequest, request_id: UUID) -> HttpResponse:
    """GET: the rule this answer would become and what it matches among the queue's latest requests (change the
    conditions and preview again). POST: save it, once confirmed."""
    found = _rememberable(request, request_id)
    data = request.POST if request.method == "POST" else (request.GET if "days" in request.GET else None)
    error = None
    try:
        choices = _argument_choices(found, data)
    except InvalidInput as exc:
        choices, error = _argument_choices(found, None), exc.detail
    days = _days(data)
    rule = rules.remembered_rule_data(
        found, arguments={c["name"]: (c["op"], c["bound"]) for c in choices}, days=days
    )
    if request.method == "POST" and error is None and request.POST.get("confirm") == "yes":
        saved = rules.remember_decision(found, rule, user=request.user)
        messages.success(request, f"Remembered for {days} days: {saved.name}.")
        return redirect("request", request_id=found.pk)
    count, verdicts = rules.preview_matches(found.queue, {**rule, "name": rule["name"]})
    return render(
        request,
        "review/remember.html",
        {
            "req": found,
            "choices": choices,
            "days": days,
            "rule": rule,
            "rule_yaml": rules.dump_yaml(rule),
            "expires_at": datetime.fromisoformat(rule["expires_at"]),
            "match_count": count,
            "checked": len(verdicts),
            "samples": verdicts[:20],
            "error": error,
        },
        status=400 if error else 200,
    )


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def remembered_list(request: HttpRequest, slug: str) -> HttpResponse:
    queue = access.reviewable_queue(request.user, slug)
    access.check_supervisor(queue, request.user)
    now = clock.now()
    rows = [
        {
            "rule": rule,
            "state": "revoked"
            if rule.revoked_at
            else "expired"
            if rule.expires_at and rule.expires_at <= now
            else "live",
        }
        for rule in rules.remembered_decisions(queue)
    ]
    return render(request, "review/remembered.html", {"queue": queue, "rows": rows, "now": now})


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_POST
def revoke_remembered(request: HttpRequest, slug: str, rule_id: int) -> HttpResponse:
    queue = access.reviewable_queue(request.user, slug)
    access.check_supervisor(queue, request.user)
    rule = AnswerRule.objects.filter(queue=queue, pk=rule_id, remembered_from__isnull=False).first()
    if rule is None:
        raise NotFoundError("No such remembered decision.")
    rules.revoke_rule(rule)
    messages.success(request, f"Revoked: {rule.name}.")
    return redirect("remembered", slug=queue.slug)
