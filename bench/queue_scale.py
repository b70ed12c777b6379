"""#5 Queue at scale: the queue page, the reviewer API listing and claim-next with 100,000 pending vs 1,000.

Two queues exist side by side (1,000 and 100,000 pending, built with one INSERT ... SELECT each); one
reviewer's requests alternate between them so noise hits both. Target: p95 ≤ 50 ms at 100,000 and a
100k/1k p95 ratio ≤ 1.5, i.e. the cost grows with the page, not with the queue. EXPLAIN ANALYZE of the
selectors' SQL confirms the (queue, status, -priority, created_at) index serves them.
"""

import asyncio
import re
import time
from typing import Any

import httpx

from bench import fixtures
from bench.harness import Context, Figure, Report, Server, percentile, summary_ms

NAME = "queue"
TITLE = "Queue at scale: 100,000 pending vs 1,000"
PREFIX = "bench-queue"
SMALL, LARGE = 1_000, 100_000
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}
P95_TARGET_MS, RATIO_TARGET = 50.0, 1.5


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    large = 20_000 if ctx.quick else LARGE
    rounds = 20 if ctx.quick else 60
    fixtures.purge(PREFIX)
    try:
        small_q = fixtures.create_queue(f"{PREFIX}-small")
        large_q = fixtures.create_queue(f"{PREFIX}-large")
        agent = fixtures.create_agents(PREFIX, 1, small_q)[0]
        reviewer = fixtures.create_reviewers(PREFIX, 1, small_q)[0]
        large_q.members.add(reviewer.id)
        ctx.progress.start(f"inserting {SMALL:,} + {large:,} pending requests")
        fixtures.bulk_requests(small_q, agent.id, SMALL)
        fixtures.bulk_requests(large_q, agent.id, large)
        fixtures.vacuum()  # as autovacuum would have by then: visibility map set, statistics fresh
        plans = explain(large_q)
        cookie = fixtures.login_session(reviewer.id)
        with Server(env=UNBOUND_RATES) as server:
            timings = asyncio.run(
                measure(ctx, server, [small_q.slug, large_q.slug], reviewer.key, cookie, rounds)
            )
    finally:
        fixtures.purge(PREFIX)

    for what, label in (
        ("page", "queue page /queues/<slug>/"),
        ("api", "reviewer API list"),
        ("claim", "claim-next"),
    ):
        small = percentile(timings[what][small_q.slug], 95) * 1000
        big = percentile(timings[what][large_q.slug], 95) * 1000
        ratio = big / small
        report.add(
            Figure(
                f"{label} p95 at {large:,} pending",
                big,
                "ms",
                f"≤ {P95_TARGET_MS:.0f} ms and ≤ {RATIO_TARGET}x the {SMALL:,} queue",
                big <= P95_TARGET_MS and ratio <= RATIO_TARGET,
                small,
                f"same, {SMALL:,} pending",
                ratio,
            )
        )
    seq_scans = [name for name, plan in plans.items() if rows_scanned(plan) >= WHOLE_TABLE_ROWS]
    report.add(
        Figure(
            "queue queries reading the whole request table (EXPLAIN ANALYZE: a sequential scan past 10,000 rows)",
            len(seq_scans),
            f"of {len(plans)}",
            "0",
            not seq_scans,
        )
    )
    report.details = {
        "timings": {
            what: {slug: summary_ms(values) for slug, values in timings[what].items()}
            for what in ("page", "api", "claim")
        },
        "errors": timings["errors"],
        "plans": {name: plan[:1500] for name, plan in plans.items()},
    }
    report.notes.append(
        f"{rounds} rounds, one client, each round: page, API list, claim-next on the small queue then the large. "
        "claim-next answers with the claimed request; claims come off the top of the queue."
    )
    return report


async def measure(
    ctx: Context, server: Server, slugs: list[str], token: str, cookie: str, rounds: int
) -> dict[str, Any]:
    timings: dict[str, Any] = {what: {slug: [] for slug in slugs} for what in ("page", "api", "claim")}
    timings["errors"] = []
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(
        base_url=server.base_url, timeout=30, cookies={"sessionid": cookie}
    ) as client:

        async def timed(what: str, slug: str, method: str, url: str, headers: dict[str, str]) -> None:
            began = time.monotonic()
            response = await client.request(method, url, headers=headers)
            elapsed = time.monotonic() - began
            if response.status_code != 200:
                timings["errors"].append(f"{what} {slug} {response.status_code} {response.text[:120]}")
                return
            timings[what][slug].append(elapsed)

        calls = [
            ("page", "GET", "/queues/{slug}/", {}),
            ("api", "GET", "/api/v1/review/queues/{slug}/requests", auth),
            ("claim", "POST", "/api/v1/review/queues/{slug}/claim-next", auth),
        ]
        ctx.progress.start("warm-up")
        for slug in slugs:
            for _what, method, url, headers in calls:
                for _ in range(3):
                    await client.request(method, url.format(slug=slug), headers=headers)
        ctx.progress.start("timing", rounds)
        for index in range(rounds):
            for slug in slugs:
                for what, method, url, headers in calls:
                    await timed(what, slug, method, url.format(slug=slug), headers)
            ctx.progress.update(index + 1)
    return timings


def explain(queue: Any) -> dict[str, str]:
    """EXPLAIN ANALYZE of the selectors behind the page, the API listing and claim-next, on the large queue."""
    from django.db import connection, transaction
    from django.test.utils import CaptureQueriesContext

    from elicitation.models import OPEN_STATUSES, ElicitationRequest
    from elicitation.queue import clock, selectors

    plans: dict[str, str] = {}
    for status in OPEN_STATUSES:
        rows = ElicitationRequest.objects.filter(queue=queue, status=status).order_by(
            "-priority", "created_at", "id"
        )
        plans[f"queue page seek ({status})"] = rows[:51].explain(analyze=True)
    for status in OPEN_STATUSES:
        window = selectors.queue_requests(queue, statuses=(status,))[:50]
        plans[f"API listing window ({status})"] = window.explain(analyze=True)
    # The page's header counts, exactly as the page runs them (each bounded at selectors.COUNT_CAP + 1 rows).
    with CaptureQueriesContext(connection) as counted:
        selectors.queue_counts(queue)
    for name, query in zip(("pending", "claimed", "overdue"), counted.captured_queries, strict=True):
        plans[f"header count ({name})"] = explain_sql(query["sql"])
    with transaction.atomic():
        candidates = (
            ElicitationRequest.objects.filter(queue=queue, status="pending", deadline__gt=clock.now())
            .order_by("-priority", "created_at")
            .select_for_update(skip_locked=True)
            .values_list("pk", flat=True)[:1]
        )
        plans["claim-next candidate"] = candidates.explain(analyze=True)
    return plans


# A sequential scan that stops after a LIMIT (PostgreSQL's choice when most rows match) is bounded; one that
# reads a tenth of the 100,000 rows or more is reading the table.
WHOLE_TABLE_ROWS = LARGE // 10
SEQ_SCAN_ROWS = re.compile(
    r"Seq Scan on elicitation_elicitationrequest .*actual time=\S+ rows=(\d+) loops=(\d+)"
)


def rows_scanned(plan: str) -> int:
    """Rows the plan's sequential scans of the request table actually produced (EXPLAIN ANALYZE)."""
    return sum(int(rows) * int(loops) for rows, loops in SEQ_SCAN_ROWS.findall(plan))


def explain_sql(sql: str) -> str:
    """EXPLAIN ANALYZE of a statement as Django logged it (parameters already in place)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN ANALYZE {sql}")
        return "\n".join(row[0] for row in cursor.fetchall())
