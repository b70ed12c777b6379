"""#6 Reconnect storm: one of two server processes holding 5,000 agent sockets is killed (-9); its agents come back.

Two server processes sit behind one loopback port: a small TCP proxy (`python -m bench.storm proxy ...`, a process
of its own) hands each new connection to the next process in turn, skipping one that refuses, and cuts the
client's side when its process dies (the client then sees 1006, as behind a real load balancer). Every agent runs
the client library's own socket (`reviewhub_client.client.AgentSocket`: hello, `resume` from its cursor,
`subscribe`; after a drop its first reconnect is spread over RECONNECT_SPREAD_SECONDS, then jittered backoff),
waiting on two claimed requests: one is answered during the run (and then no longer awaited, as `wait()` does),
the other never, so every agent still waits and reconnects. Answers are committed through the survivor
(`bench/respond/<id>`) at a steady rate before and during the storm, from a client process of their own
(bench/answerers.py). Then one process is killed with SIGKILL.

Rows: time from the kill until each of its agents has resumed (`resumed` frame on its new socket); 5xx answered
through the proxy or to the answers (counted by the proxy from each response's status line); events lost or
duplicated, checked against the outbox (AgentEvent rows) after the run; answers/s on the survivor during the storm
against before it.
"""

import asyncio
import contextlib
import json
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import httpx

from bench import answerers
from bench.harness import (
    DEPLOYED_SERVER,
    RESULTS,
    SERVER_LABELS,
    ClientProcess,
    Context,
    Figure,
    Report,
    Server,
    bench_env,
    cpu_seconds,
    free_port,
    load_average,
    percentile,
    raise_fd_limit,
    summary_ms,
)
from reviewhub_client.client import RECONNECT_SPREAD_SECONDS, AgentSocket, AsyncReviewHubClient
from reviewhub_client.models import OPEN_STATUSES

if TYPE_CHECKING:
    from bench import fixtures

NAME = "storm"
TITLE = "Reconnect storm: a web process with half of 5,000 agent sockets dies"
PREFIX = "bench-storm"
AGENTS = 5000
RATE = 50.0  # answers per second, before and during the storm
BEFORE_SECONDS = 8.0
STORM_LIMIT_SECONDS = 60.0
RESUME_P99_TARGET = 10.0
IN_FLIGHT = 16
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    count = 500 if ctx.quick else AGENTS
    result = storm_on(ctx, DEPLOYED_SERVER, count)

    resume = result["resume_seconds"]
    p99 = percentile(resume, 99) if resume else float("nan")
    five_xx = result["proxy"].get("5xx", 0) + result["answer_5xx"]
    lost, duplicated = result["outbox"]["lost"], result["outbox"]["duplicated"]
    before, during = result["rate_before"], result["rate_during"]
    report.add(
        Figure(
            f"time from the kill until every agent resumed: p99 ({len(resume):,} agents cut off)",
            p99,
            "s",
            f"≤ {RESUME_P99_TARGET:.0f} s",
            p99 <= RESUME_P99_TARGET and result["not_resumed"] == 0,
        ),
        Figure("… and the last one (max)", max(resume) if resume else float("nan"), "s", "reported", None),
        Figure("agents that never resumed", result["not_resumed"], "", "0", result["not_resumed"] == 0),
        Figure("5xx during the storm (handshakes, answers)", five_xx, "", "0", five_xx == 0),
        Figure("events lost (outbox vs frames received)", lost, "", "0", lost == 0),
        Figure("events duplicated (same cursor twice to one agent)", duplicated, "", "0", duplicated == 0),
        Figure(
            "… of which twice on one socket (the server's promise)",
            result["outbox"]["duplicated_on_one_socket"],
            "",
            "0",
            result["outbox"]["duplicated_on_one_socket"] == 0,
        ),
        Figure(
            "answers/s on the survivor during the storm",
            during,
            "/s",
            "≥ 0.9x before",
            during >= 0.9 * before if before else None,
            before,
            "before the kill",
            during / before if before else None,
        ),
        Figure(
            "answer p99 on the survivor during the storm",
            result["answer_p99_during_ms"],
            "ms",
            "reported",
            None,
            result["answer_p99_before_ms"],
            "before the kill",
            result["answer_p99_during_ms"] / result["answer_p99_before_ms"]
            if result["answer_p99_before_ms"]
            else None,
        ),
    )
    report.add(
        Figure(
            "survivor CPU during the storm per reconnected agent (answers at the same rate included)",
            result["survivor_cpu_ms_per_reconnect"],
            "ms",
            "reported",
            None,
        )
    )
    report.details = {
        **{k: v for k, v in result.items() if k != "resume_seconds"},
        "resume": summary_ms(resume),
    }
    report.notes.append(
        f"{count:,} agents, one client-library socket each (spread window {RECONNECT_SPREAD_SECONDS:.0f} s), "
        f"through a loopback TCP proxy (its own process) in front of two {SERVER_LABELS[DEPLOYED_SERVER]} "
        "processes, connections dealt "
        f"in turn; answers at {RATE:.0f}/s (at most {IN_FLIGHT} in flight) committed through the survivor for "
        f"{BEFORE_SECONDS:.0f} s before the kill and until the storm ended (every cut-off agent resumed, or "
        f"{STORM_LIMIT_SECONDS:.0f} s). Resume time = kill -> the agent's `resumed` frame on its new socket. "
        "Lost = outbox events of the answered requests never received; duplicated = a cursor received twice "
        "by one agent. The agents' sockets in one asyncio process, the answers in another (raw keep-alive HTTP)."
    )
    return report


