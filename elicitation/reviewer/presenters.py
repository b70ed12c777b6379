"""What the reviewer pages show about a request, computed from the row without writing: page state and notices,
who is asking, and external URLs split as the reviewer must read them."""

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from elicitation.models import ElicitationRequest, ExpiryOutcome, Mode, Status
from elicitation.queue import clock

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


def holds(found: ElicitationRequest, user: Any) -> bool:
    return found.status == Status.CLAIMED and found.claimed_by_id == user.pk


def held_by_other(found: ElicitationRequest, user: Any, now: datetime) -> bool:
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
    return f"Answered by {who}: {found.action}."


def overdue_notice(found: ElicitationRequest) -> str:
    """An open request past its deadline, which the sweeper is about to close: shown as such, never answered."""
    outcome = found.queue.expiry_outcome
    if outcome == ExpiryOutcome.ESCALATE and found.queue.escalation_queue_id is not None:
        return "The deadline passed; the request is moving to the escalation queue."
    return f"The deadline passed; the agent is being sent “{outcome}”."


def page_state(found: ElicitationRequest, user: Any) -> PageState:
    now = clock.now()
    overdue = found.is_open and found.deadline <= now
    state = PageState(
        mine=holds(found, user) and not overdue,
        held_by_other=held_by_other(found, user, now),
        closed=not found.is_open or overdue,
    )
    if overdue:
        state.notices.append(("gone", overdue_notice(found)))
    elif state.closed:
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
