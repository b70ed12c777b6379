"""#R Reach: from a request's arrival to the reviewer being told, per channel.

A daphne server and a Celery worker (services deployment: PostgreSQL, Redis broker) with one queue whose rules
post every arrival to a Slack channel and e-mail its member. Slack's Web API is a stand-in HTTP server on
loopback (the real slack_sdk client talks to it) and the mail server a real SMTP server on loopback (aiosmtpd),
both in this process, so "posted" and "accepted" are timed on the same clock as the agent's POST. Requests
arrive at 10/s; latency = Slack post received (or SMTP DATA accepted) - the agent's 201.

Browser: headless Chromium on the queue page with the tab hidden and notifications granted; latency = the page
constructing the desktop Notification - the agent's 201. The page polls `/reach/waiting` every
BROWSER_POLL_SECONDS (set to 1 s here; 5 s by default), which bounds this figure.
"""

import asyncio
import json
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from bench import fixtures
from bench.harness import RESULTS, Context, Figure, Report, Server, bench_env, free_port, paced, percentile

NAME = "reach"
TITLE = "Reach: arrival to Slack post, e-mail and browser notification"
PREFIX = "bench-reach"
RATE = 10.0
CHROMIUM = "/usr/bin/chromium"
REQUEST_ID = re.compile(r"/requests/([0-9a-f-]{36})/")


