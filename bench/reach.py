"""#R Reach: from a request's arrival to the reviewer being told, per channel, in the shipped deployment shape.

Services deployment as docker-compose.yml ships it: one server process and every Celery worker of the compose file,
each started with its own command (the default queue's prefork worker and the `notices` worker), on PostgreSQL and
Redis; only `--loglevel` is lowered to warning, as the bench does for its servers. The queue's rules post every
arrival to a Slack channel and e-mail its member. Slack's Web API is a stand-in HTTP server on loopback answering
each call after 200 ms (the real slack_sdk client talks to it), the mail server a real SMTP server on loopback
(aiosmtpd) accepting each message after 300 ms. Both run in this process, so "posted" (Slack answered) and
"accepted" (250 after DATA) are timed on the same clock as the agent's 201. Arrivals at 10/s, then 50/s, 60 s each;
latency = posted (or accepted) - the agent's 201; each request must be posted and mailed exactly once.

Then Slack hangs (takes each post and never answers; the client gives up after SLACK_TIMEOUT_SECONDS): the agent's
create p95 at 10/s against the same rate with Slack answering just before, in the services deployment and in the
embedded one (no broker: eager tasks on the process's background senders), where the create used to wait on Slack.

Browser: headless Chromium on the queue page with the tab hidden and notifications granted; latency = the page
constructing the desktop Notification - the agent's 201. The page polls `/reach/waiting` every
BROWSER_POLL_SECONDS (set to 1 s here; 5 s by default), which bounds this figure.
"""

import asyncio
import json
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import yaml
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from bench import fixtures
from bench.harness import (
    REPO,
    RESULTS,
    Context,
    Figure,
    KeepAliveClient,
    Report,
    Server,
    bench_env,
    cpu_seconds,
    free_port,
    paced,
    percentile,
    summary_ms,
)

NAME = "reach"
TITLE = "Reach: arrival to Slack post and e-mail at 10 and 50 arrivals/s, the create with a hung Slack"
PREFIX = "bench-reach"
SLACK_SECONDS = 0.2
SMTP_SECONDS = 0.3
RATES = ((10.0, 1.0), (50.0, 2.0))  # arrivals per second, p95 target in seconds
HUNG_RATE = 10.0
# "Unchanged" for the create with a hung Slack, with a floor for noise: the embedded create's p95 with Slack
# answering read 22 and 39 ms in two runs of the same code here; a create that waited on Slack takes its 10 s timeout.
SAME_CREATE_MS = 20.0
# The embedded deployment: no REDIS_URL. The production settings, not bench.settings, whose channel layer prefix
# only the Redis layers take; with what bench.settings otherwise changes (no in-process sweeps, quiet logs).
EMBEDDED = {
    "REDIS_URL": "",
    "DJANGO_SETTINGS_MODULE": "reviewhub.settings",
    "PERIODIC_SWEEPS_IN_PROCESS": "false",
    "LOG_LEVEL": "WARNING",
}
COMPOSE = REPO / "docker-compose.yml"
# Servers and workers start slowly on a loaded machine (26 s for the server at load 9).
START_SECONDS = 90.0
CHROMIUM = "/usr/bin/chromium"
REQUEST_ID = re.compile(r"/requests/([0-9a-f-]{36})/")
CONNECTIONS = 100  # the load generator's at most, each a create in flight (2 s of creates at 50/s)


class Arrivals:
    """When each request id was first seen by a peer, and how many times, written from the peers' threads."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.lock = threading.Lock()

    def mark(self, request_id: str) -> None:
        with self.lock:
            self.times.setdefault(request_id, time.monotonic())
            self.counts[request_id] = self.counts.get(request_id, 0) + 1


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # 50 posts/s arrive in bursts; the default backlog of 5 would refuse some


class SlackPeer:
    """Slack's Web API answering every call after `delay` s; while `hung` is set it takes calls and never
    answers them (until the bench ends)."""

    def __init__(self, delay: float) -> None:
        self.posted = Arrivals()
        self.hung = threading.Event()
        self.ending = threading.Event()
        peer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if peer.hung.is_set():
                    peer.ending.wait()
                    return
                time.sleep(delay)
                if self.path.endswith("chat.postMessage"):
                    found = REQUEST_ID.search(body.decode(errors="replace"))
                    if found:
                        peer.posted.mark(found.group(1))
                reply = json.dumps({"ok": True, "channel": "C1", "ts": f"{time.time():.6f}"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = _Listener(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/api/"

    def stop(self) -> None:
        self.ending.set()
        self.server.shutdown()
        self.server.server_close()


class MailPeer:
    """aiosmtpd's handler: each message accepted after `delay` s."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.accepted = Arrivals()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        await asyncio.sleep(self.delay)
        found = REQUEST_ID.search((envelope.original_content or b"").decode(errors="replace"))
        if found:
            self.accepted.mark(found.group(1))
        return "250 OK"


