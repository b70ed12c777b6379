"""#7 Reviewer workspace: a keyboard-only reviewer in Chromium clears pending yes/no approvals, and history search
at 100,000 requests vs 1,000.

The loop: the reviewer opens the queue page and presses `n`; on each request `y` (Yes) then `a` (Accept); the next
request opens by itself, claimed. Reported: keystrokes per answer (target ≤ 3), seconds from pressing `a` to the
next request ready for input (its Yes/No enabled and held by the reviewer; p50, p95), and that every result
reached the agent as `{"action": "accept", "content": {"approve": true}}`.

History: two queues of 1,000 and 100,000 requests (one INSERT ... SELECT each, every message made distinct), one
reviewer per queue; `/history/?q=<word>` for a word in a single row, alternated between the two. On PostgreSQL a
probe of the newest 100 rows finds no match, so the GIN full-text index of migration 0004 serves it (a common word
is served by reading the newest rows instead: selectors.SEARCH_PROBE_ROWS). Target: p95 ≤ 100 ms at 100,000 and a
ratio ≤ 1.5.

The loop's answer is rendered inline: its POST answers, claims the next request and returns that request's page
(request.js sends `inline=1`), so no redirect round trip; the "of which" rows split the time by navigation timing.
"""

import time
from typing import Any

import httpx
from django.db import connection

from bench import fixtures
from bench.harness import Context, Figure, Report, Server, percentile

NAME = "reviewer"
TITLE = "Reviewer workspace: keyboard loop and history search"
PREFIX = "bench-reviewer"
CHROMIUM = "/usr/bin/chromium"
APPROVALS = 50
SMALL, LARGE = 1_000, 100_000
KEYS_TARGET, READY_P95_TARGET_MS = 3, 300.0
SEARCH_P95_TARGET_MS, RATIO_TARGET = 100.0, 1.5
SERVER_START_SECONDS = 120.0
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    try:
        server = Server("daphne", env={**UNBOUND_RATES, "PERIODIC_SWEEPS_IN_PROCESS": "false"})
        # A shared, loaded machine can take longer than the harness's default to import Django.
        server.start(timeout=SERVER_START_SECONDS)
        try:
            keyboard_loop(ctx, report, server, 10 if ctx.quick else APPROVALS)
            fixtures.purge(PREFIX)
            history_search(ctx, report, server, 20_000 if ctx.quick else LARGE, 20 if ctx.quick else 60)
        finally:
            server.stop()
    finally:
        fixtures.purge(PREFIX)
    return report


def keyboard_loop(ctx: Context, report: Report, server: Server, count: int) -> None:
    from playwright.sync_api import sync_playwright

    queue = fixtures.create_queue(f"{PREFIX}-loop")
    agent = fixtures.create_agents(PREFIX, 1, queue)[0]
    reviewer = fixtures.create_reviewers(PREFIX, 1, queue)[0]
    cookie = fixtures.login_session(reviewer.id)
    headers = {"Authorization": f"Bearer {agent.key}"}
    ctx.progress.start(f"posting {count} yes/no approvals")
    ids = []
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as client:
        for number in range(count):
            body = {
                **fixtures.CREATE_BODY,
                "queue": queue.slug,
                "message": f"Deploy build {number} to production?",
            }
            response = client.post("/api/v1/requests", json=body)
            response.raise_for_status()
            ids.append(response.json()["id"])
    ready_seconds: list[float] = []
    phases: list[dict[str, float]] = []
    keys = 0
    ctx.progress.start(f"clearing {count} approvals by keyboard in Chromium")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        context = browser.new_context(base_url=server.base_url, viewport={"width": 1440, "height": 900})
        context.add_cookies([{"name": "sessionid", "value": cookie, "url": server.base_url}])
        page = context.new_page()
        page.goto(f"/queues/{queue.slug}/")
        page.wait_for_selector("body[data-live=on]")
        page.keyboard.press("n")
        keys += 1
        wait_ready(page, "")
        for _ in range(count):
            answered = page.get_attribute("#request-page", "data-request-id") or ""
            page.keyboard.press("y")
            started = time.perf_counter()
            page.keyboard.press("a")
            keys += 2
            if not wait_ready(page, answered):
                break
            ready_seconds.append(time.perf_counter() - started)
            phases.append(page.evaluate(PHASES_JS))
        browser.close()
    correct = 0
    with httpx.Client(base_url=server.base_url, headers=headers, timeout=30) as client:
        for request_id in ids:
            result = client.get(f"/api/v1/requests/{request_id}").json().get("result")
            correct += result == {"action": "accept", "content": {"approve": True}}
    per_answer = keys / count
    p50 = percentile(ready_seconds, 50) * 1000 if ready_seconds else float("nan")
    p95 = percentile(ready_seconds, 95) * 1000 if ready_seconds else float("nan")
    report.add(
        Figure(
            "keystrokes per yes/no answer (n once, then y a)",
            per_answer,
            "keys",
            f"≤ {KEYS_TARGET}",
            per_answer <= KEYS_TARGET,
        ),
        Figure("answer sent → next request ready p50", p50, "ms", "-", None),
        *(
            Figure(f"of which {label} p50", phase_p50(phases, key), "ms", "-", None)
            for key, label in PHASE_LABELS
        ),
        Figure(
            f"answer sent → next request ready p95 ({connection.vendor})",
            p95,
            "ms",
            f"≤ {READY_P95_TARGET_MS:.0f} ms",
            p95 <= READY_P95_TARGET_MS,
        ),
        Figure(
            "results that reached the agent correctly", correct, f"of {count}", f"{count}", correct == count
        ),
    )


