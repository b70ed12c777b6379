"""Reviewer pages: dashboard, queue, request. Views parse input and call one transition, and GET never writes.
They work without JavaScript; the static scripts under static/reviewhub/ only add live updates, heartbeats, shared drafts and shortcuts."""

from datetime import UTC, date
from typing import Any
from urllib.parse import urlencode
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from elicitation.models import (
    OPEN_STATUSES,
    Action,
    Draft,
    DraftState,
    ElicitationRequest,
    HeldAnswer,
    Mode,
    Queue,
    ReviewerReach,
    Status,
)
from elicitation.queue import access, audit, clock, quorum, selectors, transitions
from elicitation.queue.errors import InvalidInput, InvalidTransition, StepUpRequired
from elicitation.reviewer import decision_card, forms, passkeys, presenters, undo
from elicitation.reviewer.errors import domain_errors_as_pages
from elicitation.reviewer.rate_budget import within_reviewer_rate
from elicitation.reviewer.signed_in import SignedInRequest

PAGE_SIZE = 50
# The split view's list beside the request (wide screens): enough to see what comes next, cheap to render.
RAIL_SIZE = 15
ANSWER_PREFIX = "answer"
STATUS_FILTERS: dict[str, tuple[str, ...]] = {
    "open": OPEN_STATUSES,
    "pending": (Status.PENDING,),
    "claimed": (Status.CLAIMED,),
}
# --- dashboard and queue -------------------------------------------------------------------------------------------


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def dashboard(request: SignedInRequest) -> HttpResponse:
    summaries = selectors.queue_summaries(request.user)
    return render(request, "review/dashboard.html", {"summaries": summaries, "now": clock.now()})


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def queue_page(request: HttpRequest, slug: str) -> HttpResponse:
    queue = access.reviewable_queue(request.user, slug)
    status_filter = request.GET.get("status", "open")
    if status_filter not in STATUS_FILTERS:
        status_filter = "open"
    agents = list(queue.agents.order_by("name"))
    agent_id = _int_or_none(request.GET.get("agent"))
    if agent_id is not None and agent_id not in {agent.pk for agent in agents}:
        agent_id = None
    after = selectors.QueueCursor.decode(request.GET.get("after"))
    before = selectors.QueueCursor.decode(request.GET.get("before")) if after is None else None
    page = selectors.queue_page(
        queue,
        statuses=STATUS_FILTERS[status_filter],
        agent_id=agent_id,
        after=after,
        before=before,
        size=PAGE_SIZE,
    )
    if not page.rows and (after or before):
        # The rows around the cursor were answered meanwhile: start from the top rather than show nothing.
        page = selectors.queue_page(
            queue, statuses=STATUS_FILTERS[status_filter], agent_id=agent_id, size=PAGE_SIZE
        )
    filters = {"status": status_filter, **({"agent": str(agent_id)} if agent_id is not None else {})}
    now = clock.now()
    return render(
        request,
        "review/queue.html",
        {
            "queue": queue,
            "counts": selectors.queue_counts(queue),
            "rows": page.rows,
            "now": now,
            "agents": agents,
            "status_filter": status_filter,
            "agent_filter": agent_id,
            "first_page": page.previous_cursor is None,
            "last_page": page.next_cursor is None,
            "next_url": _page_url(filters, "after", page.next_cursor),
            "previous_url": _page_url(filters, "before", page.previous_cursor),
            "first_url": "?" + urlencode(filters),
        },
    )


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def queue_counts(request: HttpRequest, slug: str) -> JsonResponse:
    """The queue page's header counts, refreshed by its script after live updates (cheaper than the dashboard's)."""
    return JsonResponse(selectors.queue_counts(access.reviewable_queue(request.user, slug)).labels)


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def queue_row(request: HttpRequest, slug: str, request_id: UUID) -> HttpResponse:
    """One queue row, rendered by the same partial as the page: the script inserts it when a push says a request
    arrived or changed, so the row's markup has a single source. 204 when the request is not open in the queue."""
    queue = access.reviewable_queue(request.user, slug)
    row = (
        ElicitationRequest.objects.select_related("agent", "claimed_by")
        .filter(pk=request_id, queue=queue, status__in=OPEN_STATUSES)
        .first()
    )
    if row is None:
        return HttpResponse(status=204)
    return render(request, "review/_queue_row.html", {"r": row, "now": clock.now()})


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text else None
    except ValueError:
        return None


