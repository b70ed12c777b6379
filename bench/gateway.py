"""#13 The MCP gateway's overhead: a `tools/call` that needs no approval, through `/mcp/gateway/<name>/`, against the
same call made directly to the upstream.

The upstream is the gateway tests' MCPServer (tests/mcp/servers/gateway_upstream.py) over streamable HTTP on
loopback; both sides are the official SDK's `Client` over streamable HTTP, one call at a time, direct and gateway
calls in alternating rounds so the machine's load falls on both alike. The overhead is the difference of the
p50s: the agent's key and the queue checked (one statement), one AGENT_RATE count, and the hop to the upstream on
the gateway's kept-open client. Reported beside it: a call an `accept` rule lets through (a request row and its
audit row written and answered at intake, then forwarded).

`--servers a,b` (`python -m bench gateway --servers reviewhub,uvicorn`) runs the gateway on each of those ASGI
servers at once, against the same upstream and the same direct calls, their rounds interleaved: the first server's
figures are the rows above, each other server adds its own overhead row beside the first's. Without it the bench
runs on the server ReviewHub deploys with.
"""

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from bench import fixtures
from bench.harness import REPO, Context, Figure, Report, Server, free_port, summary_ms
from elicitation.queue import rules

NAME = "gateway"
TITLE = "MCP gateway: a tools/call that needs no approval, through the gateway vs directly to the upstream"
PREFIX = "bench-gateway"
UPSTREAM_SCRIPT = REPO / "tests" / "mcp" / "servers" / "gateway_upstream.py"
UPSTREAM_TOKEN = "bench-upstream-token"
UNBOUND_RATES = {"AGENT_RATE": "100000000/min"}
TARGET_MS = 5.0


def start_upstream(port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        [sys.executable, str(UPSTREAM_SCRIPT), "--http", str(port)],
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "UPSTREAM_EXPECTED_TOKEN": UPSTREAM_TOKEN},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        with contextlib.suppress(httpx.TransportError):
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=2)
            return process
        time.sleep(0.1)
    process.kill()
    raise RuntimeError("the upstream MCP server did not start")


def run(ctx: Context) -> Report:
    report = Report(NAME, TITLE)
    fixtures.purge(PREFIX)
    queue = fixtures.create_queue(PREFIX + "-q")
    rules.replace_policy(
        queue,
        {
            "rules": [
                {
                    "name": "deploys go",
                    "match": {"tool": "deploy"},
                    "action": "accept",
                    "content": {"approve": True},
                }
            ]
        },
    )
    agent = fixtures.create_agents(PREFIX, 1, queue)[0]
    rounds, calls = (2, 20) if ctx.quick else (10, 100)
    upstream_port = free_port()
    upstream_url = f"http://127.0.0.1:{upstream_port}/mcp"
    upstreams = {
        "bench": {
            "url": upstream_url,
            "headers": {"Authorization": f"Bearer {UPSTREAM_TOKEN}"},
            "queue": queue.slug,
            "pass": ["read_status"],
        }
    }
    env = {**UNBOUND_RATES, "MCP_GATEWAY_UPSTREAMS": json.dumps(upstreams)}
    # The deployed server unless --servers names others; each server its own process, all up at once.
    servers = [
        Server(kind, env=env, role="gateway", start_timeout=120) for kind in ctx.options.get("servers") or []
    ] or [Server(env=env, role="gateway", start_timeout=120)]
    upstream = start_upstream(upstream_port)
    try:
        with contextlib.ExitStack() as stack:
            base_urls = [stack.enter_context(server).base_url for server in servers]
            timings = asyncio.run(measure(ctx, upstream_url, base_urls, agent.key, rounds, calls))
    finally:
        upstream.terminate()
        upstream.wait(timeout=10)
        fixtures.purge(PREFIX)

    direct, gateway, ruled, floor, door = (
        summary_ms(timings[k]) for k in ("direct", "gateway", "rule", "healthz", "mcp")
    )
    overhead = gateway["p50_ms"] - direct["p50_ms"]
    kind = servers[0].kind
    report.add(
        Figure(
            "proxy overhead, p50 (gateway p50 minus direct p50), call needing no approval",
            overhead,
            "ms",
            f"≤ {TARGET_MS:g} ms",
            overhead <= TARGET_MS,
        ),
        Figure(
            "tools/call through the gateway, p50",
            gateway["p50_ms"],
            "ms",
            "reported",
            None,
            direct["p50_ms"],
            "directly to the upstream",
            gateway["p50_ms"] / direct["p50_ms"],
        ),
        Figure(
            "GET /healthz on the same server (an HTTP round trip, no MCP), p50",
            floor["p50_ms"],
            "ms",
            "reported",
            None,
        ),
        Figure(
            "a /mcp/ tool call on the same server (list_queues: key check, AGENT_RATE, one read), p50",
            door["p50_ms"],
            "ms",
            "reported",
            None,
        ),
        Figure(
            "tools/call an accept rule lets through (request row, audit, forward), p50",
            ruled["p50_ms"],
            "ms",
            "reported",
            None,
            gateway["p50_ms"],
            "a passed tool through the gateway",
            ruled["p50_ms"] / gateway["p50_ms"],
        ),
    )
    report.details = {
        "server": kind,
        "direct": direct,
        "gateway": gateway,
        "accepted by a rule": ruled,
        "healthz": floor,
        "mcp": door,
    }
    for index, other in enumerate(servers[1:], start=1):
        other_gateway = summary_ms(timings[f"gateway-{index}"])
        other_floor = summary_ms(timings[f"healthz-{index}"])
        other_overhead = other_gateway["p50_ms"] - direct["p50_ms"]
        report.add(
            Figure(
                f"proxy overhead, p50, on {other.kind} (same run, same direct calls)",
                other_overhead,
                "ms",
                "reported",
                None,
                overhead,
                f"on {kind}",
                other_overhead / overhead if overhead > 0 else None,
            ),
            Figure(f"GET /healthz on {other.kind}, p50", other_floor["p50_ms"], "ms", "reported", None),
        )
        report.details[f"gateway on {other.kind}"] = other_gateway
        report.details[f"healthz on {other.kind}"] = other_floor
    report.notes.append(
        f"On {', '.join(server.kind for server in servers)}. {rounds} rounds of {calls} sequential calls each way "
        "(direct, through the gateway, accepted by a rule, /mcp/ list_queues), one SDK client per way kept open; "
        "the upstream runs on the same machine over streamable HTTP. The gateway's door is /mcp/'s: the agent key "
        "is looked up on every request (revocation is immediate) with the queue check in the same statement, one "
        "hop off the event loop, then AGENT_RATE is counted in the cache from the loop. A call that cannot be held "
        "is answered as plain JSON."
    )
    return report