def storm_on(ctx: Context, kind: str, count: int) -> dict[str, Any]:
    """One storm on two processes of the ASGI server `kind`, with agents and requests of its own (the outbox check
    counts every event of these agents), deleted after."""
    # Here, not at the top: the proxy process runs this module without Django.
    from bench import fixtures

    raise_fd_limit()
    fixtures.purge(PREFIX)
    try:
        queue = fixtures.create_queue(PREFIX)
        ctx.progress.start(f"creating {count:,} agents, one claimed request each")
        agents = fixtures.create_agents(PREFIX, count, queue)
        reviewer = fixtures.create_reviewers(PREFIX, 1, queue)[0]
        # Two claimed requests per agent: the first is answered, the second never is, so every agent is still
        # waiting (and reconnects) whatever was answered before the kill.
        requests = fixtures.requests_per_agent(queue, [a.id for a in agents], 2, claimed_by=reviewer.id)
        waits = [(agent, requests[agent.id][0], requests[agent.id][1]) for agent in agents]
        load_before = load_average()
        with (
            Server(kind, env=UNBOUND_RATES, role="storm-a", start_timeout=120) as doomed,
            Server(kind, env=UNBOUND_RATES, role="storm-b", start_timeout=120) as survivor,
            Proxy([doomed.port, survivor.port]) as proxy,
        ):
            result = asyncio.run(measure(ctx, doomed, survivor, proxy, waits, reviewer.id))
            result["proxy"] = proxy.counters()
        result["outbox"] = outbox_check(agents, result.pop("frames"))
        result["load_average"] = [load_before, load_average()]
    finally:
        fixtures.purge(PREFIX)
    return result


# --- the clients -------------------------------------------------------------------------------------------------


@dataclass
class Endpoint:
    """What AgentSocket reads from its client: where, with which key, how long to wait for a handshake."""

    base_url: str
    api_key: str
    timeout: float = 30.0


