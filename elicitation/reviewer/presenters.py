"""What the reviewer pages show about a request, computed from the row without writing: page state and notices,
who is asking, and external URLs split as the reviewer must read them."""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.contrib.auth.models import User

from elicitation.flows import hosted_flows
from elicitation.models import Action, ElicitationRequest, ExpiryOutcome, Mode, RequestEvent, Status
from elicitation.queue import browser_urls, clock, schemas

# Context keys shown as "who is asking"; anything else the agent sent is listed below them.
CONTEXT_SERVER_KEYS = ("server", "mcpServer", "serverName", "mcp_server")

CONTEXT_TOOL_KEYS = ("tool", "toolName", "tool_name")

CONTEXT_ARGUMENT_KEYS = ("arguments", "args", "toolArguments")

CONTEXT_SESSION_KEYS = ("session", "sessionId", "session_id")


@dataclass
class PageState:
    """What the viewer may do with the request right now, and what to tell them about it."""

    mine: bool = False
    held_by_other: bool = False
    closed: bool = False
    notices: list[tuple[str, str]] = field(default_factory=list)  # (level, text)


def holds(found: ElicitationRequest, user: User) -> bool:
    return found.status == Status.CLAIMED and found.claimed_by_id == user.pk


def held_by_other(found: ElicitationRequest, user: User, now: datetime) -> bool:
    return (
        found.status == Status.CLAIMED
        and found.claimed_by_id != user.pk
        and found.lease_expires_at is not None
        and found.lease_expires_at > now
    )


def closed_notice(found: ElicitationRequest) -> str:
    if found.status == Status.WITHDRAWN:
        return "The agent withdrew this request (its turn ended). Nothing entered here will be sent."
    if found.status == Status.EXPIRED:
        return f"The deadline passed; the agent was sent “{found.action}”."
    who = found.answered_by.get_username() if found.answered_by else "a reviewer"
    decided = outcome(found)
    return f"Answered by {who}: {decided.label if decided else found.action}."


# Banner levels by meaning: an answered request is good news, an expired one a warning, a withdrawn one neutral.
CLOSED_LEVEL = {Status.COMPLETED: "answered", Status.EXPIRED: "expired", Status.WITHDRAWN: "withdrawn"}


def overdue_notice(found: ElicitationRequest) -> str:
    """An open request past its deadline, which the sweeper is about to close: shown as such, never answered."""
    outcome = found.queue.expiry_outcome
    if outcome == ExpiryOutcome.ESCALATE and found.queue.escalation_queue_id is not None:
        return "The deadline passed; the request is moving to the escalation queue."
    return f"The deadline passed; the agent is being sent “{outcome}”."


def page_state(found: ElicitationRequest, user: User) -> PageState:
    now = clock.now()
    overdue = found.is_open and found.deadline <= now
    state = PageState(
        mine=holds(found, user) and not overdue,
        held_by_other=held_by_other(found, user, now),
        closed=not found.is_open or overdue,
    )
    if overdue:
        state.notices.append(("overdue", overdue_notice(found)))
    elif state.closed:
        level = CLOSED_LEVEL.get(Status(found.status), "info")
        decided = outcome(found)
        if decided is not None and decided.tone == "rejected":
            level = "rejected"  # a rejection is not shown as good news
        state.notices.append((level, closed_notice(found)))
    elif state.held_by_other:
        assert found.claimed_by is not None
        state.notices.append(
            ("held", f"{found.claimed_by.get_username()} is answering this request. Read-only.")
        )
    elif not state.mine:
        state.notices.append(
            ("info", "Preview: nobody holds this request. Claim it (c) or start typing to answer.")
        )
    if found.mode == Mode.URL and found.url_flow_completed_at is not None and not state.closed:
        state.notices.append(("ok", "The agent reports the flow is complete."))
    return state


def can_preview_edit(found: ElicitationRequest, state: PageState) -> bool:
    """A pending request nobody holds: its fields are open, and typing (or answering) claims it first."""
    return found.status == Status.PENDING and not state.closed and not state.held_by_other


# --- the decision in the reviewer's words ----------------------------------------------------------------------------


def approval_question(questions: Any) -> schemas.Question | None:
    """The yes/no question of an approval: a form whose only required question is one boolean. Its answer is the
    decision (Approved / Rejected); any other question (a note) only accompanies it."""
    parsed = [schemas.Question.from_dict(dict(item)) for item in questions or []]
    required = [question for question in parsed if question.required]
    if len(required) == 1 and required[0].kind == "boolean":
        return required[0]
    return None


@dataclass(frozen=True)
class Outcome:
    """What was decided, as a person would say it. `tone` picks the colour (CSS `outcome-<tone>`): a rejection is
    never shown in the green of an accepted protocol action."""

    label: str
    tone: str  # approved | rejected | answered | declined | expired | withdrawn