@dataclass
class Phase:
    """One open-loop run of arrivals: the 201's time per request id and each create's latency."""

    arrived: dict[str, float] = field(default_factory=dict)
    creates: list[float] = field(default_factory=list)
    errors: int = 0

    def told(self, seen: Arrivals) -> tuple[list[float], int, int]:
        """(latency of each request seen, missing, duplicated) for one peer."""
        latencies = [seen.times[i] - t for i, t in self.arrived.items() if i in seen.times]
        missing = len(self.arrived) - len(latencies)
        duplicated = sum(seen.counts.get(i, 0) - 1 for i in self.arrived if seen.counts.get(i, 0) > 1)
        return latencies, missing, duplicated

    def all_told(self, *peers: Arrivals) -> bool:
        return all(i in peer.times for peer in peers for i in self.arrived)


def run(ctx: Context) -> Report:
    from django.contrib.auth import get_user_model

    from elicitation.models import Channel, ReachRule

    report = Report(NAME, TITLE)
    seconds = 10.0 if ctx.quick else 60.0
    hung_seconds = 5.0 if ctx.quick else 20.0
    fixtures.purge(PREFIX)
    slack = SlackPeer(SLACK_SECONDS)
    mail = MailPeer(SMTP_SECONDS)
    smtp_port = free_port()
    smtp = Controller(mail, hostname="127.0.0.1", port=smtp_port)
    smtp.start()
    env = {
        "SLACK_API_URL": slack.url,
        "SLACK_BOT_TOKEN": "xoxb-bench",
        "EMAIL_BACKEND": "django.core.mail.backends.smtp.EmailBackend",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        "BROWSER_POLL_SECONDS": "1",
        "AGENT_RATE": "100000000/min",
    }
    workers: list[tuple[str, subprocess.Popen[bytes]]] = []
    loaded: dict[float, Phase] = {}
    cpu: dict[str, float] = {}
    browser: list[float] = []
    try:
        queue = fixtures.create_queue(PREFIX)
        agent = fixtures.create_agents(PREFIX, 1, queue)[0]
        reviewer = fixtures.create_reviewers(PREFIX, 1, queue)[0]
        get_user_model().objects.filter(pk=reviewer.id).update(email="reviewer@bench.example")
        ReachRule.objects.create(
            queue=queue, channel=Channel.SLACK, audience="slack_channel", slack_channel="C1"
        )
        ReachRule.objects.create(queue=queue, channel=Channel.EMAIL, audience="members")

        # The services deployment: the server and docker-compose's workers.
        workers = start_workers(env)
        with Server(env=env, start_timeout=START_SECONDS) as server:
            for rate, _ in RATES:
                ctx.progress.start(f"services: {rate:.0f} arrivals/s for {seconds:.0f} s")
                before = [tree_cpu_seconds(process.pid) for _, process in workers]
                loaded[rate] = asyncio.run(arrive(server.base_url, agent.key, rate, seconds))
                wait_for(lambda phase=loaded[rate]: phase.all_told(slack.posted, mail.accepted), 60)
                for (name, process), used in zip(workers, before, strict=True):
                    key = f"{name} at {rate:.0f}/s"
                    cpu[key] = cpu.get(key, 0.0) + tree_cpu_seconds(process.pid) - used
            browser = measure_browser(ctx, server.base_url, agent.key, reviewer.id, 5 if ctx.quick else 15)
            # The create's baseline right before Slack hangs: this machine's load moves within minutes.
            ctx.progress.start(f"services: {HUNG_RATE:.0f} arrivals/s for {hung_seconds:.0f} s")
            answering = asyncio.run(arrive(server.base_url, agent.key, HUNG_RATE, hung_seconds))
            wait_for(lambda: answering.all_told(slack.posted, mail.accepted), 30)
            ctx.progress.start(f"services: Slack hung, {HUNG_RATE:.0f} arrivals/s for {hung_seconds:.0f} s")
            slack.hung.set()
            hung = asyncio.run(arrive(server.base_url, agent.key, HUNG_RATE, hung_seconds))
            wait_for(lambda: hung.all_told(mail.accepted), 30)
        stop_workers(workers)
        workers = []

        # The embedded deployment: no broker, eager tasks on the server's background senders.
        slack.hung.clear()
        with Server(env={**env, **EMBEDDED}, role="embedded", start_timeout=START_SECONDS) as server:
            ctx.progress.start(f"embedded: {HUNG_RATE:.0f} arrivals/s for {hung_seconds:.0f} s")
            embedded = asyncio.run(arrive(server.base_url, agent.key, HUNG_RATE, hung_seconds))
            wait_for(lambda: embedded.all_told(slack.posted, mail.accepted), 30)
            ctx.progress.start(f"embedded: Slack hung, {HUNG_RATE:.0f} arrivals/s for {hung_seconds:.0f} s")
            slack.hung.set()
            embedded_hung = asyncio.run(arrive(server.base_url, agent.key, HUNG_RATE, hung_seconds))
    finally:
        stop_workers(workers)
        slack.stop()
        smtp.stop()
        fixtures.purge(PREFIX)
    ctx.progress.finish()

    details: dict[str, Any] = {"cpu_seconds": {k: round(v, 1) for k, v in cpu.items()}}
    for rate, target in RATES:
        phase = loaded[rate]
        for label, seen in (("Slack post", slack.posted), ("e-mail accepted", mail.accepted)):
            latencies, missing, duplicated = phase.told(seen)
            p50, p95 = percentile(latencies, 50) * 1000, percentile(latencies, 95) * 1000
            report.add(
                Figure(f"arrival → {label} p50, {rate:.0f} arrivals/s", p50, "ms", "reported", None),
                Figure(
                    f"arrival → {label} p95, {rate:.0f} arrivals/s",
                    p95,
                    "ms",
                    f"≤ {target * 1000:,.0f} ms",
                    p95 <= target * 1000,
                ),
                Figure(
                    f"arrival → {label}: lost or duplicated, {rate:.0f} arrivals/s",
                    missing + duplicated,
                    "",
                    "0",
                    missing + duplicated == 0,
                ),
            )
            details[f"{label} {rate:.0f}/s"] = {
                **summary_ms(latencies),
                "arrivals": len(phase.arrived),
                "create errors": phase.errors,
                "missing": missing,
                "duplicated": duplicated,
            }
        attempted = len(phase.arrived) + phase.errors
        report.add(
            Figure(
                f"agent creates not answered 201 within 30 s, {rate:.0f} arrivals/s",
                phase.errors,
                f"of {attempted:,}",
                "0",
                phase.errors == 0,
            )
        )
        details[f"create {rate:.0f}/s"] = summary_ms(phase.creates)
        arrivals = len(phase.arrived)
        for name in ("worker", "notices"):
            used = cpu.get(f"{name} at {rate:.0f}/s")
            if used is not None and arrivals:
                details[f"{name} CPU ms per arrival at {rate:.0f}/s"] = round(1000 * used / arrivals, 2)

    for label, before_hang, hanging in (
        ("services", answering, hung),
        ("embedded", embedded, embedded_hung),
    ):
        p95, before = percentile(hanging.creates, 95) * 1000, percentile(before_hang.creates, 95) * 1000
        ratio = p95 / before if before else None
        report.add(
            Figure(
                f"agent create p95 with Slack hung, {label}, {HUNG_RATE:.0f}/s",
                p95,
                "ms",
                f"≤ 1.5x, or ≤ {SAME_CREATE_MS:.0f} ms over, Slack answering",
                ratio is not None
                and (ratio <= 1.5 or p95 - before <= SAME_CREATE_MS)
                and hanging.errors == 0,
                baseline=before,
                baseline_label=f"Slack answering in {SLACK_SECONDS * 1000:.0f} ms",
                ratio=ratio,
            )
        )
        details[f"create {label}, Slack hung"] = {**summary_ms(hanging.creates), "errors": hanging.errors}
        details[f"create {label}, Slack answering"] = {
            **summary_ms(before_hang.creates),
            "errors": before_hang.errors,
        }
    mail_while_hung, missing, _ = hung.told(mail.accepted)
    report.add(
        Figure(
            f"arrival → e-mail accepted p95 while Slack hangs, services, {HUNG_RATE:.0f}/s",
            percentile(mail_while_hung, 95) * 1000,
            "ms",
            "reported",
            None,
        )
    )
    details["e-mail while Slack hangs"] = {**summary_ms(mail_while_hung), "missing": missing}
    embedded_slack, embedded_missing, _ = embedded.told(slack.posted)
    details["embedded Slack post, answering"] = {**summary_ms(embedded_slack), "missing": embedded_missing}

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
    details["browser"] = len(browser)
    report.details = details
    report.notes.append(
        f"One server process and docker-compose.yml's Celery workers ({', '.join(describe_workers())}) on "
        f"PostgreSQL and Redis; Slack stand-in ({SLACK_SECONDS * 1000:.0f} ms a call) and SMTP server "
        f"({SMTP_SECONDS * 1000:.0f} ms a message) in the load generator's process; everything on the same 2 cores. "
        f"{seconds:.0f} s at each rate; the hung-Slack and embedded runs {hung_seconds:.0f} s each."
    )
    return report