class MeasuredSocket(AgentSocket):
    """The client library's socket, recording every frame's cursor, drops and `resumed` times."""

    def __init__(self, endpoint: Endpoint) -> None:
        super().__init__(cast(AsyncReviewHubClient, endpoint))
        self.cursors: list[tuple[int, int]] = []  # (connection number, cursor) of every event frame
        self.connections = 0
        self.drops: list[float] = []
        self.resumed_at: list[float] = []

    def _set_connected(self, connected: bool) -> None:
        if self.connected and not connected:
            self.drops.append(time.monotonic())
        if connected:
            self.connections += 1
        super()._set_connected(connected)

    def _handle(self, message: dict[str, Any]) -> None:
        if message.get("type") == "resumed":
            self.resumed_at.append(time.monotonic())
        elif "cursor" in message and "id" in message:
            self.cursors.append((self.connections, int(message["cursor"])))
        super()._handle(message)
        if "id" in message and message.get("status") not in OPEN_STATUSES:
            self.watchers.pop(str(message["id"]), None)  # as `wait()` does once it has its answer


async def measure(
    ctx: Context,
    doomed: Server,
    survivor: Server,
    proxy: "Proxy",
    waits: "list[tuple[fixtures.Credential, str, str]]",
    reviewer_id: int,
) -> dict[str, Any]:
    sockets = [MeasuredSocket(Endpoint(proxy.base_url, agent.key)) for agent, _, _ in waits]
    ctx.progress.start(f"connecting {len(sockets):,} agents through the proxy", len(sockets))
    # Opened in batches, as a fleet of agents starting up would: each socket connects on its first watch().
    for start in range(0, len(sockets), 100):
        for socket, (_, answered, kept) in zip(
            sockets[start : start + 100], waits[start : start + 100], strict=True
        ):
            socket.watch(answered)
            socket.watch(kept)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(s.resumed_at for s in sockets[start : start + 100]):
            await asyncio.sleep(0.05)
        ctx.progress.update(sum(1 for s in sockets if s.resumed_at))
    ready = sum(1 for s in sockets if s.resumed_at)
    if ready < len(sockets):
        raise RuntimeError(f"only {ready} of {len(sockets)} agents connected before the storm")

    order = [answered for _, answered, _ in waits]
    order.sort()  # a deterministic order unrelated to which process holds the agent
    killed_at = 0.0
    # The answers come from a client process of their own (bench/answerers.py): this one runs the agents' sockets,
    # and when half of them reconnect at once its loop runs late.
    address = urlsplit(survivor.base_url)
    answerer = ClientProcess(
        answerers.answer_until_stopped,
        address.hostname,
        address.port,
        reviewer_id,
        order,
        RATE,
        IN_FLIGHT,
        BEFORE_SECONDS + STORM_LIMIT_SECONDS,
    )
    try:
        ctx.progress.start(f"answering at {RATE:.0f}/s, then kill -9 one process")
        await answerer.reply("started", 60)
        await asyncio.sleep(1.0)  # the first second warms up
        cpu_answering_began, answering_began = cpu_seconds(survivor.pid), time.monotonic()
        await asyncio.sleep(BEFORE_SECONDS - 1.0)
        holding = [s for s in sockets if s.connected]
        killed_at = time.monotonic()
        cpu_at_kill = cpu_seconds(survivor.pid)
        doomed.kill()

        # Who was cut off: every socket that dropped after the kill.
        await asyncio.sleep(1.0)
        cut = [s for s in holding if s.drops and s.drops[-1] >= killed_at]
        ctx.progress.start(f"storm: {len(cut):,} agents reconnecting", len(cut))
        storm_deadline = killed_at + STORM_LIMIT_SECONDS
        while time.monotonic() < storm_deadline:
            back = sum(1 for s in cut if s.resumed_at and s.resumed_at[-1] > s.drops[-1])
            ctx.progress.update(back)
            if back == len(cut):
                break
            await asyncio.sleep(0.1)
        storm_ended = time.monotonic()
        cpu_at_storm_end = cpu_seconds(survivor.pid)
        # A few seconds more at the same rate, then stop offering answers.
        await asyncio.sleep(2.0)
    finally:
        answers = await answerer.stop(120) or {"offered": [], "answered": [], "statuses": {}}
    await asyncio.sleep(3.0)  # frames still in flight reach their sockets
    offered: list[float] = answers["offered"]  # the rate counts only while answers were still offered
    latencies: list[tuple[float, float]] = answers["answered"]  # (committed at, seconds)
    answer_statuses: Counter[int] = Counter(answers["statuses"])

    resume_seconds = [
        s.resumed_at[-1] - killed_at for s in cut if s.resumed_at and s.resumed_at[-1] > s.drops[-1]
    ]
    not_resumed = len(cut) - len(resume_seconds)
    # Why the ones still out were last turned away (None: the connection failed before any close frame).
    last_close_codes = Counter(
        str(s.last_close_code) for s in cut if not (s.resumed_at and s.resumed_at[-1] > s.drops[-1])
    )
    frames = {agent.id: list(socket.cursors) for (agent, _, _), socket in zip(waits, sockets, strict=True)}
    ctx.progress.start("closing sockets")
    for start in range(0, len(sockets), 500):
        await asyncio.gather(*(s.aclose() for s in sockets[start : start + 500]), return_exceptions=True)

    def window(start: float, end: float) -> list[float]:
        return [seconds for at, seconds in latencies if start <= at < end]

    before = window(killed_at - BEFORE_SECONDS + 1, killed_at)  # the first second warms up
    # A short run can run out of requests to answer before every agent is back: the rate during the storm is
    # counted over the part of it in which answers were still being offered.
    offering_ended = min(storm_ended, max(offered, default=storm_ended) + 1.0 / RATE)
    during = window(killed_at, offering_ended)
    storm_seconds = max(storm_ended - killed_at, 0.001)
    offering_seconds = max(offering_ended - killed_at, 0.001)
    # The survivor's CPU in the storm, per agent it took in: the answers offered meanwhile are the same load on every
    # server (their share is the rate before the kill), so this compares what the servers spend on reconnects.
    answering_cpu_percent = (
        (cpu_at_kill - cpu_answering_began) / max(killed_at - answering_began, 0.001) * 100
    )
    storm_cpu = cpu_at_storm_end - cpu_at_kill
    return {
        "agents": len(sockets),
        "cut_off": len(cut),
        "resume_seconds": resume_seconds,
        "not_resumed": not_resumed,
        "not_resumed_last_close_codes": dict(last_close_codes),
        "storm_seconds": round(storm_seconds, 2),
        "survivor_cpu_percent_answering_before": round(answering_cpu_percent, 1),
        "survivor_cpu_percent_during_storm": round(storm_cpu / storm_seconds * 100, 1),
        "survivor_cpu_ms_per_reconnect": round(storm_cpu * 1000 / max(len(resume_seconds), 1), 2),
        "rate_before": round(len(before) / (BEFORE_SECONDS - 1), 1),
        "rate_during": round(len(during) / offering_seconds, 1),
        "answer_p99_before_ms": round(percentile(before, 99) * 1000, 1) if before else float("nan"),
        "answer_p99_during_ms": round(percentile(during, 99) * 1000, 1) if during else float("nan"),
        "answers_committed": len(latencies),
        "answer_statuses": {str(k): v for k, v in answer_statuses.items()},
        "answer_5xx": sum(n for status, n in answer_statuses.items() if status >= 500),
        "frames": frames,
    }


