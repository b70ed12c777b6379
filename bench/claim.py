"""#2 Claim and respond: the reviewer API at 16 concurrent reviewers against raw SQL SKIP LOCKED, then a race.

Rate: 16 reviewers loop `POST claim-next` + `POST respond {decline}` over HTTP; the baseline is 16 psycopg
connections doing the same two transactions in SQL (claim with FOR UPDATE SKIP LOCKED, then complete), same
database, alternating rounds. Reported, not a target: a reviewer answers a request in seconds to minutes, so what
the API adds to SQL's two transactions (a session, the audit row, the agent's push) is felt by no one.

Correctness: 32 claimers (4 processes x 8 threads) call `services.claim_next` directly, not over HTTP, so
100,000 claims fit the time budget. Afterwards the database must show every request claimed exactly once,
by the claimer that reported it: zero double claims, zero lost requests.
"""

import asyncio
import json
import multiprocessing
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import psycopg

from bench import claimers as claimers_worker
from bench import fixtures
from bench.harness import RESULTS, Context, Figure, LoadResult, Report, Server, closed_loop, summary_ms

NAME = "claim"
TITLE = "Claim and respond through the reviewer API"
PREFIX = "bench-claim"
REVIEWERS = 16
RACE_PROCESSES, RACE_THREADS = 4, 8
# The race stops claiming after this long even if requests remain (they then count as never claimed).
RACE_SECONDS = 450.0  # 100,000 claims take ~400 s on this 2-core machine
# The rate limits stay on (their cost is measured) but set high enough never to bind during a benchmark.
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}


def run(ctx: Context) -> Report:

    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    rounds, seconds = (1, 3.0) if ctx.quick else (2, 6.0)
    race_total = 5_000 if ctx.quick else 100_000
    try:
        queue = fixtures.create_queue(PREFIX)
        agent = fixtures.create_agents(PREFIX, 1, queue)[0]
        reviewers = fixtures.create_reviewers(PREFIX, REVIEWERS, queue)
        ctx.progress.start("inserting pending requests")
        fixtures.bulk_requests(queue, agent.id, 40_000 if not ctx.quick else 10_000)
        with Server(env=UNBOUND_RATES) as server:
            api, raw = asyncio.run(measure(ctx, server, queue.pk, reviewers, rounds, seconds))
        ratio = api.rate / raw.rate if raw.rate else 0.0
        report.add(
            Figure(
                "API claim+respond rate, 16 reviewers",
                api.rate,
                "completions/s",
                "reported",
                None,
                raw.rate,
                "raw SQL SKIP LOCKED claim+complete",
                ratio,
            ),
            Figure(
                "API claim+respond p95 (both calls)",
                summary_ms(api.latencies)["p95_ms"],
                "ms",
                "reported",
                None,
                summary_ms(raw.latencies)["p95_ms"],
                "raw SQL",
                summary_ms(api.latencies)["p95_ms"] / summary_ms(raw.latencies)["p95_ms"],
            ),
            Figure("API claim+respond failed calls", api.errors, "", "0", api.errors == 0),
        )
        report.details["rate"] = {
            "api": {**summary_ms(api.latencies), "rate": round(api.rate, 1), "errors": api.errors},
            "raw": {**summary_ms(raw.latencies), "rate": round(raw.rate, 1), "errors": raw.errors},
            "error_samples": api.error_samples,
            "api_server_cpu_ms_per_completion": round(api.cpu_ms_per_call, 2),
        }
        fixtures.purge(PREFIX)

        race = run_race(ctx, race_total)
        report.add(
            Figure(
                "race: claims made by 32 claimers",
                race["claims"],
                "",
                f"≥ {race_total:,}",
                race["claims"] >= race_total,
            ),
            Figure("race: double claims", race["double_claims"], "", "0", race["double_claims"] == 0),
            Figure("race: lost requests", race["lost"], "", "0", race["lost"] == 0),
        )
        report.details["race"] = race
    finally:
        fixtures.purge(PREFIX)
    report.notes += [
        f"Rate: {rounds} alternating rounds of {seconds:.0f} s; each completion is two HTTP calls "
        "(claim-next, respond decline) or two SQL transactions; rate limits set high enough not to bind.",
        f"Race: {RACE_PROCESSES} processes x {RACE_THREADS} threads = 32 claimers calling services.claim_next "
        "directly (not HTTP, to fit the time budget), pushes switched off in the claimers (they leave after "
        f"COMMIT and cannot change who won); {race['claims']:,} claims in {race['seconds']:.0f} s "
        f"({race['claims'] / race['seconds']:.0f}/s). Checked in the database afterwards: each request claimed "
        "at most once (one `claimed` audit row), by the claimer that reported it; "
        + (
            f"{race['unclaimed_at_time_limit']:,} still pending when the {RACE_SECONDS:.0f} s limit stopped "
            "the claimers (no claimer had found the queue empty, so none is lost)."
            if race.get("unclaimed_at_time_limit")
            else "none left pending."
        ),
    ]
    return report