# --- the deployment's workers ------------------------------------------------------------------------------------


def compose_workers() -> list[tuple[str, list[str], dict[str, str], int]]:
    """The Celery workers docker-compose.yml runs: (service, command, the environment it adds to the app's,
    replicas)."""
    compose = yaml.safe_load(COMPOSE.read_text())
    app_env = compose["x-app"]["environment"]
    workers = []
    for name, service in compose["services"].items():
        command = [str(part) for part in service.get("command") or []]
        if command[:1] == ["celery"] and "worker" in command:
            own = {k: str(v) for k, v in (service.get("environment") or {}).items() if k not in app_env}
            replicas = int((service.get("deploy") or {}).get("replicas", 1))
            workers.append((name, command, own, replicas))
    return workers


def describe_workers() -> list[str]:
    return [
        f"`{name}`{f' x{replicas}' if replicas > 1 else ''}: {' '.join(command[3:])}"
        for name, command, _, replicas in compose_workers()
    ]


def start_workers(env: dict[str, str]) -> list[tuple[str, subprocess.Popen[bytes]]]:
    """Every worker process of the compose file, named by its service (replicas share the name)."""
    from reviewhub import celery_app

    RESULTS.mkdir(parents=True, exist_ok=True)
    celery_app.control.purge()  # tasks a stopped run left behind
    started: list[tuple[str, subprocess.Popen[bytes]]] = []
    for name, command, own, replicas in compose_workers():
        command = ["--loglevel=warning" if part.startswith("--loglevel") else part for part in command]
        for replica in range(replicas):
            # Replicas run in containers of their own, each its own host name; here they share one.
            this = [
                part.replace("%h", f"%h-{replica}") if part.startswith("--hostname") else part
                for part in command
            ]
            log = (RESULTS / f"reach-{name}-{replica}.log").open("wb")
            process = subprocess.Popen(
                [sys.executable, "-m", *this],
                cwd=REPO,
                env=bench_env(**env, **own),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            started.append((name, process))
    # Ready when every worker answers a ping over the broker.
    give_up = time.monotonic() + START_SECONDS
    while time.monotonic() < give_up:
        if any(process.poll() is not None for _, process in started):
            raise RuntimeError(f"a Celery worker exited at start; see {RESULTS}/reach-*.log")
        if len(celery_app.control.ping(timeout=1.0)) >= len(started):
            return started
    stop_workers(started)
    raise RuntimeError(f"the Celery workers did not answer a ping within {START_SECONDS:.0f} s")


def tree_cpu_seconds(pid: int) -> float:
    """CPU time of a worker and its pool's processes (prefork children are counted in the parent only once they
    exit)."""
    total = cpu_seconds(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            total += cpu_seconds(int(child))
    return total


def stop_workers(workers: list[tuple[str, subprocess.Popen[bytes]]]) -> None:
    for _, process in workers:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for _, process in workers:
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


# --- load ----------------------------------------------------------------------------------------------------------


def wait_for(condition: Any, seconds: float) -> None:
    give_up = time.monotonic() + seconds
    while not condition() and time.monotonic() < give_up:
        time.sleep(0.05)


async def arrive(base_url: str, key: str, rate: float, seconds: float) -> Phase:
    """Requests created at `rate` per second for `seconds` (open loop). A backlog waits for one of the client's
    CONNECTIONS, and that wait is part of the create's latency."""
    phase = Phase()
    body = {**fixtures.CREATE_BODY, "queue": PREFIX}
    client = KeepAliveClient(base_url, CONNECTIONS)

    async def create(index: int) -> None:
        sent = time.monotonic()
        try:
            status, answer = await client.post_json(
                "/api/v1/requests", body, {"Authorization": f"Bearer {key}"}
            )
        except (OSError, ValueError, asyncio.IncompleteReadError):
            return
        answered = time.monotonic()
        if status == 201:
            phase.arrived[json.loads(answer)["id"]] = answered
            phase.creates.append(answered - sent)

    try:
        started = await paced(int(rate * seconds), rate, create, max_seconds=seconds + 5)
    finally:
        client.close()
    # Refused, timed out, or still unanswered 30 s after the schedule (paced cancels those).
    phase.errors = started - len(phase.arrived)
    return phase


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