def outbox_check(
    agents: "list[fixtures.Credential]", frames: dict[int, list[tuple[int, int]]]
) -> dict[str, Any]:
    """Every outbox event of these agents must have reached its agent exactly once. A repeat on one socket breaks
    the server's promise; one on the next socket is a replay the client library drops by its cursor."""
    from elicitation.models import AgentEvent

    expected: dict[int, set[int]] = {}
    for agent_id, seq in AgentEvent.objects.filter(agent_id__in=[a.id for a in agents]).values_list(
        "agent_id", "seq"
    ):
        expected.setdefault(agent_id, set()).add(seq)
    cursors = {agent_id: [cursor for _, cursor in seen] for agent_id, seen in frames.items()}
    lost = sum(len(seqs - set(cursors.get(agent_id, []))) for agent_id, seqs in expected.items())
    duplicated = sum(len(seen) - len(set(seen)) for seen in cursors.values())
    same_socket = sum(len(seen) - len(set(seen)) for seen in frames.values())
    unexpected = sum(len(set(seen) - expected.get(agent_id, set())) for agent_id, seen in cursors.items())
    return {
        "outbox_events": sum(len(seqs) for seqs in expected.values()),
        "lost": lost,
        "duplicated": duplicated,
        "duplicated_on_one_socket": same_socket,
        "duplicated_across_sockets": duplicated - same_socket,
        "not_in_outbox": unexpected,
    }