async def measure(
    ctx: Context, upstream_url: str, base_urls: list[str], key: str, rounds: int, calls: int
) -> dict[str, list[float]]:
    """Every way's timings; the first server's under plain labels, another server's as `gateway-N`/`healthz-N`."""
    suffixes = ["", *(f"-{index}" for index in range(1, len(base_urls)))]
    timings: dict[str, list[float]] = {"direct": [], "rule": [], "mcp": []}
    for suffix in suffixes:
        timings["gateway" + suffix], timings["healthz" + suffix] = [], []
    progress = ctx.progress.start("calls", rounds * calls * (3 + len(base_urls)))
    async with contextlib.AsyncExitStack() as stack:
        direct_http = await stack.enter_async_context(
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {UPSTREAM_TOKEN}"}, timeout=30)
        )
        direct = await stack.enter_async_context(
            Client(streamable_http_client(upstream_url, http_client=direct_http), cache=None)
        )
        gateways: list[tuple[str, httpx2.AsyncClient, Client]] = []
        for suffix, base_url in zip(suffixes, base_urls, strict=True):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30)
            )
            gateway = await stack.enter_async_context(
                Client(streamable_http_client(base_url + "/mcp/gateway/bench/", http_client=http), cache=None)
            )
            gateways.append((suffix, http, gateway))
        first_http, first_gateway = gateways[0][1], gateways[0][2]
        reviewhub = await stack.enter_async_context(
            Client(streamable_http_client(base_urls[0] + "/mcp/", http_client=first_http), cache=None)
        )
        for client in (
            direct,
            *(gateway for _, _, gateway in gateways),
        ):  # warm up: connections, upstream links
            for _ in range(5):
                await client.call_tool("read_status", {})
        ways = [
            ("direct", direct, "read_status", {}),
            *((f"gateway{suffix}", gateway, "read_status", {}) for suffix, _, gateway in gateways),
            ("rule", first_gateway, "deploy", {"version": "1.0"}),
            ("mcp", reviewhub, "list_queues", {}),
        ]
        done = 0
        for _ in range(rounds):
            for label, client, tool, arguments in ways:
                for _ in range(calls):
                    started = time.perf_counter()
                    result = await client.call_tool(tool, arguments)
                    timings[label].append(time.perf_counter() - started)
                    if result.is_error:
                        raise RuntimeError(f"{label} call failed: {result.content}")
                    done += 1
                progress.update(done)
            # The floor: one HTTP round trip to the same server, no MCP, no database.
            for (suffix, http, _), base_url in zip(gateways, base_urls, strict=True):
                for _ in range(calls):
                    started = time.perf_counter()
                    await http.get(base_url + "/healthz")
                    timings["healthz" + suffix].append(time.perf_counter() - started)
    progress.finish()
    return timings