OUTCOME_SHORT = 60


def outcome(found: ElicitationRequest) -> Outcome | None:
    """None while the request is open. "No" to an approval is Rejected, although the agent received `accept`."""
    if found.status == Status.WITHDRAWN:
        return Outcome("Withdrawn", "withdrawn")
    if found.status == Status.EXPIRED:
        return Outcome("Expired", "expired")
    if found.status != Status.COMPLETED:
        return None
    if found.action == Action.DECLINE:
        return Outcome("Declined", "declined")
    if found.action == Action.CANCEL:
        return Outcome("Cancelled", "declined")
    content = found.content or {}
    approval = approval_question(found.questions) if found.mode == Mode.FORM else None
    if approval is not None and isinstance(content.get(approval.id), bool):
        return Outcome("Approved", "approved") if content[approval.id] else Outcome("Rejected", "rejected")
    answers = []
    for item in found.questions or []:
        question = schemas.Question.from_dict(dict(item))
        if question.id in content:
            answers.append("(hidden)" if question.sensitive else answer_text(question, content[question.id]))
    text = " · ".join(answer for answer in answers if answer)
    if not text:
        return Outcome("Done" if found.mode == Mode.URL else "Accepted", "answered")
    return Outcome(text if len(text) <= OUTCOME_SHORT else text[: OUTCOME_SHORT - 1] + "…", "answered")


# --- what was sent: the result as the form showed it, and the audit trail ------------------------------------------

ACTION_LABEL = {"accept": "Accepted", "decline": "Declined", "cancel": "Cancelled"}


@dataclass(frozen=True)
class ResultView:
    """The result the agent received, in the words of the form the reviewer saw."""

    action: str
    action_label: str
    outcome: Outcome | None
    rows: list[tuple[str, str]]
    answered_by: str | None
    closed_at: datetime | None
    by_deadline: bool


def answer_text(question: schemas.Question, value: Any) -> str:
    """One content value as the form rendered it: Yes/No, option labels rather than their codes."""
    labels = {option.value: option.label for option in question.options}
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, list):
        return ", ".join(labels.get(str(item), str(item)) for item in value)
    if question.kind == "single-select":
        return labels.get(str(value), str(value))
    return str(value)


def result_view(found: ElicitationRequest) -> ResultView | None:
    if found.is_open or found.status == Status.WITHDRAWN:
        return None
    content = found.content or {}
    rows: list[tuple[str, str]] = []
    for item in found.questions or []:
        question = schemas.Question.from_dict(dict(item))
        label = question.title or question.id
        if question.id in content:
            rows.append((label, answer_text(question, content[question.id])))
        elif found.action == Action.ACCEPT:
            rows.append((label, "(not answered)"))
    return ResultView(
        action=found.action,
        action_label=ACTION_LABEL.get(found.action, found.action),
        outcome=outcome(found),
        rows=rows,
        answered_by=found.answered_by.get_username() if found.answered_by else None,
        closed_at=found.closed_at,
        by_deadline=found.status == Status.EXPIRED,
    )


TRAIL_LABEL = {
    "created": "Created by the agent",
    "viewed": "Viewed",
    "claimed": "Claimed",
    "released": "Released",
    "taken_over": "Taken over",
    "completed": "Answered",
    "expired": "Expired at the deadline",
    "withdrawn": "Withdrawn by the agent",
    "escalated": "Escalated",
    "lease_expired": "Claim ran out",
}


TIMES = "\N{MULTIPLICATION SIGN}"


def clock_text(moment: datetime) -> str:
    return f"{moment:%H:%M} UTC"


@dataclass(frozen=True)
class TrailRow:
    at: datetime
    what: str
    who: str
    change: str


def trail_rows(events: list[RequestEvent]) -> list[TrailRow]:
    """The audit rows as read on the page. Each page view is audited, so a person's consecutive "Viewed" rows fold
    into one (Viewed, five times, the last at 10:32): display only, the hash-chained rows themselves are untouched."""
    rows: list[TrailRow] = []
    views = 0  # consecutive "viewed" rows by the person of rows[-1]
    viewer: Any = None
    for event in events:
        if (
            event.kind == "viewed"
            and views
            and event.actor_user_id == viewer
            and event.actor_user_id is not None
        ):
            views += 1
            last = rows[-1]
            rows[-1] = TrailRow(
                at=last.at,
                what=f"Viewed {TIMES}{views}, last {clock_text(event.at)}",
                who=last.who,
                change="",
            )
            continue
        views, viewer = (1, event.actor_user_id) if event.kind == "viewed" else (0, None)
        if event.actor_user is not None:
            who = event.actor_user.get_username()
        elif event.actor_agent is not None:
            who = f"agent {event.actor_agent.name}"
        else:
            who = "ReviewHub"
        change = f"{event.from_status} → {event.to_status}" if event.from_status != event.to_status else ""
        what = TRAIL_LABEL.get(event.kind, event.kind.replace("_", " ").capitalize())
        action = event.detail.get("action") if isinstance(event.detail, dict) else None
        if action:
            what = f"{what}: {action}"
        rows.append(TrailRow(at=event.at, what=what, who=who, change=change))
    return rows


