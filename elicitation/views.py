"""Reviewer pages: dashboard, queue, request. Views parse input and call one service; they work without JavaScript,
and the static scripts under static/reviewhub/ only add live updates, heartbeats, shared drafts and shortcuts."""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlencode, urlsplit
from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse, QueryDict
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST

from elicitation import clock, forms, selectors, services
from elicitation.exceptions import InvalidInput, InvalidTransition
from elicitation.models import (
    OPEN_STATUSES,
    Action,
    DraftState,
    ElicitationRequest,
    Mode,
    Queue,
    Status,
)

PAGE_SIZE = 50
ANSWER_PREFIX = "answer"
STATUS_FILTERS: dict[str, tuple[str, ...]] = {
    "open": OPEN_STATUSES,
    "pending": (Status.PENDING,),
    "claimed": (Status.CLAIMED,),
}
# Context keys shown as "who is asking"; anything else the agent sent is listed below them.
CONTEXT_SERVER_KEYS = ("server", "mcpServer", "serverName", "mcp_server")
CONTEXT_TOOL_KEYS = ("tool", "toolName", "tool_name")
CONTEXT_ARGUMENT_KEYS = ("arguments", "args", "toolArguments")
CONTEXT_SESSION_KEYS = ("session", "sessionId", "session_id")


def reviewable_queue(user: Any, slug: str) -> Queue:
    queue = get_object_or_404(Queue, slug=slug)
    if not selectors.can_review(user, queue):
        raise PermissionDenied("You are not a reviewer of this queue.")
    return queue


def reviewable_request(user: Any, request_id: UUID) -> ElicitationRequest:
    found = (
        ElicitationRequest.objects.select_related("queue", "agent", "claimed_by", "answered_by")
        .filter(pk=request_id)
        .first()
    )
    if found is None:
        raise Http404("No such request.")
    if not selectors.can_review(user, found.queue):
        raise PermissionDenied("You are not a reviewer of this queue.")
    return found


# --- dashboard and queue -------------------------------------------------------------------------------------------


@login_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    summaries = selectors.queue_summaries(request.user)
    return render(request, "review/dashboard.html", {"summaries": summaries, "now": clock.now()})


@login_required
@require_GET
def queue_page(request: HttpRequest, slug: str) -> HttpResponse:
    queue = reviewable_queue(request.user, slug)
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
@require_GET
def queue_counts(request: HttpRequest, slug: str) -> JsonResponse:
    """The queue page's header counts, refreshed by its script after live updates (cheaper than the dashboard's)."""
    return JsonResponse(selectors.queue_counts(reviewable_queue(request.user, slug)).labels)


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
@require_POST
def claim_next(request: HttpRequest, slug: str) -> HttpResponse:
    queue = reviewable_queue(request.user, slug)
    try:
        claimed = services.claim_next(queue, user=request.user)
    except InvalidTransition as exc:
        messages.warning(request, exc.detail)
        return redirect("queue", slug=queue.slug)
    if claimed is None:
        messages.info(request, "Nothing is waiting in this queue.")
        return redirect("queue", slug=queue.slug)
    return redirect("request", request_id=claimed.pk)


# --- the request page ----------------------------------------------------------------------------------------------


@dataclass
class PageState:
    """What the viewer may do with the request right now, and what to tell them about it."""

    mine: bool = False
    held_by_other: bool = False
    closed: bool = False
    notices: list[tuple[str, str]] = field(default_factory=list)  # (level, text)


def _holds(found: ElicitationRequest, user: Any) -> bool:
    return found.status == Status.CLAIMED and found.claimed_by_id == user.pk


def _held_by_other(found: ElicitationRequest, user: Any, now: datetime) -> bool:
    return (
        found.status == Status.CLAIMED
        and found.claimed_by_id != user.pk
        and found.lease_expires_at is not None
        and found.lease_expires_at > now
    )


def _claim_on_open(found: ElicitationRequest, user: Any) -> ElicitationRequest:
    """Opening an unclaimed request claims it; a claim someone else still holds is left alone (read-only page)."""
    if not found.is_open or _holds(found, user) or _held_by_other(found, user, clock.now()):
        return found
    try:
        return services.claim_request(found.pk, user=user)
    except InvalidTransition:
        return reviewable_request(user, found.pk)  # someone else won the race: show their claim


def _ensure_claim(found: ElicitationRequest, user: Any) -> ElicitationRequest:
    """Before answering: a lapsed claim nobody else took is taken again, so a slow no-JS reviewer loses nothing."""
    if _holds(found, user):
        return found
    return services.claim_request(found.pk, user=user)


