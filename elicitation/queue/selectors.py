"""Non-trivial reads: queue listings with counts, claim-next candidates, the event feed. Reads never write: an
open request past its deadline is listed as overdue until the sweeper closes it."""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from django.db.models import (
    BooleanField,
    Count,
    DateTimeField,
    ExpressionWrapper,
    F,
    Min,
    Q,
    QuerySet,
    TextField,
    Value,
    Window,
    prefetch_related_objects,
)
from django.db.models.expressions import RawSQL
from django.db.models.functions import Cast, RowNumber

from elicitation.models import (
    OPEN_STATUSES,
    Agent,
    AgentEvent,
    ElicitationRequest,
    Queue,
    RequestEvent,
    Status,
)
from elicitation.queue import clock
from elicitation.queue.access import reviewer_queues

# --- open counts: the one definition of pending / claimed / past deadline -----------------------------------------
# The dashboard, the queue page's header, the metrics page, /metrics and the reviewer API all count through these
# filters, so a request is counted the same way (and once) on every page whatever roles the reviewer holds.


def pending_filter(prefix: str = "") -> Q:
    return Q(**{f"{prefix}status": Status.PENDING})


def claimed_filter(prefix: str = "") -> Q:
    return Q(**{f"{prefix}status": Status.CLAIMED})


def overdue_filter(now: datetime, prefix: str = "") -> Q:
    return Q(**{f"{prefix}status__in": OPEN_STATUSES, f"{prefix}deadline__lte": now})


@dataclass(frozen=True)
class QueueSummary:
    queue: Queue
    pending: int
    claimed: int
    overdue: int
    oldest_pending_at: datetime | None


def open_counts(queues: QuerySet[Queue], now: datetime | None = None) -> list[QueueSummary]:
    """Exact open counts of each queue, ordered by slug. Counted over the plain queue rows (`pk__in`): annotating a
    membership join instead would count a request once per role (member and supervisor) the reviewer has."""
    now = now or clock.now()
    rows = (
        Queue.objects.filter(pk__in=queues.values("pk"))
        .annotate(
            pending=Count("requests", filter=pending_filter("requests__")),
            claimed=Count("requests", filter=claimed_filter("requests__")),
            overdue=Count("requests", filter=overdue_filter(now, "requests__")),
            oldest_pending_at=Min("requests__created_at", filter=pending_filter("requests__")),
        )
        .order_by("slug")
    )
    return [
        QueueSummary(
            queue=q,
            pending=q.pending,
            claimed=q.claimed,
            overdue=q.overdue,
            oldest_pending_at=q.oldest_pending_at,
        )
        for q in rows
    ]


def queue_summaries(user: User) -> list[QueueSummary]:
    """The dashboard's and the reviewer API's rows: every queue the reviewer may see, each once."""
    return open_counts(reviewer_queues(user))


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


# Bound parameters per statement stay far under SQLite's limit (32,766; 999 before 3.32), and PostgreSQL plans a
# few hundred OR-ed pairs quickly.
IDS_PER_QUERY = 500
CURSORS_PER_QUERY = 400


def agent_events_after_many(
    cursors: list[tuple[int, int]], limit: int = 100
) -> dict[tuple[int, int], list[AgentEvent]]:
    """`agent_events_after` for many (agent id, cursor) pairs: each pair's first `limit` events past its cursor,
    in order, in one query per distinct cursor an agent is asked with (one in all, in a reconnect storm)."""
    rounds: list[dict[int, int]] = []  # each names an agent once, so the window below counts from its cursor
    for agent_id, cursor in sorted(set(cursors)):
        free = next((asked for asked in rounds if agent_id not in asked), None)
        if free is None:
            rounds.append(free := {})
        free[agent_id] = cursor
    found: dict[tuple[int, int], list[AgentEvent]] = {}
    for whole_round in rounds:
        pairs = list(whole_round.items())
        for start in range(0, len(pairs), CURSORS_PER_QUERY):
            found.update(_events_after_each(dict(pairs[start : start + CURSORS_PER_QUERY]), limit))
    return found


def _events_after_each(asked: dict[int, int], limit: int) -> dict[tuple[int, int], list[AgentEvent]]:
    """One query: for each agent (named once), its first `limit` events past its cursor."""
    after = Q()
    for agent_id, cursor in asked.items():
        after |= Q(agent_id=agent_id, seq__gt=cursor)
    rows = (
        AgentEvent.objects.filter(after)
        .annotate(place=Window(RowNumber(), partition_by=[F("agent_id")], order_by=F("seq").asc()))
        .filter(place__lte=limit)
        .order_by("agent_id", "seq")
    )
    found: dict[tuple[int, int], list[AgentEvent]] = {pair: [] for pair in asked.items()}
    for row in rows:
        found[(row.agent_id, asked[row.agent_id])].append(row)
    return found


