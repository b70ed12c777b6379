"""Non-trivial reads: queue listings with counts, claim-next candidates, the event feed. Reads never write: an
open request past its deadline is listed as overdue until the sweeper closes it."""

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import connection
from django.db.models import Count, Min, Q, QuerySet, prefetch_related_objects

from elicitation.models import OPEN_STATUSES, Agent, AgentEvent, ElicitationRequest, Queue, Status
from elicitation.queue import clock
from elicitation.queue.access import reviewer_queues


@dataclass(frozen=True)
class QueueSummary:
    queue: Queue
    pending: int
    claimed: int
    overdue: int
    oldest_pending_at: datetime | None


def queue_summaries(user: Any) -> list[QueueSummary]:
    now = clock.now()
    open_requests = Q(requests__status__in=OPEN_STATUSES)
    # Counted over the plain queue rows: annotating the membership join itself would count a request once per
    # role (member and supervisor) the reviewer has in its queue.
    queues = Queue.objects.filter(pk__in=reviewer_queues(user).values("pk")).annotate(
        pending=Count("requests", filter=Q(requests__status=Status.PENDING)),
        claimed=Count("requests", filter=Q(requests__status=Status.CLAIMED)),
        overdue=Count("requests", filter=open_requests & Q(requests__deadline__lte=now)),
        oldest_pending_at=Min("requests__created_at", filter=Q(requests__status=Status.PENDING)),
    )
    return [
        QueueSummary(
            queue=q,
            pending=q.pending,
            claimed=q.claimed,
            overdue=q.overdue,
            oldest_pending_at=q.oldest_pending_at,
        )
        for q in queues
    ]


def queue_requests(
    queue: Queue, *, statuses: tuple[str, ...] = OPEN_STATUSES, agent_id: int | None = None
) -> QuerySet[ElicitationRequest]:
    """A queue's requests in review order; the (queue, status, -priority, created_at) index serves it."""
    requests = ElicitationRequest.objects.filter(queue=queue, status__in=statuses).select_related(
        "agent", "claimed_by"
    )
    if agent_id is not None:
        requests = requests.filter(agent_id=agent_id)
    return requests.order_by("-priority", "created_at", "id")


def queue_requests_window(
    queue: Queue, *, statuses: tuple[str, ...], start: int, size: int
) -> list[ElicitationRequest]:
    """Rows start..start+size of `queue_requests`, read as one LIMITed index range per status, then merged.

    One query over an IN list of statuses cannot use the index order and sorts the whole queue (600 ms at
    100,000 pending, BENCHMARKS.md); this costs the page's depth, not the queue's length."""
    found: list[ElicitationRequest] = []
    for status in statuses:
        found += list(queue_requests(queue, statuses=(status,))[: start + size])
    found.sort(key=lambda r: (-r.priority, r.created_at, str(r.id)))
    return found[start : start + size]


def next_claimable_id(queue: Queue, now: datetime) -> UUID | None:
    """The most urgent pending request. On PostgreSQL rows other claimers hold are skipped, not waited on."""
    candidates = ElicitationRequest.objects.filter(
        queue=queue, status=Status.PENDING, deadline__gt=now
    ).order_by("-priority", "created_at")
    if connection.vendor == "postgresql":
        candidates = candidates.select_for_update(skip_locked=True)
    return candidates.values_list("pk", flat=True).first()


def agent_events_after(agent_id: int, cursor: int, limit: int = 100) -> list[AgentEvent]:
    return list(AgentEvent.objects.filter(agent_id=agent_id, seq__gt=cursor).order_by("seq")[:limit])


def agent_requests_by_id(agent_id: int, request_ids: list[str]) -> dict[str, ElicitationRequest]:
    """The agent's own requests among `request_ids`; malformed and other agents' ids are simply absent."""
    valid = []
    for raw in request_ids:
        try:
            valid.append(UUID(str(raw)))
        except ValueError:
            continue
    rows = ElicitationRequest.objects.select_related("queue", "agent", "claimed_by").filter(
        agent_id=agent_id, pk__in=valid
    )
    return {str(row.pk): row for row in rows}


def closing_events(agent_id: int, request_ids: list[str]) -> dict[str, AgentEvent]:
    """For each closed request, the outbox event that told the agent so (what a live push carried)."""
    ids = [UUID(request_id) for request_id in request_ids]
    rows = AgentEvent.objects.filter(agent_id=agent_id, request_id__in=ids).order_by("seq")
    return {str(row.request_id): row for row in rows if row.payload.get("status") not in OPEN_STATUSES}


def agent_event_head(agent_id: int, key_prefix: str) -> int | None:
    """The agent's latest cursor, or None once this key is revoked or rotated away."""
    return (
        Agent.objects.filter(pk=agent_id, key_prefix=key_prefix, revoked_at__isnull=True)
        .values_list("last_event_seq", flat=True)
        .first()
    )


def long_poll_cap(requested: int) -> int:
    return max(0, min(requested, settings.MAX_LONG_POLL_SECONDS))


def agent_requests(agent_id: int, which: str, limit: int = 100) -> list[ElicitationRequest]:
    rows = ElicitationRequest.objects.filter(agent_id=agent_id).select_related("queue")
    if which == "open":
        rows = rows.filter(status__in=OPEN_STATUSES)
    elif which == "closed":
        rows = rows.exclude(status__in=OPEN_STATUSES)
    return list(rows.order_by("-created_at")[:limit])


# --- the reviewer queue page: keyset (seek) pagination -------------------------------------------------------------