# Where the time of one answer goes, from the landing page's navigation timing: the answer POST with its claim of
# the next request (up to the redirect), the next page's response, and parsing until its scripts have run.
PHASES_JS = """(() => {
  const n = performance.getEntriesByType('navigation')[0];
  // Redirected (PRG): the POST ends at redirectEnd. Rendered inline: the POST's answer is the page's first byte.
  const posted = n.redirectEnd || n.responseStart;
  return {post: posted - n.startTime, page: n.responseEnd - posted,
          ready: n.domContentLoadedEventEnd - n.responseEnd};
})()"""


PHASE_LABELS = (
    ("post", "answer POST + claim of the next (+ its page when inline)"),
    ("page", "next page response after the POST"),
    ("ready", "next page parse and scripts"),
)


def phase_p50(phases: list[dict[str, float]], key: str) -> float:
    return percentile([phase[key] for phase in phases], 50) if phases else float("nan")


def wait_ready(page: Any, answered: str) -> bool:
    """The next request is ready for input: a page other than the one just answered holds the claim and its Yes
    is enabled (the answered page itself matches until it unloads, so it is excluded). False at the end."""
    page.wait_for_function(
        """answered => {
          const next = document.querySelector('#request-page[data-mine=true]');
          if (next && next.dataset.requestId !== answered) return next.querySelector('input[value=true]:not([disabled])');
          return location.pathname.startsWith('/queues/');
        }""",
        arg=answered,
    )
    return "/requests/" in page.url


def history_search(ctx: Context, report: Report, server: Server, large: int, rounds: int) -> None:
    small_q = fixtures.create_queue(f"{PREFIX}-small")
    large_q = fixtures.create_queue(f"{PREFIX}-large")
    agent = fixtures.create_agents(PREFIX, 1, small_q)[0]
    large_q.agents.add(agent.id)
    small_reviewer = fixtures.create_reviewers(f"{PREFIX}-s", 1, small_q)[0]
    large_reviewer = fixtures.create_reviewers(f"{PREFIX}-l", 1, large_q)[0]
    ctx.progress.start(f"inserting {SMALL:,} + {large:,} requests")
    fixtures.bulk_requests(small_q, agent.id, SMALL)
    fixtures.bulk_requests(large_q, agent.id, large)
    table = "elicitation_elicitationrequest"
    with connection.cursor() as cursor:
        # Distinct messages: a word ("ref" + 10 hex digits) found in exactly one request.
        cursor.execute(
            f"UPDATE {table} SET message = message || ' ref' || substr(md5(id::text), 1, 10) "
            "WHERE queue_id IN (%s, %s)",
            [small_q.pk, large_q.pk],
        )
    fixtures.vacuum()
    words = {}
    for queue in (small_q, large_q):
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT message FROM {table} WHERE queue_id = %s ORDER BY created_at LIMIT 1 OFFSET %s",
                [queue.pk, SMALL // 2],
            )
            words[queue.slug] = cursor.fetchone()[0].rsplit(" ", 1)[1]
    sessions = {
        small_q.slug: fixtures.login_session(small_reviewer.id),
        large_q.slug: fixtures.login_session(large_reviewer.id),
    }
    timings: dict[str, list[float]] = {small_q.slug: [], large_q.slug: []}
    ctx.progress.start(f"{rounds} history searches per queue")
    with httpx.Client(base_url=server.base_url, timeout=30, follow_redirects=False) as client:
        for round_number in range(rounds + 5):
            for slug in (small_q.slug, large_q.slug):
                started = time.perf_counter()
                response = client.get(
                    "/history/", params={"q": words[slug]}, headers={"Cookie": f"sessionid={sessions[slug]}"}
                )
                elapsed = time.perf_counter() - started
                found = response.text.count('class="request-row"')
                assert response.status_code == 200 and found == 1, (response.status_code, found, words[slug])
                if round_number >= 5:  # warm-up
                    timings[slug].append(elapsed)
    small = percentile(timings[small_q.slug], 95) * 1000
    big = percentile(timings[large_q.slug], 95) * 1000
    ratio = big / small
    report.add(
        Figure(
            f"history search p95 at {large:,} requests ({connection.vendor})",
            big,
            "ms",
            f"≤ {SEARCH_P95_TARGET_MS:.0f} ms and ≤ {RATIO_TARGET}x the {SMALL:,} history",
            big <= SEARCH_P95_TARGET_MS and ratio <= RATIO_TARGET,
            small,
            f"same, {SMALL:,} requests",
            ratio,
        )
    )