def _page_url(filters: dict[str, str], key: str, cursor: selectors.QueueCursor | None) -> str | None:
    if cursor is None:
        return None
    return "?" + urlencode({**filters, key: cursor.encode()})


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_POST
def claim_next(request: SignedInRequest, slug: str) -> HttpResponse:
    queue = access.reviewable_queue(request.user, slug)
    try:
        claimed = transitions.claim_next(queue, user=request.user, resume_held=True)
    except InvalidTransition as exc:
        messages.warning(request, exc.detail)
        return redirect("queue", slug=queue.slug)
    if claimed is None:
        messages.info(request, "Nothing is waiting in this queue.")
        return redirect("queue", slug=queue.slug)
    return redirect("request", request_id=claimed.pk)


# --- the request page ----------------------------------------------------------------------------------------------


def _ensure_claim(found: ElicitationRequest, user: User) -> ElicitationRequest:
    """Before answering: a preview (or a lapsed claim nobody else took) is claimed first, so answering from the
    preview, or as a slow no-JS reviewer, loses nothing."""
    if presenters.holds(found, user):
        return found
    return transitions.claim_request(found.pk, user=user)


def draft_initial(found: ElicitationRequest) -> tuple[dict[str, Any], set[str]]:
    """Shared drafts as initial values (they win over schema defaults) and the questions marked skipped."""
    initial: dict[str, Any] = {}
    skipped: set[str] = set()
    for draft in found.drafts.all():
        if draft.state == DraftState.SKIPPED:
            skipped.add(draft.question_id)
        elif draft.value is not None:
            initial[draft.question_id] = draft.value
    return initial, skipped


def posted_answers(data: QueryDict, skipped: set[str]) -> QueryDict:
    """The posted answers without the skipped questions: a skipped question is unanswered, whatever it held."""
    answers = data.copy()
    for question_id in skipped:
        answers.pop(f"{ANSWER_PREFIX}-{question_id}", None)
    return answers


def _describe_errors(form: forms.AnswerForm) -> list[dict[str, str]]:
    """Tie each input to its help and error text (aria-describedby), and list the invalid fields for the summary."""
    summary = []
    for name in form.fields:
        bound = form[name]
        ids = [f"{bound.auto_id}_helptext"] if bound.help_text else []
        ids.append(f"{bound.auto_id}_error")
        bound.field.widget.attrs["aria-describedby"] = " ".join(ids)
        if form.is_bound and bound.errors:
            bound.field.widget.attrs["aria-invalid"] = "true"
            target = bound.auto_id if not bound.field.widget.use_fieldset else f"{bound.auto_id}_0"
            summary.append(
                {"target": target, "label": str(bound.label), "error": " ".join(str(e) for e in bound.errors)}
            )
    return summary


def approval_buttons(found: ElicitationRequest) -> Any:
    """The yes/no question of an approval shown as Approve / Reject buttons: one that must be chosen explicitly
    (a defaulted or optional yes/no stays a checkbox)."""
    approval = presenters.approval_question(found.questions) if found.mode == Mode.FORM else None
    return approval if approval is not None and forms.needs_explicit_choice(approval) else None


