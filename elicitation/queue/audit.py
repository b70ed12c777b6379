"""The audit trail: every transition and sensitive view appends a row chained to the request's previous one by
hash; this module writes those rows and takes them out of the database again: CSV and JSON Lines export, and verification of each request's hash chain.

Each RequestEvent carries `prev_hash` (the hash of the request's previous row) and `hash` (over its own fields and
`prev_hash`, see audit_row_hash). Verification recomputes both per request, in id order:

- a row whose stored hash differs from the recomputed one was **edited** after it was written;
- a row whose `prev_hash` is not the previous row's hash has a row **missing** (deleted) or **reordered** before it
  (also what an edit whose hash was recomputed looks like, one row later);
- a request whose status differs from its last recorded transition lost rows at the **end** of its chain.
"""

import csv
import hashlib
import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from django.contrib.auth.models import User
from django.db import transaction
from django.db.models import QuerySet

from elicitation.models import ActorType, Agent, ElicitationRequest, RequestEvent
from elicitation.queue import clock, prebuilt_sql

# --- writing the trail ----------------------------------------------------------------------------------------


def canonical_json(data: dict[str, Any]) -> bytes:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()


def audit_row_hash(event: RequestEvent) -> str:
    body = {
        "request": str(event.request_id),
        "kind": event.kind,
        "actor_type": event.actor_type,
        "actor_user": event.actor_user_id,
        "actor_agent": event.actor_agent_id,
        "from": event.from_status,
        "to": event.to_status,
        "detail": event.detail,
        "at": event.at.isoformat(),
    }
    return hashlib.sha256(event.prev_hash.encode() + canonical_json(body)).hexdigest()


def record_event(
    request: ElicitationRequest,
    kind: str,
    *,
    actor_user: User | None = None,
    actor_agent: Agent | None = None,
    from_status: str = "",
    to_status: str = "",
    detail: dict[str, Any] | None = None,
    prev_hash: str | None = None,
) -> RequestEvent:
    """Append an audit row chained to the request's previous one. Callers hold the request's row lock.

    `prev_hash` is the hash of the request's latest audit row when the caller read it under that lock
    (`transitions.lock_request` does, as `request.audit_head`), saving the lookup."""
    if prev_hash is None:
        prev_hash = (
            RequestEvent.objects.filter(request_id=request.pk)
            .order_by("-id")
            .values_list("hash", flat=True)
            .first()
        ) or ""
    event = new_event(
        request,
        kind,
        actor_user=actor_user,
        actor_agent=actor_agent,
        from_status=from_status,
        to_status=to_status,
        detail=detail,
        prev_hash=prev_hash,
    )
    prebuilt_sql.insert(event)
    return event


def new_event(
    request: ElicitationRequest,
    kind: str,
    *,
    prev_hash: str,
    actor_user: User | None = None,
    actor_agent: Agent | None = None,
    from_status: str = "",
    to_status: str = "",
    detail: dict[str, Any] | None = None,
) -> RequestEvent:
    """The audit row `record_event` writes, hashed and not yet saved (a create writes it with its request)."""
    actor_type = ActorType.REVIEWER if actor_user else ActorType.AGENT if actor_agent else ActorType.SYSTEM
    event = RequestEvent(
        request_id=request.pk,
        kind=kind,
        actor_type=actor_type,
        actor_user=actor_user,
        actor_agent=actor_agent,
        from_status=from_status,
        to_status=to_status,
        detail=detail or {},
        at=clock.now(),
        prev_hash=prev_hash,
    )
    event.hash = audit_row_hash(event)
    return event


def record_transition(
    request: ElicitationRequest,
    kind: str,
    *,
    previous: str,
    actor_user: User | None = None,
    actor_agent: Agent | None = None,
    detail: dict[str, Any] | None = None,
) -> RequestEvent:
    """The audit row for a transition just made: from `previous` to the row's new status, chained to the head
    read under the row lock."""
    return record_event(
        request,
        kind,
        actor_user=actor_user,
        actor_agent=actor_agent,
        from_status=previous,
        to_status=request.status,
        detail=detail,
        prev_hash=request.audit_head,
    )


def record_view(request: ElicitationRequest, *, user: User) -> None:
    """A reviewer looked at a request: an explicit audit call the page makes, never a side effect of a read."""
    with transaction.atomic():
        ElicitationRequest.objects.select_for_update().filter(pk=request.pk).first()
        record_event(request, "viewed", actor_user=user, from_status=request.status, to_status=request.status)


# --- reading it back ------------------------------------------------------------------------------------------

COLUMNS = [
    "id",
    "request_id",
    "at",
    "kind",
    "actor_type",
    "actor_user_id",
    "actor_user",
    "actor_agent_id",
    "actor_agent",
    "from_status",
    "to_status",
    "detail",
    "prev_hash",
    "hash",
]
CHUNK = 2000


