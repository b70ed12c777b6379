"""An upstream MCP server for the gateway tests, on the official SDK's `MCPServer`: over stdio
(`python tests/mcp/servers/gateway_upstream.py`, the gateway starts it) or streamable HTTP
(`... --http PORT`, on loopback).

Every `tools/call` it runs is appended to `$UPSTREAM_CALL_LOG` as a JSON line (tool, arguments, transport), so a
test can tell how many times the upstream saw a call. The credential the gateway was configured with must arrive:
over stdio `$UPSTREAM_TOKEN` must equal `$UPSTREAM_EXPECTED_TOKEN`, over HTTP `Authorization` must be
`Bearer $UPSTREAM_EXPECTED_TOKEN`; otherwise the tools refuse (stdio) or the request is 401 (HTTP).
"""

import argparse
import json
import os
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings

TRANSPORT = {"name": "stdio"}
server = MCPServer("gateway-upstream", instructions="A test upstream for ReviewHub's gateway.")


def record(tool: str, arguments: dict[str, Any]) -> None:
    path = os.environ.get("UPSTREAM_CALL_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(
                json.dumps({"tool": tool, "arguments": arguments, "transport": TRANSPORT["name"]}) + "\n"
            )


def check_token() -> None:
    if TRANSPORT["name"] == "stdio" and os.environ.get("UPSTREAM_TOKEN") != os.environ.get(
        "UPSTREAM_EXPECTED_TOKEN"
    ):
        raise RuntimeError("the upstream credential did not arrive")


@server.tool(description="Deploy a version to an environment.")
def deploy(version: str, environment: str = "production") -> str:
    check_token()
    record("deploy", {"version": version, "environment": environment})
    return f"deployed {version} to {environment}"


@server.tool(description="Read the service status (read-only).")
def read_status() -> str:
    check_token()
    record("read_status", {})
    return "all green"


@server.tool(description="The names of the environment variables this process was started with.")
def environment_names() -> list[str]:
    return sorted(os.environ)


@server.tool(description="Always fails inside the tool.")
def explode() -> str:
    record("explode", {})
    raise ToolError("the upstream tool failed on purpose")


@server.tool(description="Answers after the given seconds (an upstream slower than the gateway waits for).")
async def stall(seconds: float) -> str:
    record("stall", {"seconds": seconds})
    await anyio.sleep(seconds)
    return "awake"


@server.tool(description="Ends the upstream process (a crash, as the gateway sees it).")
def crash() -> str:
    record("crash", {})
    os._exit(3)


@server.resource("status://current", description="The current status.")
def status_resource() -> str:
    return "status: all green"


@server.prompt(description="A greeting prompt.")
def greet(name: str) -> str:
    return f"Hello, {name}!"


class RequireBearer:
    """The upstream's own auth over HTTP: the header the gateway's configuration carries."""

    def __init__(self, app: Any, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != self.expected:
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b""})
            return
        await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, help="serve streamable HTTP on this loopback port")
    args = parser.parse_args()
    if args.http is None:
        server.run("stdio")
        return
    TRANSPORT["name"] = "http"
    app = server.streamable_http_app(
        stateless_http=True,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    uvicorn.run(
        RequireBearer(app, os.environ["UPSTREAM_EXPECTED_TOKEN"]),
        host="127.0.0.1",
        port=args.http,
        log_level="warning",
        lifespan="on",
    )


if __name__ == "__main__":
    main()