class Arrivals:
    """Monotonic times by request id, written from the servers' threads."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.lock = threading.Lock()

    def mark(self, request_id: str) -> None:
        with self.lock:
            self.times.setdefault(request_id, time.monotonic())


class _Mail:
    def __init__(self, seen: Arrivals) -> None:
        self.seen = seen

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        found = REQUEST_ID.search((envelope.original_content or b"").decode(errors="replace"))
        if found:
            self.seen.mark(found.group(1))
        return "250 OK"


def slack_server(seen: Arrivals) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.endswith("chat.postMessage"):
                found = REQUEST_ID.search(body.decode(errors="replace"))
                if found:
                    seen.mark(found.group(1))
            reply = json.dumps({"ok": True, "channel": "C1", "ts": f"{time.time():.6f}"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    return ThreadingHTTPServer(("127.0.0.1", 0), Handler)


def run(ctx: Context) -> Report:
    from django.contrib.auth import get_user_model

    from elicitation.models import Channel, ReachRule

    report = Report(NAME, TITLE)
    count = 30 if ctx.quick else 200
    fixtures.purge(PREFIX)
    slack_seen, mail_seen = Arrivals(), Arrivals()
    slack = slack_server(slack_seen)
    threading.Thread(target=slack.serve_forever, daemon=True).start()
    smtp_port = free_port()
    smtp = Controller(_Mail(mail_seen), hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    env = {
        "SLACK_API_URL": f"http://127.0.0.1:{slack.server_address[1]}/api/",
        "SLACK_BOT_TOKEN": "xoxb-bench",
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        "BROWSER_POLL_SECONDS": "1",
        "AGENT_RATE": "100000000/min",
    }
    worker: subprocess.Popen[bytes] | None = None
    try:
        queue = fixtures.create_queue(PREFIX)
        agent = fixtures.create_agents(PREFIX, 1, queue)[0]
        reviewer = fixtures.create_reviewers(PREFIX, 1, queue)[0]
        get_user_model().objects.filter(pk=reviewer.id).update(email="reviewer@bench.example")
        ReachRule.objects.create(
            queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1"
        )
        ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")
        worker = start_worker(env)
        with Server("daphne", env=env) as server:
            ctx.progress.start(f"{count} arrivals at {RATE:.0f}/s")
            arrived = asyncio.run(post_requests(server.base_url, agent.key, count, RATE))
            wait_for(
                lambda: len(slack_seen.times) >= len(arrived) and len(mail_seen.times) >= len(arrived), 60
            )
            browser = measure_browser(ctx, server.base_url, agent.key, reviewer.id, 5 if ctx.quick else 15)
    finally:
        if worker is not None:
            worker.terminate()
            worker.wait(timeout=20)
        slack.shutdown()
        smtp.stop()
        fixtures.purge(PREFIX)
    ctx.progress.finish()

    def latencies(seen: Arrivals) -> list[float]:
        return [seen.times[i] - t for i, t in arrived.items() if i in seen.times]

    slack_lat, mail_lat = latencies(slack_seen), latencies(mail_seen)
    for label, values in (("Slack post", slack_lat), ("e-mail accepted", mail_lat)):
        p50, p95 = percentile(values, 50) * 1000, percentile(values, 95) * 1000
        report.add(
            Figure(f"arrival → {label} p50, 10 arrivals/s", p50, "ms", "reported", None),
            Figure(f"arrival → {label} p95, 10 arrivals/s", p95, "ms", "≤ 1,000 ms", p95 <= 1000),
            Figure(
                f"arrival → {label}: missing",
                len(arrived) - len(values),
                "",
                "0",
                len(values) == len(arrived),
            ),
        )
    if browser:
        report.add(
            Figure(
                "arrival → browser notification p50 (poll 1 s)",
                percentile(browser, 50) * 1000,
                "ms",
                "reported",
                None,
            ),
            Figure(
                "arrival → browser notification max (poll 1 s)",
                max(browser) * 1000,
                "ms",
                "≤ 2,000 ms",
                max(browser) <= 2.0,
            ),
        )
    else:
        report.notes.append(f"browser figure not measured: {CHROMIUM} or Playwright missing")
    report.details = {
        "arrivals": len(arrived),
        "slack": len(slack_lat),
        "email": len(mail_lat),
        "browser": len(browser),
    }
    report.notes.append(
        "One daphne process and one Celery worker (4 threads) on PostgreSQL and Redis; Slack stand-in and SMTP "
        "server in the load generator's process; everything on the same 2 cores."
    )
    return report


def start_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    RESULTS.mkdir(parents=True, exist_ok=True)
    log = (RESULTS / "reach-worker.log").open("wb")
    command = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "reviewhub",
        "worker",
        "-P",
        "threads",
        "-c",
        "4",
        "-l",
        "warning",
    ]
    worker = subprocess.Popen(command, env=bench_env(**env), stdout=log, stderr=subprocess.STDOUT)
    time.sleep(4)  # the worker connects to the broker and starts consuming
    return worker


def wait_for(condition: Any, seconds: float) -> None:
    give_up = time.monotonic() + seconds
    while not condition() and time.monotonic() < give_up:
        time.sleep(0.05)


async def post_requests(base_url: str, key: str, count: int, rate: float) -> dict[str, float]:
    arrived: dict[str, float] = {}
    body = {**fixtures.CREATE_BODY, "queue": PREFIX}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as client:

        async def create(index: int) -> None:
            response = await client.post(
                "/api/v1/requests", json=body, headers={"Authorization": f"Bearer {key}"}
            )
            if response.status_code == 201:
                arrived[response.json()["id"]] = time.monotonic()

        await paced(count, rate, create, max_seconds=count / rate + 5)
    return arrived


RECORD = """
(() => {
  const Real = window.Notification;
  class Recording extends Real {
    constructor(title, options) { super(title, options); window.reachShown((options || {}).tag || ""); }
  }
  Object.defineProperty(Recording, "permission", {get: () => Real.permission});
  window.Notification = Recording;
  Object.defineProperty(document, "visibilityState", {configurable: true, get: () => "hidden"});
})();
"""


def measure_browser(ctx: Context, base_url: str, key: str, user_id: int, count: int) -> list[float]:
    if not Path(CHROMIUM).exists():
        return []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        return []
    from django.conf import settings

    shown: dict[str, float] = {}
    session = fixtures.login_session(user_id)
    latencies: list[float] = []
    ctx.progress.start(f"browser: {count} arrivals")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        context = browser.new_context(base_url=base_url)
        context.grant_permissions(["notifications"], origin=base_url)
        context.add_cookies([{"name": settings.SESSION_COOKIE_NAME, "value": session, "url": base_url}])
        context.expose_function(
            "reachShown", lambda tag: shown.setdefault(tag.split(":")[0], time.monotonic())
        )
        context.add_init_script(RECORD)
        page = context.new_page()
        page.goto(f"/queues/{PREFIX}/")
        page.wait_for_timeout(1500)
        body = {**fixtures.CREATE_BODY, "queue": PREFIX}
        for _ in range(count):
            response = httpx.post(
                f"{base_url}/api/v1/requests", json=body, headers={"Authorization": f"Bearer {key}"}
            )
            created, request_id = time.monotonic(), response.json()["id"]
            give_up = created + 10
            while request_id not in shown and time.monotonic() < give_up:
                page.wait_for_timeout(20)
            if request_id in shown:
                latencies.append(shown[request_id] - created)
            page.wait_for_timeout(300)
        browser.close()
    return latencies