async def measure(
    ctx: Context,
    server: Server,
    queue_id: int,
    reviewers: list[fixtures.Credential],
    rounds: int,
    seconds: float,
) -> tuple[LoadResult, LoadResult]:
    from django.conf import settings

    from elicitation.models import ElicitationRequest

    table = ElicitationRequest._meta.db_table
    dsn = settings_dsn(settings.DATABASES["default"])
    limits = httpx.Limits(max_connections=REVIEWERS, max_keepalive_connections=REVIEWERS)
    async with httpx.AsyncClient(base_url=server.base_url, limits=limits, timeout=30) as client:
        raw_connections = [
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) for _ in range(REVIEWERS)
        ]

        async def api_call(worker: int) -> None:
            auth = {"Authorization": f"Bearer {reviewers[worker].key}"}
            claimed = await client.post(f"/api/v1/review/queues/{PREFIX}/claim-next", headers=auth)
            if claimed.status_code != 200:
                raise RuntimeError(f"claim-next {claimed.status_code} {claimed.text[:200]}")
            request_id = claimed.json()["id"]
            answered = await client.post(
                f"/api/v1/review/requests/{request_id}/respond", headers=auth, json={"action": "decline"}
            )
            if answered.status_code != 200:
                raise RuntimeError(f"respond {answered.status_code} {answered.text[:200]}")

        async def raw_call(worker: int) -> None:
            conn, user = raw_connections[worker], reviewers[worker].id
            row = await (
                await conn.execute(
                    f"""UPDATE {table} SET status = 'claimed', claimed_by_id = %(user)s, claimed_at = now(),
                        lease_expires_at = now() + interval '5 minutes', updated_at = now()
                    WHERE id = (SELECT id FROM {table} WHERE queue_id = %(queue)s AND status = 'pending'
                                AND deadline > now() ORDER BY priority DESC, created_at
                                LIMIT 1 FOR UPDATE SKIP LOCKED)
                    RETURNING id""",
                    {"user": user, "queue": queue_id},
                )
            ).fetchone()
            if row is None:
                raise RuntimeError("queue empty")
            await conn.execute(
                f"""UPDATE {table} SET status = 'completed', action = 'decline', claimed_by_id = NULL,
                    lease_expires_at = NULL, answered_by_id = %(user)s, closed_at = now(), updated_at = now()
                WHERE id = %(id)s AND status = 'claimed' AND claimed_by_id = %(user)s""",
                {"user": user, "id": row[0]},
            )

        try:
            ctx.progress.start("warm-up")
            await closed_loop(api_call, workers=REVIEWERS, max_calls=100, max_seconds=20)
            await closed_loop(raw_call, workers=REVIEWERS, max_calls=100, max_seconds=20)
            api, raw = LoadResult(), LoadResult()
            for index in range(rounds):
                for label, call, total in (("api", api_call, api), ("raw SQL", raw_call, raw)):
                    ctx.progress.start(f"round {index + 1}/{rounds} {label}")
                    part = await closed_loop(
                        call,
                        workers=REVIEWERS,
                        max_calls=15_000,
                        max_seconds=seconds,
                        progress=ctx.progress,
                        server_pid=server.pid,
                    )
                    total.latencies += part.latencies
                    total.errors += part.errors
                    total.error_samples += part.error_samples
                    total.seconds += part.seconds
                    total.server_cpu += part.server_cpu
        finally:
            for conn in raw_connections:
                await conn.close()
    return api, raw


def settings_dsn(database: dict[str, Any]) -> str:
    return (
        f"postgresql://{database['USER']}@{database['HOST'] or '127.0.0.1'}:{database['PORT'] or 5432}/"
        f"{database['NAME']}"
    )