@dataclass(frozen=True)
class QueueCursor:
    """A position in review order (-priority, created_at, id): the last row shown, never an OFFSET."""

    priority: int
    created_at: datetime
    id: UUID

    def encode(self) -> str:
        return f"{self.priority}_{self.created_at.isoformat()}_{self.id}"

    @classmethod
    def decode(cls, text: str | None) -> "QueueCursor | None":
        if not text:
            return None
        try:
            priority, created_at, request_id = text.split("_")
            moment = datetime.fromisoformat(created_at)
            if moment.tzinfo is None:
                return None
            return cls(priority=int(priority), created_at=moment, id=UUID(request_id))
        except ValueError:
            return None  # a hand-edited cursor means "start over", not a 500

    @classmethod
    def of(cls, request: ElicitationRequest) -> "QueueCursor":
        return cls(priority=request.priority, created_at=request.created_at, id=request.id)


@dataclass(frozen=True)
class QueuePage:
    rows: list[ElicitationRequest]
    next_cursor: QueueCursor | None
    previous_cursor: QueueCursor | None


def _review_key(request: ElicitationRequest) -> tuple[int, datetime, str]:
    return (-request.priority, request.created_at, str(request.id))


def _seek(
    rows: QuerySet[ElicitationRequest], cursor: QueueCursor | None, forward: bool, size: int
) -> list[ElicitationRequest]:
    """Rows of one status strictly after (or before) the cursor, as two index range scans, each LIMITed.

    Splitting "same priority, later" from "lower priority" keeps both scans on the
    (queue, status, -priority, created_at) index; one OR-ed filter would read the queue from its head.
    """
    order = ("-priority", "created_at", "id") if forward else ("priority", "-created_at", "-id")
    if cursor is None:
        return list(rows.order_by(*order)[:size])
    # A range on created_at minus the cursor's own tie: an OR of two ranges would make SQLite sort the result.
    if forward:
        same_priority = rows.filter(priority=cursor.priority, created_at__gte=cursor.created_at).exclude(
            created_at=cursor.created_at, id__lte=cursor.id
        )
    else:
        same_priority = rows.filter(priority=cursor.priority, created_at__lte=cursor.created_at).exclude(
            created_at=cursor.created_at, id__gte=cursor.id
        )
    other_priority = (
        rows.filter(priority__lt=cursor.priority) if forward else rows.filter(priority__gt=cursor.priority)
    )
    found = list(same_priority.order_by(*order)[:size])
    if len(found) < size:
        found += list(other_priority.order_by(*order)[: size - len(found)])
    return found


def queue_page(
    queue: Queue,
    *,
    statuses: tuple[str, ...] = OPEN_STATUSES,
    agent_id: int | None = None,
    after: QueueCursor | None = None,
    before: QueueCursor | None = None,
    size: int = 50,
) -> QueuePage:
    """One page of a queue in review order. Each status is sought separately (an IN list cannot use the
    index order), then merged; cost grows with the page size, not with the queue's length."""
    # Paging back seeks backwards from the first row shown, then flips the rows into review order.
    forward = before is None or after is not None
    cursor = after if forward else before
    found: list[ElicitationRequest] = []
    for status in statuses:
        # No joins here: with them SQLite's planner scans agents first and sorts the whole queue.
        rows = ElicitationRequest.objects.filter(queue=queue, status=status)
        if agent_id is not None:
            rows = rows.filter(agent_id=agent_id)
        found += _seek(rows, cursor, forward, size + 1)
    found.sort(key=_review_key, reverse=not forward)
    more = len(found) > size
    found = found[:size]
    if not forward:
        found.reverse()
    prefetch_related_objects(found, "agent", "claimed_by")
    if not found:
        return QueuePage(rows=[], next_cursor=None, previous_cursor=None)
    has_next = more if forward else True
    has_previous = (cursor is not None) if forward else more
    return QueuePage(
        rows=found,
        next_cursor=QueueCursor.of(found[-1]) if has_next else None,
        previous_cursor=QueueCursor.of(found[0]) if has_previous else None,
    )


# The queue page counts this far, then says "1,000+": its cost must follow the page, not the queue's length
# (an exact COUNT of 100,000 pending rows is a scan of them all; BENCHMARKS.md #5). Exact figures are on the
# dashboard and /metrics.
COUNT_CAP = 1000


def count_label(count: int) -> str:
    return f"{COUNT_CAP:,}+" if count > COUNT_CAP else f"{count:,}"


@dataclass(frozen=True)
class QueueCounts:
    """Counts up to COUNT_CAP + 1; `labels` is what the page shows."""

    pending: int
    claimed: int
    overdue: int

    @property
    def labels(self) -> dict[str, str]:
        return {
            "pending": count_label(self.pending),
            "claimed": count_label(self.claimed),
            "overdue": count_label(self.overdue),
        }


def queue_counts(queue: Queue) -> QueueCounts:
    """One queue's header counts, each a COUNT over at most COUNT_CAP + 1 index entries."""
    open_rows = ElicitationRequest.objects.filter(queue=queue)

    def bounded(rows: QuerySet[ElicitationRequest]) -> int:
        return rows.order_by().values("pk")[: COUNT_CAP + 1].count()

    return QueueCounts(
        pending=bounded(open_rows.filter(status=Status.PENDING)),
        claimed=bounded(open_rows.filter(status=Status.CLAIMED)),
        overdue=bounded(open_rows.filter(status__in=OPEN_STATUSES, deadline__lte=clock.now())),
    )