def agents_requests_by_id(asked: list[tuple[int, str]]) -> dict[tuple[int, str], ElicitationRequest]:
    """Each (agent id, request id) pair whose request is that agent's, in one query per IDS_PER_QUERY ids;
    malformed and other agents' ids are simply absent."""
    valid: dict[UUID, str] = {}
    for _, raw in asked:
        try:
            valid[UUID(str(raw))] = raw
        except ValueError:
            continue
    rows: dict[str, ElicitationRequest] = {}
    ids = list(valid)
    for start in range(0, len(ids), IDS_PER_QUERY):
        chunk = ids[start : start + IDS_PER_QUERY]
        for row in ElicitationRequest.objects.select_related("queue", "agent", "claimed_by").filter(
            pk__in=chunk
        ):
            rows[valid[row.pk]] = row
    return {
        (agent_id, raw): rows[raw]
        for agent_id, raw in asked
        if raw in rows and rows[raw].agent_id == agent_id
    }


def closing_events(request_ids: list[str]) -> dict[str, AgentEvent]:
    """For each closed request, the outbox event that told its agent so (what a live push carried)."""
    ids = [UUID(request_id) for request_id in request_ids]
    found: dict[str, AgentEvent] = {}
    for start in range(0, len(ids), IDS_PER_QUERY):
        rows = AgentEvent.objects.filter(request_id__in=ids[start : start + IDS_PER_QUERY]).order_by("seq")
        found.update(
            (str(row.request_id), row) for row in rows if row.payload.get("status") not in OPEN_STATUSES
        )
    return found


def agent_event_head(agent_id: int, key_prefix: str) -> int | None:
    """The agent's latest cursor, or None once this key is revoked or rotated away."""
    return (
        Agent.objects.filter(pk=agent_id, key_prefix=key_prefix, revoked_at__isnull=True)
        .values_list("last_event_seq", flat=True)
        .first()
    )


def requests_still_open(request_ids: list[str]) -> set[str]:
    """Which of `request_ids` are still open, in one query: a waiter on any other id (closed, gone, malformed) is
    done. Asking for the open ones, not the closed ones, lets a vanished row end its wait."""
    return set(open_request_owners(request_ids))


def open_request_owners(request_ids: list[str]) -> dict[str, int]:
    """The still open ones of `request_ids`, each with its agent's id, in one query (malformed ids are skipped)."""
    ids = []
    for raw in request_ids:
        try:
            ids.append(UUID(str(raw)))
        except ValueError:
            continue  # never a request: not open
    rows = ElicitationRequest.objects.filter(pk__in=ids, status__in=OPEN_STATUSES).order_by()
    return {str(pk): agent_id for pk, agent_id in rows.values_list("pk", "agent_id")}


def agent_heads(agent_ids: list[int]) -> dict[int, int]:
    """Each agent's latest cursor, in one query (bumped in the transaction that writes the event)."""
    return dict(Agent.objects.filter(pk__in=agent_ids).order_by().values_list("pk", "last_event_seq"))


def agent_event_heads(keys: list[tuple[int, str]]) -> dict[tuple[int, str], int | None]:
    """`agent_event_head` for many (agent, key prefix) pairs in one query: None where that key was revoked or
    rotated away (or the agent is gone)."""
    rows = (
        Agent.objects.filter(pk__in={agent_id for agent_id, _ in keys}, revoked_at__isnull=True)
        .order_by()
        .values_list("pk", "key_prefix", "last_event_seq")
    )
    live = {(pk, prefix): head for pk, prefix, head in rows}
    return {key: live.get(key) for key in keys}


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
    """One queue's header counts through the same filters as `open_counts`, each a COUNT over at most
    COUNT_CAP + 1 index entries: below the cap the figures equal the dashboard's."""
    rows = ElicitationRequest.objects.filter(queue=queue)
    now = clock.now()

    def bounded(matching: QuerySet[ElicitationRequest]) -> int:
        return matching.order_by().values("pk")[: COUNT_CAP + 1].count()

    return QueueCounts(
        pending=bounded(rows.filter(pending_filter())),
        claimed=bounded(rows.filter(claimed_filter())),
        overdue=bounded(rows.filter(overdue_filter(now))),
    )


# --- history and search: every request a reviewer may see, newest first --------------------------------------------

