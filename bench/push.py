"""#3 Push latency: from the commit of a reviewer's answer to the waiting agent's WebSocket frame.

Answers are committed by one server process and the agents' sockets are held by another, as in a deployment
with more than one web process; the run is then repeated with one process doing both (reported beside it).

5,000 idle agent sockets (one agent each) stay open on the server; 20 waiting agents subscribe to their
claimed requests; requests are answered at 100/s through `bench/respond/<id>` (the real `services.respond`,
reporting the moment its transaction committed, on CLOCK_MONOTONIC, which every process on the machine
shares). Latency = frame received - commit. The long-poll fallback is measured the same way (the long-poll
for each request starts 1 s before its answer). Baseline: a bare Redis PUBLISH -> subscriber hop in the
same run, same rate.
"""

import asyncio
import gc
import json
import time
from collections import Counter
from typing import Any
from urllib.parse import urlsplit

import redis.asyncio as aioredis

from bench import fixtures, idle_sockets
from bench.harness import (
    DEPLOYED_SERVER,
    SERVER_LABELS,
    ClientProcess,
    Context,
    Figure,
    KeepAliveHttp,
    Report,
    Server,
    cpu_seconds,
    load_average,
    paced,
    percentile,
    raise_fd_limit,
    rss_kib,
    summary_ms,
)