def audit_events(since: datetime | None = None) -> QuerySet[RequestEvent]:
    events = RequestEvent.objects.select_related("actor_user", "actor_agent").order_by("id")
    if since is not None:
        events = events.filter(at__gte=since)
    return events


def export_row(event: RequestEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "request_id": str(event.request_id),
        "at": event.at.isoformat(),
        "kind": event.kind,
        "actor_type": event.actor_type,
        "actor_user_id": event.actor_user_id,
        "actor_user": event.actor_user.get_username() if event.actor_user else None,
        "actor_agent_id": event.actor_agent_id,
        "actor_agent": event.actor_agent.name if event.actor_agent else None,
        "from_status": event.from_status,
        "to_status": event.to_status,
        "detail": event.detail,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def export_rows(events: Iterable[RequestEvent]) -> Iterator[dict[str, Any]]:
    if isinstance(events, QuerySet):
        events = events.iterator(chunk_size=CHUNK)
    for event in events:
        yield export_row(event)


# --- writers: each yields text chunks, so the admin can stream them and the command can write them ---------------


def jsonl_chunks(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"


def _csv_cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        # Spreadsheet formula injection: agent-controlled text must never run as a formula when opened.
        return "'" + value
    return value


def csv_chunks(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({key: _csv_cell(row[key]) for key in COLUMNS})
        if buffer.tell() > 64_000:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


class TextSink(Protocol):
    def write(self, text: str, /) -> Any: ...


def write(rows: Iterable[dict[str, Any]], fmt: str, out: TextSink) -> int:
    """Write rows as `csv` or `jsonl`; returns how many were written."""
    count = 0

    def counted() -> Iterator[dict[str, Any]]:
        nonlocal count
        for row in rows:
            count += 1
            yield row

    chunks = csv_chunks(counted()) if fmt == "csv" else jsonl_chunks(counted())
    for chunk in chunks:
        out.write(chunk)
    return count


# --- verification ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainProblem:
    request_id: str
    event_id: int | None  # None when the problem is the chain's missing end
    problem: str  # "edited" | "missing-or-reordered" | "truncated"
    explanation: str

    def __str__(self) -> str:
        where = f"row {self.event_id}" if self.event_id is not None else "end of chain"
        return f"request {self.request_id} {where}: {self.problem}: {self.explanation}"


# Events that record a status change; the request's current status must be the last one's to_status.
_STATUS_KINDS_EXCLUDED = {"viewed", "url_flow_completed", "notified_urgent", "notified_deadline"}


def verify_chains(request_ids: Iterable[Any] | None = None) -> Iterator[ChainProblem]:
    """Recompute every request's chain (or only the given requests') and yield each problem found."""
    events = RequestEvent.objects.order_by("request_id", "id")
    if request_ids is not None:
        events = events.filter(request_id__in=list(request_ids))
    fields = (
        "pk",
        "request_id",
        "kind",
        "actor_type",
        "actor_user_id",
        "actor_agent_id",
        "from_status",
        "to_status",
        "detail",
        "at",
        "prev_hash",
        "hash",
    )
    current: Any = None
    expected_prev = ""
    last_status = ""
    ends: list[tuple[Any, str]] = []
    for event in events.only(*fields).iterator(chunk_size=CHUNK):
        if event.request_id != current:
            if current is not None:
                ends.append((current, last_status))
                if len(ends) >= CHUNK:
                    yield from _check_ends(ends)
                    ends = []
            current, expected_prev, last_status = event.request_id, "", ""
        if event.prev_hash != expected_prev:
            yield ChainProblem(
                str(event.request_id),
                event.pk,
                "missing-or-reordered",
                "prev_hash does not match the previous row: a row before it was deleted, reordered or rewritten",
            )
        if audit_row_hash(event) != event.hash:
            yield ChainProblem(
                str(event.request_id), event.pk, "edited", "the row's content no longer matches its hash"
            )
        expected_prev = event.hash
        if event.to_status and event.kind not in _STATUS_KINDS_EXCLUDED:
            last_status = event.to_status
    if current is not None:
        ends.append((current, last_status))
    yield from _check_ends(ends)


def _check_ends(ends: list[tuple[Any, str]]) -> Iterator[ChainProblem]:
    """One query per batch: each request's status must be where its last recorded transition left it."""
    statuses = dict(
        ElicitationRequest.objects.filter(pk__in=[request_id for request_id, _ in ends]).values_list(
            "pk", "status"
        )
    )
    for request_id, last_status in ends:
        status = statuses.get(request_id)
        if status is not None and last_status and status != last_status:
            yield ChainProblem(
                str(request_id),
                None,
                "truncated",
                f"the request is {status} but its last recorded transition is to {last_status}",
            )
