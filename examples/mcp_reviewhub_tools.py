"""Use ReviewHub itself as an MCP server: any MCP host routes a question to a human with the `ask_reviewer` tool.

    make run                                                            # terminal 1: prints AGENT_KEY=rh_...
    REVIEWHUB_AGENT_KEY=rh_... python examples/mcp_reviewhub_tools.py    # terminal 2

It asks on queue "default" and waits; answer at http://127.0.0.1:8000/ (login reviewer / reviewer). If nobody
answers within the tool's wait, it keeps the request id and checks again with `get_request`, as a host would.

An MCP host configured by JSON needs only the URL and the key (key names vary a little from host to host):

    {"mcpServers": {"reviewhub": {"type": "http", "url": "http://127.0.0.1:8000/mcp/",
                                   "headers": {"Authorization": "Bearer rh_..."}}}}

Needs `pip install "reviewhub[mcp]"` (the official `mcp` SDK).
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

SCHEMA = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the deployment of 1.4.2?"},
        "note": {"type": "string", "title": "Note for the agent"},
    },
    "required": ["approve"],
}


async def main() -> None:
    url = os.environ.get("REVIEWHUB_URL", "http://127.0.0.1:8000").rstrip("/") + "/mcp/"
    queue = os.environ.get("REVIEWHUB_QUEUE", "default")
    headers = {"Authorization": f"Bearer {os.environ['REVIEWHUB_AGENT_KEY']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(url, http_client=http)) as client,
    ):
        call = await client.call_tool(
            "ask_reviewer",
            {
                "message": "Deploy 1.4.2 to production?",
                "requestedSchema": SCHEMA,
                "queue": queue,
                "waitSeconds": 50,
            },
        )
        while not call.is_error and call.structured_content["status"] in ("pending", "claimed"):
            request_id = call.structured_content["id"]
            print(f"still waiting for a reviewer on {request_id}", file=sys.stderr)
            call = await client.call_tool("get_request", {"id": request_id, "waitSeconds": 50})
    if call.is_error:
        sys.exit(call.content[0].text)  # type: ignore[union-attr]
    print(json.dumps(call.structured_content["result"]))  # the MCP ElicitResult; null if withdrawn


if __name__ == "__main__":
    asyncio.run(main())