def closed_notice(found: ElicitationRequest) -> str:
    if found.status == Status.WITHDRAWN:
        return "The agent withdrew this request (its turn ended). Nothing entered here will be sent."
    if found.status == Status.EXPIRED:
        return f"The deadline passed; the agent was sent “{found.action}”."
    who = found.answered_by.get_username() if found.answered_by else "a reviewer"
    return f"Answered by {who}: {found.action}."


def page_state(found: ElicitationRequest, user: Any) -> PageState:
    now = clock.now()
    state = PageState(
        mine=_holds(found, user), held_by_other=_held_by_other(found, user, now), closed=not found.is_open
    )
    if state.closed:
        state.notices.append(("gone", closed_notice(found)))
    elif state.held_by_other:
        assert found.claimed_by is not None and found.claimed_at is not None
        since = found.claimed_at.strftime("%H:%M:%S UTC")
        state.notices.append(
            (
                "held",
                f"{found.claimed_by.get_username()} is answering this request (since {since}). Read-only.",
            )
        )
    elif not state.mine:
        state.notices.append(("info", "This request is waiting in the queue. Claim it to answer."))
    if found.mode == Mode.URL and found.url_flow_completed_at is not None and not state.closed:
        state.notices.append(("ok", "The agent reports the flow is complete."))
    return state


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


@dataclass(frozen=True)
class UrlView:
    """An external URL split for display: the domain is what the reviewer must check."""

    before_host: str
    host: str
    after_host: str
    scheme: str
    unicode_host: str
    warnings: list[str]
    openable: bool


def _decode_host(host: str) -> str:
    labels = []
    for label in host.split("."):
        if label.lower().startswith("xn--"):
            try:
                labels.append(label.encode("ascii").decode("idna"))
                continue
            except UnicodeError:
                pass
        labels.append(label)
    return ".".join(labels)


def url_view(url: str) -> UrlView:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    netloc = parts.netloc
    userinfo, _, host_port = netloc.rpartition("@")
    if host_port.startswith("["):
        host = host_port[: host_port.find("]") + 1]
    else:
        host = host_port.rsplit(":", 1)[0] if ":" in host_port else host_port
    start = url.find(netloc) if netloc else len(url)
    before = url[:start] + (userinfo + "@" if userinfo else "")
    after = url[len(before) + len(host) :]
    warnings = []
    if scheme != "https":
        warnings.append("This link is not HTTPS: anything sent through it can be read or changed on the way.")
    if any(label.startswith("xn--") for label in host.lower().split(".")) or not host.isascii():
        ascii_host = _safe_host_ascii(host)
        warnings.append(
            "The domain uses internationalised (punycode) characters and may imitate another site: "
            f"it is “{ascii_host}”, which displays as “{_decode_host(ascii_host)}”."
        )
    if userinfo:
        warnings.append(
            f"The link has text before “@” (“{userinfo}”), which is not the site: it opens {host}."
        )
    return UrlView(
        before_host=before,
        host=host,
        after_host=after,
        scheme=scheme,
        unicode_host=_decode_host(_safe_host_ascii(host)),
        warnings=warnings,
        openable=scheme in {"http", "https"},
    )


def _safe_host_ascii(host: str) -> str:
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def context_view(context: Any) -> dict[str, Any]:
    """The agent's free-form context, split into who is asking and everything else (all of it untrusted text)."""
    if not isinstance(context, dict):
        return {"server": None, "tool": None, "arguments": None, "session": None, "other": []}

    def pick(keys: tuple[str, ...]) -> Any:
        for key in keys:
            if key in context:
                return context[key]
        return None

    known = set(CONTEXT_SERVER_KEYS + CONTEXT_TOOL_KEYS + CONTEXT_ARGUMENT_KEYS + CONTEXT_SESSION_KEYS)
    arguments = pick(CONTEXT_ARGUMENT_KEYS)
    return {
        "server": _display(pick(CONTEXT_SERVER_KEYS)),
        "tool": _display(pick(CONTEXT_TOOL_KEYS)),
        "arguments": None if arguments is None else _display(arguments),
        "session": _display(pick(CONTEXT_SESSION_KEYS)),
        "other": [(str(key), _display(value)) for key, value in context.items() if key not in known],
    }