# Context keys an MCP tool name may arrive under (the same keys the request page shows as "Tool").
TOOL_KEYS = ("tool", "toolName", "tool_name")
SEARCH_WORDS_MAX = 8
_REQUEST_TABLE = ElicitationRequest._meta.db_table
# The expression of the GIN index in migration 0004 (PostgreSQL only): the query must repeat it exactly.
SEARCH_DOCUMENT = (
    f'to_tsvector(\'simple\', "{_REQUEST_TABLE}"."message" || \' \' || "{_REQUEST_TABLE}"."context"::text)'
)


@dataclass(frozen=True)
class HistoryFilters:
    status: str = ""
    queue: Queue | None = None
    agent_id: int | None = None
    tool: str = ""
    answered_by: Any = None
    since: date | None = None
    until: date | None = None
    text: str = ""
    # The days of since/until are the reviewer's own (a request at 23:30 local belongs to that local day).
    zone: tzinfo = UTC


@dataclass(frozen=True)
class HistoryCursor:
    """A position in history order (-created_at, -id): the last row shown."""

    created_at: datetime
    id: UUID

    def encode(self) -> str:
        return f"{self.created_at.isoformat()}_{self.id}"

    @classmethod
    def decode(cls, text: str | None) -> "HistoryCursor | None":
        if not text:
            return None
        try:
            created_at, request_id = text.split("_")
            moment = datetime.fromisoformat(created_at)
            if moment.tzinfo is None:
                return None
            return cls(created_at=moment, id=UUID(request_id))
        except ValueError:
            return None


@dataclass(frozen=True)
class HistoryPage:
    rows: list[ElicitationRequest]
    next_cursor: HistoryCursor | None


def search_words(text: str) -> list[str]:
    """The words of a search box, as the index tokenises them (letters and digits), at most SEARCH_WORDS_MAX."""
    return re.findall(r"[^\W_]+", text.lower())[:SEARCH_WORDS_MAX]


def _tsquery(words: list[str]) -> str:
    """Every word as a prefix (`invoice` finds `invoices`); words are letters and digits only (search_words)."""
    return " & ".join(f"{word}:*" for word in words)


def _search_match(query: str) -> RawSQL:
    """The full-text match, served by the GIN index on SEARCH_DOCUMENT (PostgreSQL)."""
    # A constant expression; the words are a bound parameter (letters and digits only, see search_words).
    return RawSQL(f"{SEARCH_DOCUMENT} @@ to_tsquery('simple', %s)", [query], output_field=BooleanField())  # noqa: S611


def _matching_text(rows: QuerySet[ElicitationRequest], text: str) -> QuerySet[ElicitationRequest]:
    words = search_words(text)
    if not words:
        return rows
    if connection.vendor == "postgresql":
        return rows.filter(_search_match(_tsquery(words)))
    # The embedded fallback: substring matches over the message and the context's JSON text.
    rows = rows.annotate(context_text=Cast("context", TextField()))
    for word in words:
        rows = rows.filter(Q(message__icontains=word) | Q(context_text__icontains=word))
    return rows


def history_requests(user: User, filters: HistoryFilters) -> QuerySet[ElicitationRequest]:
    return _matching_text(_history_filtered(user, filters), filters.text)


def _history_filtered(user: User, filters: HistoryFilters) -> QuerySet[ElicitationRequest]:
    """Every filter but the search words."""
    rows = ElicitationRequest.objects.all()
    if not user.is_staff:
        rows = rows.filter(queue__in=reviewer_queues(user).values("pk"))
    if filters.queue is not None:
        rows = rows.filter(queue=filters.queue)
    if filters.status:
        rows = rows.filter(status=filters.status)
    if filters.agent_id is not None:
        rows = rows.filter(agent_id=filters.agent_id)
    if filters.tool:
        tool = Q()
        for key in TOOL_KEYS:
            tool |= Q(**{f"context__{key}": filters.tool})
        rows = rows.filter(tool)
    if filters.answered_by is not None:
        rows = rows.filter(answered_by=filters.answered_by)
    if filters.since is not None:
        rows = rows.filter(created_at__gte=datetime.combine(filters.since, time.min, tzinfo=filters.zone))
    if filters.until is not None:
        rows = rows.filter(
            created_at__lt=datetime.combine(filters.until + timedelta(days=1), time.min, tzinfo=filters.zone)
        )
    return rows


def _after(rows: QuerySet[ElicitationRequest], after: HistoryCursor | None) -> QuerySet[ElicitationRequest]:
    if after is None:
        return rows
    return rows.filter(Q(created_at__lt=after.created_at) | Q(created_at=after.created_at, id__lt=after.id))