def render_request_page(
    request: SignedInRequest,
    found: ElicitationRequest,
    *,
    form: forms.AnswerForm | None = None,
    skipped: set[str] | None = None,
    error: str | None = None,
    status: int = 200,
) -> HttpResponse:
    state = presenters.page_state(found, request.user)
    # Fields are open to the holder, and to anyone previewing a pending request: typing there claims it first.
    editable = state.mine or presenters.can_preview_edit(found, state)
    result = presenters.result_view(found)
    if found.mode == Mode.FORM and found.is_open and form is None:
        # Shared drafts are shown only while the request is open; a closed one shows what was sent instead.
        initial, draft_skipped = draft_initial(found)
        form = forms.build_answer_form(
            found.questions, initial=initial, prefix=ANSWER_PREFIX, disabled=not editable
        )
        skipped = draft_skipped
    elif form is not None and not editable:
        # Disabled in HTML only: a disabled Django field would drop what the reviewer typed for its initial value.
        for form_field in form.fields.values():
            form_field.widget.attrs["disabled"] = True
    if not found.is_open:
        form = None
    error_summary = _describe_errors(form) if form is not None else []
    questions = []
    if form is not None:
        questions = [
            {"field": form[question.id], "question": question, "skipped": question.id in (skipped or set())}
            for question in form.questions.values()
        ]
    now = clock.now()
    context = {
        "req": found,
        "state": state,
        "editable": editable,
        "form": form,
        "questions": questions,
        "error": error,
        "error_summary": error_summary,
        "result": result,
        "trail": presenters.trail_rows(selectors.request_trail(found)) if not found.is_open else [],
        "who": presenters.context_view(found.context),
        "card": decision_card.card(found),
        "approval": approval_buttons(found),
        "url": presenters.url_view(found.url) if found.mode == Mode.URL else None,
        "can_supervise": access.can_supervise(request.user, found.queue),
        "now": now,
        "overdue": found.is_open and found.deadline <= now,
        # Without JavaScript, "Take over…" links to ?takeover=1, which renders the confirmation open.
        "confirm_takeover": request.GET.get("takeover") == "1",
        "rail": selectors.queue_page(found.queue, statuses=(Status.PENDING,), size=RAIL_SIZE).rows,
    }
    return render(request, "review/request.html", context, status=status)


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_http_methods(["GET", "POST"])
def request_page(request: SignedInRequest, request_id: UUID) -> HttpResponse:
    found = access.reviewable_request(request.user, request_id)
    if request.method == "POST":
        return answer_request(request, found)
    # Looking never claims: the reviewer claims with the Claim button (or "Next request"), so a look does not
    # block a teammate for a whole lease. Only the audit of the sensitive view is written, explicitly.
    audit.record_view(found, user=request.user)
    return render_request_page(request, found)


def answer_request(request: SignedInRequest, found: ElicitationRequest) -> HttpResponse:
    """One POST endpoint for every button, so the page needs no JavaScript: accept, decline, cancel, release,
    claim and take-over."""
    action = request.POST.get("action", "")
    user = request.user
    skipped = set(request.POST.getlist("skip"))
    posted: QueryDict = request.POST
    approval = approval_buttons(found)
    decide = request.POST.get("decide")
    if approval is not None and decide in ("approve", "reject") and not action:
        # An approval's Approve / Reject buttons: accept, with the yes/no question answered by the click.
        posted = request.POST.copy()
        posted[f"{ANSWER_PREFIX}-{approval.id}"] = "true" if decide == "approve" else "false"
        action = Action.ACCEPT
    form: forms.AnswerForm | None = None
    if found.mode == Mode.FORM:
        form = forms.build_answer_form(
            found.questions, data=posted_answers(posted, skipped), prefix=ANSWER_PREFIX
        )
    try:
        if action == "takeover":
            access.check_supervisor(found.queue, user)
            transitions.take_over_claim(found.pk, supervisor=user)
            messages.success(request, "You took over this request.")
            return redirect("request", request_id=found.pk)
        if action == "claim":
            transitions.claim_request(found.pk, user=user)
            return redirect("request", request_id=found.pk)
        if action == "release":
            transitions.release_claim(found.pk, user=user)
            messages.info(request, "Released: the request is back in the queue.")
            return redirect("queue", slug=found.queue.slug)
        # A quorum's later approvers approve the proposed answer (review/_quorum.html), or veto without a claim.
        if action == "approve":
            approved = transitions.respond(
                found.pk, user=user, action=Action.ACCEPT, assertion=passkeys.posted_assertion(request)
            )
            progress = quorum.progress(approved.policy) or {}
            messages.success(request, f"Approved: {progress.get('text', 'done')}.")
            return redirect("request", request_id=found.pk)
        if action in (Action.DECLINE, Action.CANCEL) and quorum.requirement(found) is not None:
            transitions.respond(found.pk, user=user, action=action)  # a veto needs no claim
            return _answered(request, found, action)
        if action in (Action.DECLINE, Action.CANCEL):
            found = _ensure_claim(found, user)
            held = undo.hold_if_wanted(found, user, action)
            if held is None:
                transitions.respond(found.pk, user=user, action=action)
            return _answered(request, found, action, held=held is not None)
        if action == Action.ACCEPT:
            content: dict[str, Any] | None = None
            if form is not None:
                if not form.is_valid():
                    return render_request_page(
                        request,
                        found,
                        form=form,
                        skipped=skipped,
                        error="Some answers need attention:",
                        status=400,
                    )
                content = forms.form_content(form)
            found = _ensure_claim(found, user)
            if undo.hold_if_wanted(found, user, Action.ACCEPT, content) is not None:
                return _answered(request, found, Action.ACCEPT, held=True)
            answered = transitions.respond(
                found.pk,
                user=user,
                action=Action.ACCEPT,
                content=content,
                assertion=passkeys.posted_assertion(request),
            )
            if answered.is_open:  # the first approval of a quorum: the decision waits for the others
                progress = quorum.progress(answered.policy) or {}
                messages.success(
                    request, f"Proposed and approved: {progress.get('text', 'waiting for others')}."
                )
                return redirect("queue", slug=found.queue.slug)
            return _answered(request, found, Action.ACCEPT)
    except InvalidInput as exc:
        if form is not None:
            form.is_valid()
            forms.apply_answer_errors(form, exc.fields)
        return render_request_page(request, found, form=form, skipped=skipped, error=exc.detail, status=400)
    except StepUpRequired as exc:
        # The form stays as typed: the reviewer signs again with their passkey, nothing was recorded.
        return render_request_page(request, found, form=form, skipped=skipped, error=exc.detail, status=403)
    except InvalidTransition as exc:
        fresh = access.reviewable_request(user, found.pk)
        return render_request_page(
            request,
            fresh,
            form=form,
            skipped=skipped,
            error=_conflict_text(fresh, user, exc, answering=action in Action.values),
            status=409,
        )
    return HttpResponse("Unknown action.", status=400, content_type="text/plain")


