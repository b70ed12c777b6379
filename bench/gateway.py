"""#13 The MCP gateway's overhead: a `tools/call` that needs no approval, through `/mcp/gateway/<name>/`, against the
same call made directly to the upstream.

The upstream is the gateway tests' MCPServer (tests/mcp/servers/gateway_upstream.py) over streamable HTTP on
loopback; both sides are the official SDK's `Client` over streamable HTTP, one call at a time, direct and gateway
calls in alternating rounds so the machine's load falls on both alike. The overhead is the difference of the
p50s: the agent's key checked, one AGENT_RATE charge and a queue check (one read), and the hop to the upstream on
the gateway's kept-open client. Reported beside it: a call an `accept` rule lets through (a request row and its
audit row written and answered at intake, then forwarded).
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
    upstream = start_upstream(upstream_port)
    try:
        env = {**UNBOUND_RATES, "MCP_GATEWAY_UPSTREAMS": json.dumps(upstreams)}
        with Server("daphne", env=env, role="gateway", start_timeout=120) as server:
            timings = asyncio.run(
                measure(ctx, upstream_url, server.base_url + "/mcp/gateway/bench/", agent.key, rounds, calls)
            )
    finally:
        upstream.terminate()
        upstream.wait(timeout=10)
        fixtures.purge(PREFIX)

    direct, gateway, ruled, floor, door = (
        summary_ms(timings[k]) for k in ("direct", "gateway", "rule", "healthz", "mcp")
    )
    overhead = gateway["p50_ms"] - direct["p50_ms"]
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
        "direct": direct,
        "gateway": gateway,
        "accepted by a rule": ruled,
        "healthz": floor,
        "mcp": door,
    }
    report.notes.append(
        f"{rounds} rounds of {calls} sequential calls each way (direct, through the gateway, accepted by a rule, "
        "/mcp/ list_queues), one SDK client per way kept open; the upstream runs on the same machine over "
        "streamable HTTP. The gateway's door is /mcp/'s: the agent key is looked up on every request (revocation is "
        "immediate) and AGENT_RATE is charged in the cache, each one hop off the event loop, as for the /mcp/ call."
    )
    return report


async def measure(
    ctx: Context, upstream_url: str, gateway_url: str, key: str, rounds: int, calls: int
) -> dict[str, list[float]]:
    timings: dict[str, list[float]] = {"direct": [], "gateway": [], "rule": [], "healthz": [], "mcp": []}
    base_url = gateway_url.split("/mcp/")[0]
    healthz = base_url + "/healthz"
    progress = ctx.progress.start("calls", rounds * calls * 4)
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {UPSTREAM_TOKEN}"}, timeout=30) as direct_http,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as gateway_http,
        Client(streamable_http_client(upstream_url, http_client=direct_http), cache=None) as direct,
        Client(streamable_http_client(gateway_url, http_client=gateway_http), cache=None) as gateway,
        Client(streamable_http_client(base_url + "/mcp/", http_client=gateway_http), cache=None) as reviewhub,
    ):
        for client in (direct, gateway):  # warm up: connections, the gateway's upstream link
            for _ in range(5):
                await client.call_tool("read_status", {})
        done = 0
        for _ in range(rounds):
            for label, client, tool, arguments in (
                ("direct", direct, "read_status", {}),
                ("gateway", gateway, "read_status", {}),
                ("rule", gateway, "deploy", {"version": "1.0"}),
                ("mcp", reviewhub, "list_queues", {}),
            ):
                for _ in range(calls):
                    started = time.perf_counter()
                    result = await client.call_tool(tool, arguments)
                    timings[label].append(time.perf_counter() - started)
                    if result.is_error:
                        raise RuntimeError(f"{label} call failed: {result.content}")
                    done += 1
                progress.update(done)
            for _ in range(calls):  # the floor: one HTTP round trip to the same server, no MCP, no database
                started = time.perf_counter()
                await gateway_http.get(healthz)
                timings["healthz"].append(time.perf_counter() - started)
    progress.finish()
    return timings