NAME = "push"
TITLE = "Push latency: answer commit to agent frame"
PREFIX = "bench-push"
RATE = 100.0
IDLE_SOCKETS = 5000
WAITING_AGENTS = 20
IN_FLIGHT = 16
UNBOUND_RATES = {"AGENT_RATE": "100000000/min", "REVIEWER_RATE": "100000000/min"}


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    raise_fd_limit()
    idle = 200 if ctx.quick else IDLE_SOCKETS
    ws_count, lp_count = (200, 100) if ctx.quick else (1000, 300)
    fixtures.purge(PREFIX)
    try:
        queue = fixtures.create_queue(PREFIX)
        ctx.progress.start(f"creating {idle + WAITING_AGENTS} agents")
        idle_agents = fixtures.create_agents(PREFIX + "-idle", idle, queue)
        waiting = fixtures.create_agents(PREFIX + "-wait", WAITING_AGENTS, queue)
        reviewer = fixtures.create_reviewers(PREFIX, 1, queue)[0]
        # As deployed with more than one web process: reviewers' answers are committed by one process, the
        # agents' sockets and long-polls are held by another, and the push crosses Redis between them.
        result = two_processes(
            ctx, DEPLOYED_SERVER, queue, idle_agents, waiting, reviewer.id, ws_count, lp_count
        )
        rss_mib = result["rss_mib"]
        # One process doing both: its answering work and the pushes share one event loop and one GIL.
        ws_ids = claimed_requests(queue, waiting, reviewer.id, ws_count)
        lp_ids = claimed_requests(queue, waiting, reviewer.id, lp_count)
        with Server(DEPLOYED_SERVER, env=UNBOUND_RATES, role="both") as server:
            shared = asyncio.run(
                measure(ctx, server, server.base_url, idle_agents, waiting, reviewer.id, ws_ids, lp_ids)
            )
    finally:
        fixtures.purge(PREFIX)
    shared_ws_p50, shared_ws_p99 = percentile(shared["ws"], 50) * 1000, percentile(shared["ws"], 99) * 1000

    ws, lp, hop = result["ws"], result["lp"], result["hop"]
    ws_p50, ws_p99 = percentile(ws, 50) * 1000, percentile(ws, 99) * 1000
    hop_p50, hop_p99 = percentile(hop, 50) * 1000, percentile(hop, 99) * 1000
    lp_p50, lp_p99 = percentile(lp, 50) * 1000, percentile(lp, 99) * 1000
    report.add(
        Figure(
            "WebSocket push p50, 100 answers/s",
            ws_p50,
            "ms",
            "≤ 10 ms",
            ws_p50 <= 10,
            hop_p50,
            "bare Redis hop",
            ws_p50 / hop_p50,
        ),
        Figure(
            "WebSocket push p99, 100 answers/s",
            ws_p99,
            "ms",
            "≤ 50 ms",
            ws_p99 <= 50,
            hop_p99,
            "bare Redis hop",
            ws_p99 / hop_p99,
        ),
        Figure(
            "long-poll answer p50",
            lp_p50,
            "ms",
            "≤ 50 ms",
            lp_p50 <= 50,
            ws_p50,
            "WebSocket p50",
            lp_p50 / ws_p50,
        ),
        Figure(
            "long-poll answer p99",
            lp_p99,
            "ms",
            "reported (p50 is the target)",
            None,
            ws_p99,
            "WebSocket p99",
            lp_p99 / ws_p99,
        ),
        Figure(
            "answers never pushed (WebSocket + long-poll)",
            result["ws_missing"] + result["lp_missing"],
            "",
            "0",
            result["ws_missing"] + result["lp_missing"] == 0,
        ),
        Figure(
            "answers committed per second (offered 100/s)",
            result["rate"],
            "/s",
            "≥ 95/s (the load is really offered)",
            result["rate"] >= 95,
        ),
        Figure(
            "one process answering and relaying: WebSocket push p50",
            shared_ws_p50,
            "ms",
            "reported",
            None,
            ws_p50,
            "answers on another process",
            shared_ws_p50 / ws_p50,
        ),
        Figure(
            "one process answering and relaying: WebSocket push p99",
            shared_ws_p99,
            "ms",
            "reported",
            None,
            ws_p99,
            "answers on another process",
            shared_ws_p99 / ws_p99,
        ),
        Figure(
            "one process answering and relaying: answers committed per second",
            shared["rate"],
            "/s",
            "reported",
            None,
        ),
        Figure(
            f"idle agent sockets open during the run (of {idle:,})",
            result["idle_open"],
            "",
            f"{idle:,}",
            result["idle_open"] == idle,
        ),
    )
    report.details = {
        "websocket": summary_ms(ws),
        "websocket_slowest": result["ws_slowest"],
        "long_poll": summary_ms(lp),
        "redis_hop": summary_ms(hop),
        "server_rss_mib_after_the_run": rss_mib,
        "answer_http_errors": result["answer_errors"],
        "ws_missing": result["ws_missing"],
        "lp_missing": result["lp_missing"],
        "achieved_answer_rate": result["rate"],
        "long_poll_outcomes_other_than_completed": result["long_poll_outcomes_other_than_completed"],
        "one_process": {
            "websocket": summary_ms(shared["ws"]),
            "long_poll": summary_ms(shared["lp"]),
            "achieved_answer_rate": shared["rate"],
            "missing": shared["ws_missing"] + shared["lp_missing"],
            "long_poll_outcomes_other_than_completed": shared["long_poll_outcomes_other_than_completed"],
        },
    }
    report.notes.append(
        f"{ws_count} answers pushed over WebSocket and {len(lp_ids)} over long-poll at {RATE:.0f}/s "
        f"(achieved {result['rate']:.0f}/s) with {result['idle_open']:,} idle agent sockets open; "
        f"20 waiting agents; at most {IN_FLIGHT} answers in flight; the idle sockets in a client process of their "
        "own, the rest in one asyncio process. Target rows: "
        f"answers committed by one {SERVER_LABELS[DEPLOYED_SERVER]} process, sockets and long-polls held by "
        "another (a deployment with more than one web process; the push crosses Redis). 'One process' rows: the "
        "same run again with a single process doing both, whose answering work delays its own pushes. Server "
        f"CPU per answer in the WebSocket phase: sockets process {result['cpu_ms_per_answer'].get('sockets')} ms, "
        f"answering process {result['cpu_ms_per_answer'].get('answers')} ms."
    )
    return report