def _conflict_text(found: ElicitationRequest, user: User, exc: InvalidTransition, *, answering: bool) -> str:
    prefix = "Your answer was not sent: " if answering else "That did not work: "
    if not found.is_open:
        return prefix + presenters.closed_notice(found)
    if presenters.held_by_other(found, user, clock.now()) and found.claimed_by is not None:
        return f"{prefix}{found.claimed_by.get_username()} holds this request now."
    return prefix + exc.detail


def _answered(
    request: SignedInRequest, found: ElicitationRequest, action: str, *, held: bool = False
) -> HttpResponse:
    """Back to the queue, or, with the "open the next request" preference (on by default), straight into the
    next request, claimed: the keyboard loop costs no extra key per answer. A held answer (undo window) is
    named by the page's undo banner instead of "the agent has been told"."""
    done = presenters.ACTION_LABEL[action]
    if held:
        return _answered_held(request, found)
    if request.POST.get("then") == "next":
        try:
            following = transitions.claim_next(found.queue, user=request.user, resume_held=True)
        except InvalidTransition:
            following = None
        if following is not None:
            messages.success(request, f"{done}. The agent has been told. This is the next request.")
            if request.POST.get("inline") == "1":
                return _render_next(request, following.pk)
            return redirect("request", request_id=following.pk)
        messages.success(request, f"{done}. The agent has been told. Nothing else is waiting in this queue.")
        return redirect("queue", slug=found.queue.slug)
    messages.success(request, f"{done}. The agent has been told.")
    return redirect(reverse("queue", kwargs={"slug": found.queue.slug}))


def _answered_held(request: SignedInRequest, found: ElicitationRequest) -> HttpResponse:
    if request.POST.get("then") == "next":
        try:
            following = transitions.claim_next(found.queue, user=request.user, resume_held=True)
        except InvalidTransition:
            following = None
        if following is not None:
            if request.POST.get("inline") == "1":
                return _render_next(request, following.pk)
            return redirect("request", request_id=following.pk)
        messages.info(request, "Nothing else is waiting in this queue.")
    return redirect("queue", slug=found.queue.slug)