def _display(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def render_request_page(
    request: HttpRequest,
    found: ElicitationRequest,
    *,
    form: forms.AnswerForm | None = None,
    skipped: set[str] | None = None,
    error: str | None = None,
    status: int = 200,
) -> HttpResponse:
    state = page_state(found, request.user)
    editable = state.mine
    if found.mode == Mode.FORM and form is None:
        initial, draft_skipped = draft_initial(found)
        form = forms.build_answer_form(
            found.questions, initial=initial, prefix=ANSWER_PREFIX, disabled=not editable
        )
        skipped = draft_skipped
    elif form is not None and not editable:
        # Disabled in HTML only: a disabled Django field would drop what the reviewer typed for its initial value.
        for form_field in form.fields.values():
            form_field.widget.attrs["disabled"] = True
    questions = []
    if form is not None:
        questions = [
            {"field": form[question.id], "question": question, "skipped": question.id in (skipped or set())}
            for question in form.questions.values()
        ]
    context = {
        "req": found,
        "state": state,
        "editable": editable,
        "form": form,
        "questions": questions,
        "error": error,
        "who": context_view(found.context),
        "url": url_view(found.url) if found.mode == Mode.URL else None,
        "can_supervise": selectors.can_supervise(request.user, found.queue),
        "now": clock.now(),
        "overdue": found.deadline <= clock.now(),
    }
    return render(request, "review/request.html", context, status=status)


@login_required
def request_page(request: HttpRequest, request_id: UUID) -> HttpResponse:
    found = reviewable_request(request.user, request_id)
    if request.method == "POST":
        return answer_request(request, found)
    if request.method != "GET":
        return HttpResponse(status=405)
    found = services.expire_if_overdue(found)
    found = _claim_on_open(found, request.user)
    services.record_view(found, user=request.user)
    return render_request_page(request, found)


def answer_request(request: HttpRequest, found: ElicitationRequest) -> HttpResponse:
    """One POST endpoint for every button, so the page needs no JavaScript: accept, decline, cancel, release,
    claim and take-over."""
    action = request.POST.get("action", "")
    user = request.user
    skipped = set(request.POST.getlist("skip"))
    form: forms.AnswerForm | None = None
    if found.mode == Mode.FORM:
        form = forms.build_answer_form(
            found.questions, data=posted_answers(request.POST, skipped), prefix=ANSWER_PREFIX
        )
    try:
        if action == "takeover":
            if not selectors.can_supervise(user, found.queue):
                raise PermissionDenied("Only a queue supervisor can take over a claim.")
            services.take_over_claim(found.pk, supervisor=user)
            messages.success(request, "You took over this request.")
            return redirect("request", request_id=found.pk)
        if action == "claim":
            services.claim_request(found.pk, user=user)
            return redirect("request", request_id=found.pk)
        if action == "release":
            services.release_claim(found.pk, user=user)
            messages.info(request, "Released: the request is back in the queue.")
            return redirect("queue", slug=found.queue.slug)
        if action in (Action.DECLINE, Action.CANCEL):
            found = _ensure_claim(found, user)
            services.respond(found.pk, user=user, action=action)
            return _answered(request, found, action)
        if action == Action.ACCEPT:
            content: dict[str, Any] | None = None
            if form is not None:
                if not form.is_valid():
                    return render_request_page(
                        request,
                        found,
                        form=form,
                        skipped=skipped,
                        error="Some answers need attention.",
                        status=400,
                    )
                content = forms.form_content(form)
            found = _ensure_claim(found, user)
            services.respond(found.pk, user=user, action=Action.ACCEPT, content=content)
            return _answered(request, found, Action.ACCEPT)
    except InvalidInput as exc:
        if form is not None:
            form.is_valid()
            forms.apply_answer_errors(form, exc.fields)
        return render_request_page(request, found, form=form, skipped=skipped, error=exc.detail, status=400)
    except InvalidTransition as exc:
        fresh = reviewable_request(user, found.pk)
        return render_request_page(
            request,
            fresh,
            form=form,
            skipped=skipped,
            error=_conflict_text(fresh, user, exc, answering=action in Action.values),
            status=409,
        )
    return HttpResponse("Unknown action.", status=400, content_type="text/plain")


def _conflict_text(found: ElicitationRequest, user: Any, exc: InvalidTransition, *, answering: bool) -> str:
    prefix = "Your answer was not sent: " if answering else "That did not work: "
    if not found.is_open:
        return prefix + closed_notice(found)
    if _held_by_other(found, user, clock.now()) and found.claimed_by is not None:
        return f"{prefix}{found.claimed_by.get_username()} holds this request now."
    return prefix + exc.detail


def _answered(request: HttpRequest, found: ElicitationRequest, action: str) -> HttpResponseRedirect:
    done = {"accept": "Accepted", "decline": "Declined", "cancel": "Cancelled"}[action]
    messages.success(request, f"{done}. The agent has been told.")
    return redirect(reverse("queue", kwargs={"slug": found.queue.slug}))