@dataclass(frozen=True)
class UrlView:
    """An external URL as the browser will open it, split for display: the domain is what the reviewer must
    check. `href` is the normalised URL the page links to; the three display parts spell exactly it."""

    before_host: str
    host: str
    after_host: str
    scheme: str
    unicode_host: str
    warnings: list[str]
    openable: bool
    href: str
    # ReviewHub's own hosted-flow page ({PUBLIC_URL}/flows/<id>/): shown as ReviewHub's, not as another site, and
    # without warnings about the operator's own address (plain HTTP or a numeric host in a local setup).
    hosted_by_reviewhub: bool = False


def url_view(url: str) -> UrlView:
    """Read by the WHATWG rules a browser follows (`queue/browser_urls.py`), never by a plain parse: intake refuses
    URLs on which the two disagree, and a row stored before that check is shown as the browser reads it."""
    browser = browser_urls.read_as_browser(url)
    if browser is None or not browser.host:
        return UrlView(
            before_host=url,
            host="",
            after_host="",
            scheme=browser.scheme if browser else "",
            unicode_host="",
            warnings=["A browser cannot open this as a web address. Do not try to open it."],
            openable=False,
            href="",
        )
    host = browser.host
    ours = hosted_flows.is_flow_url(url)
    warnings = []
    if browser.scheme != "https" and not ours:
        warnings.append("This link is not HTTPS: anything sent through it can be read or changed on the way.")
    if browser_urls.intake_problem(url) is not None:
        warnings.append(
            f"The link as written does not say where it leads: a browser opens {host}. "
            "ReviewHub shows it the way a browser reads it."
        )
    unicode_host = browser_urls.display_host(host)
    if unicode_host != host or any(label.startswith("xn--") for label in host.split(".")):
        warnings.append(
            "The domain uses internationalised (punycode) characters and may imitate another site: "
            f"it is “{host}”, which displays as “{unicode_host}”."
        )
    if browser.is_ip_address and not ours:
        warnings.append(f"The link leads to a numeric address ({host}), not to a named site.")
    if browser.userinfo:
        warnings.append(
            f"The link has text before “@” (“{browser.userinfo}”), which is not the site: it opens {host}."
        )
    return UrlView(
        before_host=browser.prefix,
        host=host,
        after_host=browser.suffix,
        scheme=browser.scheme,
        unicode_host=unicode_host,
        warnings=warnings,
        openable=browser.scheme in browser_urls.WEB_SCHEMES,
        href=browser.href,
        hosted_by_reviewhub=ours,
    )


def context_view(context: Any) -> dict[str, Any]:
    """The agent's free-form context, split into who is asking and everything else (all of it untrusted text).

    Who is asking is read from the top level or, as the MCP bridge records it, from `context.mcp` (server, tool,
    arguments, session); `argument_rows` are the tool's arguments as (name, value) rows for a readable table."""
    empty: dict[str, Any] = {
        "server": None,
        "tool": None,
        "arguments": None,
        "argument_rows": [],
        "session": None,
        "other": [],
    }
    if not isinstance(context, dict):
        return empty
    nested = context.get("mcp") if isinstance(context.get("mcp"), dict) else None
    sources = [context, nested] if nested is not None else [context]

    def pick(keys: tuple[str, ...]) -> Any:
        for source in sources:
            for key in keys:
                if key in source:
                    return source[key]
        return None

    known = set(CONTEXT_SERVER_KEYS + CONTEXT_TOOL_KEYS + CONTEXT_ARGUMENT_KEYS + CONTEXT_SESSION_KEYS)
    arguments = pick(CONTEXT_ARGUMENT_KEYS)
    other = [
        (str(key), _display(value))
        for key, value in context.items()
        if key not in known and not (key == "mcp" and nested is not None)
    ]
    if nested is not None:
        rest = {key: value for key, value in nested.items() if key not in known}
        if rest:
            other.insert(0, ("mcp", _display(rest)))
    rows = (
        [(str(name), _display(value) or "") for name, value in arguments.items()]
        if isinstance(arguments, dict)
        else []
    )
    return {
        **empty,
        "server": _display(pick(CONTEXT_SERVER_KEYS)),
        "tool": _display(pick(CONTEXT_TOOL_KEYS)),
        "arguments": None if arguments is None else _display(arguments),
        "argument_rows": rows,
        "session": _display(pick(CONTEXT_SESSION_KEYS)),
        "other": other,
    }


def _display(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