# --- the race -----------------------------------------------------------------------------------------------------


def run_race(ctx: Context, total: int) -> dict[str, Any]:
    """`total` pending requests, 32 claimers until the queue is empty; then check the database."""
    from elicitation.models import ElicitationRequest, RequestEvent

    race_prefix = PREFIX + "-race"
    queue = fixtures.create_queue(race_prefix)
    agent = fixtures.create_agents(race_prefix, 1, queue)[0]
    claimers = fixtures.create_reviewers(race_prefix, RACE_PROCESSES * RACE_THREADS, queue)
    ctx.progress.start(f"inserting {total:,} pending requests")
    fixtures.bulk_requests(queue, agent.id, total)
    out_dir = RESULTS / "race"
    out_dir.mkdir(parents=True, exist_ok=True)
    spawn = multiprocessing.get_context("spawn")
    workers = []
    ctx.progress.start("racing 32 claimers", total)
    started = time.monotonic()
    for index in range(RACE_PROCESSES):
        users = [c.id for c in claimers[index * RACE_THREADS : (index + 1) * RACE_THREADS]]
        process = spawn.Process(
            target=claimers_worker.race_worker,
            args=(queue.pk, users, str(out_dir / f"{index}.json"), RACE_SECONDS),
        )
        process.start()
        workers.append(process)
    time_limit = started + RACE_SECONDS + 60
    vacuumed = time.monotonic()
    while any(p.is_alive() for p in workers) and time.monotonic() < time_limit:
        time.sleep(1)
        if time.monotonic() - vacuumed > 20:
            fixtures.vacuum()  # what autovacuum would do; it is off on this machine (see fixtures.vacuum)
            vacuumed = time.monotonic()
        done = ElicitationRequest.objects.filter(queue=queue, status="claimed").count()
        ctx.progress.update(done, f"{done / (time.monotonic() - started):.0f}/s")
    for process in workers:
        if process.is_alive():
            process.terminate()
        process.join(10)
    seconds = time.monotonic() - started

    reported: dict[str, int] = {}
    reported_twice = 0
    stopped_empty = 0
    for index in range(RACE_PROCESSES):
        path = Path(out_dir / f"{index}.json")
        data = json.loads(path.read_text()) if path.exists() else {"claimed": {}, "stopped": {}}
        stopped_empty += sum(1 for why in data["stopped"].values() if why == "empty")
        for user, ids in data["claimed"].items():
            for request_id in ids:
                if request_id in reported:
                    reported_twice += 1
                reported[request_id] = int(user)
        path.unlink(missing_ok=True)
    rows = dict(ElicitationRequest.objects.filter(queue=queue).values_list("id", "claimed_by_id"))
    claim_rows = Counter(
        RequestEvent.objects.filter(request__queue=queue, kind="claimed").values_list("request_id", flat=True)
    )
    reported_ids = {_uuid(request_id): user for request_id, user in reported.items()}
    # Lost: still pending although a claimer found the queue empty, or claimed in the database but never
    # handed to the claimer that holds it. Rows left when the time limit stopped everyone are not lost.
    never_claimed = sum(1 for holder in rows.values() if holder is None)
    lost_pending = never_claimed if stopped_empty else 0
    claimed_unreported = sum(
        1 for pk, holder in rows.items() if holder is not None and pk not in reported_ids
    )
    mismatched = sum(1 for pk, user in reported_ids.items() if rows.get(pk) != user)
    double_in_db = sum(1 for n in claim_rows.values() if n > 1)
    result = {
        "requests": len(rows),
        "claims": len(reported) + reported_twice,
        "seconds": round(seconds, 1),
        "double_claims": reported_twice + double_in_db + mismatched,
        "reported_twice": reported_twice,
        "claimed_twice_in_audit": double_in_db,
        "holder_mismatch": mismatched,
        "lost": lost_pending + claimed_unreported,
        "unclaimed_at_time_limit": 0 if stopped_empty else never_claimed,
        "claimers_that_found_the_queue_empty": stopped_empty,
        "claimed_unreported": claimed_unreported,
    }
    fixtures.purge(race_prefix)
    return result


def _uuid(text: str) -> Any:
    from uuid import UUID

    return UUID(text)