NEWEST_FIRST = ("-created_at", "-id")
# A search on PostgreSQL picks its path by how common the words are (BENCHMARKS.md, reviewer):
# - a common word ("deploy" in every request) is found fastest by reading the newest rows in created_at order and
#   testing each: a page of matches comes within a few hundred rows, while the GIN index would hand over every
#   match (100,000 of them) to be sorted;
# - a rare word is found fastest through the GIN index, which hands over its few matches.
# The newest SEARCH_PROBE_ROWS rows are tested first; their share of matches says which path is cheaper.
SEARCH_PROBE_ROWS = 100
# Reading a row costs about 20 times what the GIN path pays per match: at 100,000 requests the walk wins down
# to about one row in ten matching, a page within about 500 rows.
SEARCH_WALK_MAX_ROWS = 500


def _walk_newest(rows: QuerySet[ElicitationRequest], query: str, window: int) -> tuple[list[UUID], int]:
    """The matches among the newest `window` rows, newest first, and how many rows were read."""
    newest = rows.order_by(*NEWEST_FIRST).values_list("id", "created_at", "message", "context")[:window]
    sql, params = newest.query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(
            # The inner query is Django's (bound parameters); the words are a bound parameter too.
            "SELECT w.id, w.created_at, "  # noqa: S608
            "to_tsvector('simple', w.message || ' ' || w.context::text) @@ to_tsquery('simple', %s) "
            f"FROM ({sql}) w",
            [query, *params],
        )
        read = cursor.fetchall()
    read.sort(key=lambda row: (row[1], row[0]), reverse=True)
    return [row[0] for row in read if row[2]], len(read)


def _search_ids(rows: QuerySet[ElicitationRequest], words: list[str], size: int) -> list[UUID]:
    """The ids of the first `size` matches in history order (PostgreSQL)."""
    query = _tsquery(words)
    found, read = _walk_newest(rows, query, SEARCH_PROBE_ROWS)
    if len(found) >= size or read < SEARCH_PROBE_ROWS:
        return found[:size]  # a full page, or every filtered row was read
    if found:
        # Rows needed for a page at the share of matches seen, with a margin; beyond the cap the GIN path wins.
        window = -(-size * SEARCH_PROBE_ROWS * 3 // (2 * len(found)))
        if window <= SEARCH_WALK_MAX_ROWS:
            found, read = _walk_newest(rows, query, window)
            if len(found) >= size or read < window:
                return found[:size]
    # Rare words: through the GIN index. Only ids are sorted (rows are fetched after), and the order is by an
    # expression: by the bare column the planner would walk the created_at index testing every row instead.
    matching = rows.filter(_search_match(query))
    by_expression = ExpressionWrapper(F("created_at") + Value(timedelta(0)), output_field=DateTimeField())
    return list(matching.order_by(by_expression.desc(), "-id").values_list("id", flat=True)[:size])


def history_page(
    user: User, filters: HistoryFilters, *, after: HistoryCursor | None = None, size: int = 50
) -> HistoryPage:
    """One page of history, newest first, by keyset on (created_at, id): the created_at index serves the order
    and the LIMIT, so the cost follows the page, not the number of requests."""
    related = ("queue", "agent", "answered_by", "claimed_by")
    words = search_words(filters.text)
    if connection.vendor == "postgresql" and words:
        ids = _search_ids(_after(_history_filtered(user, filters), after), words, size + 1)
        found = sorted(
            ElicitationRequest.objects.filter(pk__in=ids).select_related(*related),
            key=lambda row: (row.created_at, row.id),
            reverse=True,
        )
    else:
        rows = _after(history_requests(user, filters), after)
        found = list(rows.select_related(*related).order_by(*NEWEST_FIRST)[: size + 1])
    more = len(found) > size
    found = found[:size]
    return HistoryPage(
        rows=found,
        next_cursor=HistoryCursor(created_at=found[-1].created_at, id=found[-1].id)
        if more and found
        else None,
    )


def request_trail(request: ElicitationRequest) -> list[RequestEvent]:
    """The request's audit rows in order, with their actors, for the request page."""
    return list(request.events.select_related("actor_user", "actor_agent").order_by("id"))


def visible_agents(user: User) -> list[Agent]:
    agents = Agent.objects.order_by("name")
    if not user.is_staff:
        agents = agents.filter(queues__in=reviewer_queues(user).values("pk")).distinct()
    return list(agents)