def _render_next(request: SignedInRequest, request_id: UUID) -> HttpResponse:
    """The next request's page as the answer's response, saving the keyboard loop the redirect's round trip.
    Only request.js asks for it (`inline=1`): it moves the address bar to the request's own URL with
    history.replaceState, so a reload is a GET of that page. Without JavaScript the answer redirects (PRG)."""
    following = access.reviewable_request(request.user, request_id)
    audit.record_view(following, user=request.user)
    response = render_request_page(request, following)
    response["Cache-Control"] = "no-store"
    return response


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_POST
def leave_request(request: SignedInRequest, request_id: UUID) -> HttpResponse:
    """The page was left (navigation, tab closed; sent with navigator.sendBeacon): a claim on which nothing was
    typed goes back to the queue, so a look does not block a teammate for a whole lease. Drafts saved by this
    reviewer since claiming keep the claim."""
    found = access.reviewable_request(request.user, request_id)
    if not presenters.holds(found, request.user):
        return JsonResponse({"released": False, "status": found.status}, status=409)
    if HeldAnswer.objects.filter(pk=found.pk).exists():  # answered, in its undo window: the claim stays
        return JsonResponse({"released": False, "status": found.status, "reason": "held"}, status=409)
    typed = Draft.objects.filter(
        request=found, updated_by_id=request.user.pk, updated_at__gte=found.claimed_at
    ).exists()
    if typed:
        return JsonResponse({"released": False, "status": found.status, "reason": "drafts"}, status=409)
    try:
        transitions.release_claim(found.pk, user=request.user)
    except InvalidTransition:
        fresh = access.reviewable_request(request.user, request_id)
        return JsonResponse({"released": False, "status": fresh.status}, status=409)
    return JsonResponse({"released": True, "status": Status.PENDING})


# --- history and search --------------------------------------------------------------------------------------------

HISTORY_STATUSES = [("", "Any status"), *[(value, value.capitalize()) for value in Status.values]]


def _zone_or_none(name: str | None) -> ZoneInfo | None:
    if not name or len(name) > 64:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def history_zone(user: User, browser_zone: str | None) -> ZoneInfo:
    """The zone whose days the date filter means: the reviewer's saved time zone (reach preferences), else the
    browser's (the form's `tz`, filled in by reviewhub.js), else UTC. A saved "UTC" is the model's default,
    indistinguishable from never chosen, so the browser's zone wins over it."""
    saved = ReviewerReach.objects.filter(user_id=user.pk).values_list("time_zone", flat=True).first()
    if saved and saved != "UTC":
        zone = _zone_or_none(saved)
        if zone is not None:
            return zone
    return _zone_or_none(browser_zone) or ZoneInfo("UTC")


def _date_or_none(text: str | None) -> date | None:
    try:
        return date.fromisoformat(text) if text else None
    except ValueError:
        return None


@login_required
@within_reviewer_rate
@domain_errors_as_pages
@require_GET
def history_page(request: SignedInRequest) -> HttpResponse:
    """Every request the reviewer may see, any status, newest first: filters and a search over message and
    context (PostgreSQL full-text through a GIN index; substring matching on the embedded SQLite)."""
    user = request.user
    params = request.GET
    queues = list(access.reviewer_queues(user).order_by("slug"))
    queue: Queue | None = next((q for q in queues if q.slug == params.get("queue")), None)
    agents = selectors.visible_agents(user)
    agent_id = _int_or_none(params.get("agent"))
    if agent_id not in {agent.pk for agent in agents}:
        agent_id = None
    status_filter = params.get("status", "")
    if status_filter not in Status.values:
        status_filter = ""
    mine = params.get("mine") == "1"
    since, until = _date_or_none(params.get("since")), _date_or_none(params.get("until"))
    # Only days need a zone: a search without dates skips the preference lookup.
    zone = history_zone(user, params.get("tz")) if since or until else None
    filters = selectors.HistoryFilters(
        status=status_filter,
        queue=queue,
        agent_id=agent_id,
        tool=params.get("tool", "").strip()[:200],
        answered_by=user if mine else None,
        since=since,
        until=until,
        text=params.get("q", "").strip()[:200],
        zone=zone or UTC,
    )
    page = selectors.history_page(
        user, filters, after=selectors.HistoryCursor.decode(params.get("after")), size=PAGE_SIZE
    )
    kept = {key: value for key, value in params.items() if key != "after" and value}
    return render(
        request,
        "review/history.html",
        {
            "rows": page.rows,
            "filters": filters,
            "mine": mine,
            "queues": queues,
            "agents": agents,
            "statuses": HISTORY_STATUSES,
            "searching": bool(selectors.search_words(filters.text)),
            "zone_name": zone.key if zone else "",
            "next_url": "?" + urlencode({**kept, "after": page.next_cursor.encode()})
            if page.next_cursor
            else None,
            "first_url": "?" + urlencode(kept) if params.get("after") else None,
            "now": clock.now(),
        },
    )