# --- the proxy ---------------------------------------------------------------------------------------------------


class Proxy:
    """`python -m bench.storm proxy PORT BACKEND...` in a process of its own, counting 5xx in a JSON file."""

    def __init__(self, backends: list[int]) -> None:
        self.port = free_port()
        self.backends = backends
        self.counters_path = RESULTS / f"storm-proxy-{self.port}.json"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Proxy":
        RESULTS.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "bench.storm", "proxy", str(self.port), str(self.counters_path)]
        self.process = subprocess.Popen(
            command + [str(port) for port in self.backends], cwd=Path(__file__).parent.parent, env=bench_env()
        )
        deadline = time.monotonic() + 90  # a loaded machine starts Python slowly
        while time.monotonic() < deadline and self.process.poll() is None:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.base_url + "/healthz", timeout=2).status_code == 200:
                    return self
            time.sleep(0.1)
        self.__exit__()
        raise RuntimeError("the storm proxy did not start")

    def counters(self) -> dict[str, int]:
        with contextlib.suppress(OSError, ValueError):
            return cast(dict[str, int], json.loads(self.counters_path.read_text()))
        return {}

    def __exit__(self, *exc: object) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


async def serve_proxy(port: int, counters_path: Path, backends: list[int]) -> None:
    counters: Counter[str] = Counter()
    turn = 0

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, inspect: bool) -> None:
        first = True
        try:
            while data := await reader.read(65536):
                if inspect and first:
                    first = False
                    if data.startswith(b"HTTP/1.1 5") or data.startswith(b"HTTP/1.0 5"):
                        counters["5xx"] += 1
                    counters["responses"] += 1
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            if inspect and first:
                counters["closed before a response"] += 1
            # The other side is gone: cut this one too, as a dead process's load balancer does.
            writer.transport.abort()

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        nonlocal turn
        first = turn  # read once: other connections move `turn` while this one waits to connect
        turn += 1
        for attempt in range(len(backends)):
            backend = backends[(first + attempt) % len(backends)]
            try:
                backend_reader, backend_writer = await asyncio.open_connection("127.0.0.1", backend)
            except OSError:
                counters["refused"] += 1
                continue
            counters[f"to {backend}"] += 1
            await asyncio.gather(
                pipe(client_reader, backend_writer, inspect=False),
                pipe(backend_reader, client_writer, inspect=True),
            )
            return
        counters["no backend"] += 1
        client_writer.transport.abort()

    async def save_counters() -> None:
        while True:
            counters_path.write_text(json.dumps(counters))
            await asyncio.sleep(0.5)

    raise_fd_limit()
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    saver = asyncio.ensure_future(save_counters())
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async with server:
        await stop.wait()
    saver.cancel()
    counters_path.write_text(json.dumps(counters))


if __name__ == "__main__" and sys.argv[1:2] == ["proxy"]:
    asyncio.run(serve_proxy(int(sys.argv[2]), Path(sys.argv[3]), [int(p) for p in sys.argv[4:]]))