def two_processes(
    ctx: Context,
    kind: str,
    queue: Any,
    idle_agents: list[fixtures.Credential],
    waiting: list[fixtures.Credential],
    reviewer_id: int,
    ws_count: int,
    lp_count: int,
) -> dict[str, Any]:
    """The target rows' setup on the ASGI server `kind`: answers committed by one process of it, the sockets and
    long-polls held by another (the push crosses Redis between them)."""
    ws_ids = claimed_requests(queue, waiting, reviewer_id, ws_count)
    lp_ids = claimed_requests(queue, waiting, reviewer_id, lp_count)
    load_before = load_average()
    with (
        Server(kind, env=UNBOUND_RATES, role="sockets", start_timeout=120) as sockets,
        Server(kind, env=UNBOUND_RATES, role="answers", start_timeout=120) as answers,
    ):
        result = asyncio.run(
            measure(
                ctx,
                sockets,
                answers.base_url,
                idle_agents,
                waiting,
                reviewer_id,
                ws_ids,
                lp_ids,
                answers_pid=answers.pid,
            )
        )
        # What GC_THRESHOLDS costs in memory: whatever only a full collection frees is still held here.
        result["rss_mib"] = {"sockets": rss_kib(sockets.pid) // 1024, "answers": rss_kib(answers.pid) // 1024}
    result["load_average"] = [load_before, load_average()]
    return result


def claimed_requests(
    queue: Any, agents: list[fixtures.Credential], reviewer_id: int, count: int
) -> list[tuple[int, str]]:
    """`count` requests claimed by the reviewer, spread over the waiting agents: [(agent index, id)]."""
    from elicitation.models import ElicitationRequest

    per_agent = count // len(agents)
    found: list[tuple[int, str]] = []
    for index, agent in enumerate(agents):
        before = set(ElicitationRequest.objects.filter(agent_id=agent.id).values_list("id", flat=True))
        fixtures.bulk_requests(queue, agent.id, per_agent, claimed_by=reviewer_id)
        rows = ElicitationRequest.objects.filter(agent_id=agent.id).exclude(id__in=before)
        found += [(index, str(pk)) for pk in rows.values_list("id", flat=True)]
    # Interleave agents, so consecutive answers go to different sockets.
    found.sort(key=lambda item: item[1])
    return found


async def measure(
    ctx: Context,
    server: Server,
    answers_url: str,
    idle_agents: list[fixtures.Credential],
    waiting: list[fixtures.Credential],
    reviewer_id: int,
    ws_ids: list[tuple[int, str]],
    lp_ids: list[tuple[int, str]],
    answers_pid: int | None = None,
) -> dict[str, Any]:
    url = server.ws_url + "/ws/agent/"
    ctx.progress.start(f"opening {len(idle_agents)} idle agent sockets (in a client process of their own)")
    holder = ClientProcess(idle_sockets.hold_forever, url, [agent.key for agent in idle_agents])
    try:
        await holder.reply("opened", 600)
        return await measure_beside_idle(
            ctx, server, answers_url, waiting, reviewer_id, ws_ids, lp_ids, holder, answers_pid
        )
    finally:
        ctx.progress.start("closing sockets")
        await holder.stop()


async def measure_beside_idle(
    ctx: Context,
    server: Server,
    answers_url: str,
    waiting: list[fixtures.Credential],
    reviewer_id: int,
    ws_ids: list[tuple[int, str]],
    lp_ids: list[tuple[int, str]],
    holder: ClientProcess,
    answers_pid: int | None,
) -> dict[str, Any]:
    # Everything this process loaded so far lives until it exits: frozen, so that its own full collections (a
    # pause in reading the frames being timed) walk only what the measuring makes.
    gc.collect()
    gc.freeze()
    url = server.ws_url + "/ws/agent/"
    received: dict[str, float] = {}
    sockets = [await idle_sockets.open_socket(url, agent.key) for agent in waiting]

    async def read(socket: Any) -> None:
        async for frame in socket:
            data = json.loads(frame)
            if data.get("type") in {"completed", "expired"}:
                received.setdefault(data["id"], time.monotonic())

    ctx.progress.start("subscribing")
    by_agent: dict[int, list[str]] = {}
    for index, request_id in ws_ids:
        by_agent.setdefault(index, []).append(request_id)
    for index, ids in by_agent.items():
        for start in range(0, len(ids), 500):
            await sockets[index].send(json.dumps({"type": "subscribe", "ids": ids[start : start + 500]}))
    # Drain the subscribe replies (one `state` frame per id) before anything is timed.
    for index, ids in by_agent.items():
        for _ in ids:
            await asyncio.wait_for(sockets[index].recv(), 30)
    readers = [asyncio.ensure_future(read(socket)) for socket in sockets]

    committed: dict[str, float] = {}
    answer_errors = 0
    poll_outcomes: Counter[str] = Counter()
    # Raw keep-alive HTTP, not httpx: at 200 calls/s httpx kept this process's one core busy, and a response read
    # late is measured late.
    answers_at = urlsplit(answers_url)
    answers = KeepAliveHttp(answers_at.hostname or "127.0.0.1", answers_at.port or 80)
    polls_at = urlsplit(server.base_url)
    client = KeepAliveHttp(polls_at.hostname or "127.0.0.1", polls_at.port or 80)
    try:
        # Reviewers answer at most IN_FLIGHT at a time: a server that cannot keep up with 100/s then answers
        # slower (the achieved rate is reported) instead of drowning its event loop in queued requests, which
        # would measure the backlog rather than the push.
        in_flight = asyncio.Semaphore(IN_FLIGHT)

        async def answer(request_id: str) -> None:
            nonlocal answer_errors
            async with in_flight:
                try:
                    status, body = await answers.request(
                        "POST", f"/bench/respond/{request_id}", {"X-Bench-User": str(reviewer_id)}
                    )
                except (OSError, asyncio.IncompleteReadError) as exc:
                    poll_outcomes[f"answer {type(exc).__name__}"] += 1
                    status, body = 0, b""
            if status != 200:
                answer_errors += 1
                return
            committed[request_id] = json.loads(body)["committed_at"]

        ctx.progress.start(f"answering {len(ws_ids)} at {RATE:.0f}/s (WebSocket)", len(ws_ids))
        started = time.monotonic()
        # The server CPU the WebSocket phase cost, per answer: the sockets process relays each push (beside its
        # 5,000 idle sockets), the answering one serves each answer's HTTP call; load on the machine slows either
        # but hardly changes what it spends.
        cpu_before = {"sockets": cpu_seconds(server.pid)}
        if answers_pid is not None and answers_pid != server.pid:
            cpu_before["answers"] = cpu_seconds(answers_pid)

        async def answer_ws(index: int) -> None:
            await answer(ws_ids[index][1])
            ctx.progress.update(len(committed))

        await paced(len(ws_ids), RATE, answer_ws, max_seconds=len(ws_ids) / RATE + 5)
        rate = len(committed) / (time.monotonic() - started)
        await asyncio.sleep(2)  # frames still in flight
        pids = {"sockets": server.pid, "answers": answers_pid}
        cpu_ms_per_answer = {
            role: round((cpu_seconds(pids[role] or server.pid) - before) * 1000 / max(len(committed), 1), 2)
            for role, before in cpu_before.items()
        }
        timed = [
            (received[i] - committed[i], committed[i]) for _, i in ws_ids if i in received and i in committed
        ]
        ws = [latency for latency, _ in timed]
        # When the slowest were committed (CLOCK_MONOTONIC, as the servers' BENCH_GC_LOG lines), to line them up.
        slowest = sorted(timed, reverse=True)[:10]
        ws_missing = sum(1 for _, i in ws_ids if i in committed and i not in received)
        for reader in readers:
            reader.cancel()

        ctx.progress.start(f"answering {len(lp_ids)} at {RATE:.0f}/s (long-poll)", len(lp_ids))
        answered_at: dict[str, float] = {}
        keys = {index: agent.key for index, agent in enumerate(waiting)}

        async def long_poll(index: int, request_id: str) -> None:
            try:
                code, body = await client.request(
                    "GET",
                    f"/api/v1/requests/{request_id}?wait=20",
                    {"Authorization": f"Bearer {keys[index]}"},
                )
            except (OSError, asyncio.IncompleteReadError) as exc:
                poll_outcomes[type(exc).__name__] += 1
                return
            received_at = time.monotonic()
            status = json.loads(body).get("status") if code == 200 else None
            if status == "completed":
                answered_at[request_id] = received_at
            else:
                poll_outcomes[f"{code} {status}"] += 1

        polls: list[asyncio.Task[None]] = []

        async def answer_lp(index: int) -> None:
            # The long-poll for request i starts 1 s before it is answered: ~100 waiting at any moment.
            if index + int(RATE) < len(lp_ids):
                agent_index, request_id = lp_ids[index + int(RATE)]
                polls.append(asyncio.ensure_future(long_poll(agent_index, request_id)))
            await answer(lp_ids[index][1])
            ctx.progress.update(len(answered_at))

        for agent_index, request_id in lp_ids[: int(RATE)]:
            polls.append(asyncio.ensure_future(long_poll(agent_index, request_id)))
        await asyncio.sleep(1.0)
        await paced(len(lp_ids), RATE, answer_lp, max_seconds=len(lp_ids) / RATE + 5)
        _, unanswered = await asyncio.wait(polls, timeout=30)
        for poll in unanswered:
            poll.cancel()
        poll_outcomes["still waiting after 30 s"] += len(unanswered)
        lp = [answered_at[i] - committed[i] for _, i in lp_ids if i in answered_at and i in committed]
        lp_missing = sum(1 for _, i in lp_ids if i in committed and i not in answered_at)
    finally:
        answers.close()
        client.close()

    idle_open = int(await holder.ask("count"))
    await asyncio.gather(*(s.close() for s in sockets), return_exceptions=True)

    ctx.progress.start("bare Redis hop baseline")
    hop = await redis_hop(server.env["REDIS_URL"], len(ws_ids))
    return {
        "ws": ws,
        "ws_slowest": [f"{latency * 1000:.0f} ms at {at:.3f}" for latency, at in slowest],
        "lp": lp,
        "hop": hop,
        "ws_missing": ws_missing,
        "lp_missing": lp_missing,
        "answer_errors": answer_errors,
        "idle_open": idle_open,
        "rate": rate,
        "cpu_ms_per_answer": cpu_ms_per_answer,
        "long_poll_outcomes_other_than_completed": dict(poll_outcomes),
    }


async def redis_hop(url: str, count: int) -> list[float]:
    """PUBLISH a timestamp at RATE/s; the subscriber's receive time minus it is one bare Redis hop."""
    # redis-py 8 caps an asyncio pool at 100 connections; publishes in flight after a stall can outnumber that.
    publisher = aioredis.Redis.from_url(url, max_connections=int(RATE * 10))
    subscriber = aioredis.Redis.from_url(url)
    pubsub = subscriber.pubsub()
    channel = "rhbench.hop"
    await pubsub.subscribe(channel)
    latencies: list[float] = []

    async def listen() -> None:
        async for message in pubsub.listen():
            if message["type"] == "message":
                latencies.append(time.monotonic() - float(message["data"]))
                if len(latencies) >= count:
                    return

    listener = asyncio.ensure_future(listen())

    async def publish(index: int) -> None:
        await publisher.publish(channel, repr(time.monotonic()))

    await paced(count, RATE, publish, max_seconds=count / RATE + 5)
    try:
        await asyncio.wait_for(listener, 5)
    except TimeoutError:
        listener.cancel()
    await pubsub.unsubscribe(channel)
    await pubsub.aclose()
    await publisher.aclose()
    await subscriber.aclose()
    return latencies
