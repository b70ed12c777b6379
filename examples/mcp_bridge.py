"""Let ReviewHub reviewers answer an MCP server's questions: any tool that elicits (a 2025-11-25 `ctx.elicit`,
a 2026-07-28 `InputRequiredResult`, form or URL mode) gets its answer from a human in a ReviewHub queue.

    make run                                                   # terminal 1: prints AGENT_KEY=rh_...
    REVIEWHUB_AGENT_KEY=rh_... python examples/mcp_bridge.py    # terminal 2

By default it starts the example approvals server (tests/mcp/servers/approvals.py) over stdio and calls
`deploy {"version": "1.4"}`. Answer the question at http://127.0.0.1:8000/ (login reviewer / reviewer, queue
"default"); the tool's result is printed. Another server and tool:

    python examples/mcp_bridge.py TOOL '{"arg": 1}' -- python my_server.py

Needs `pip install "reviewhub[mcp]"` (the official `mcp` SDK).
"""

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp import StdioServerParameters

from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.mcp_bridge import ReviewHubElicitation

EXAMPLE_SERVER = [sys.executable, str(Path(__file__).resolve().parents[1] / "tests/mcp/servers/approvals.py")]


async def main(tool: str, arguments: dict[str, object], command: list[str]) -> None:
    queue = os.environ.get("REVIEWHUB_QUEUE", "default")
    server = StdioServerParameters(command=command[0], args=command[1:])
    async with AsyncReviewHubClient() as reviewhub:  # $REVIEWHUB_URL, $REVIEWHUB_AGENT_KEY
        # timeout=None: wait as long as the request lives (its deadline ends it with the queue's expiry outcome).
        bridge = ReviewHubElicitation(reviewhub, queue=queue, timeout=None)
        # connect(): the bridge as elicitation callback, a real client_info, elicitation/complete forwarded.
        async with bridge.connect(server) as client:
            print(
                f"connected ({client.protocol_version}); calling {tool} {json.dumps(arguments)}",
                file=sys.stderr,
            )
            result = await bridge.call_tool(client, tool, arguments)  # names the tool for the reviewer
    for block in result.content:
        print(getattr(block, "text", block))


if __name__ == "__main__":
    args = sys.argv[1:]
    command = EXAMPLE_SERVER
    if "--" in args:
        command = args[args.index("--") + 1 :]
        args = args[: args.index("--")]
    tool = args[0] if args else "deploy"
    arguments = json.loads(args[1]) if len(args) > 1 else {"version": "1.4"}
    asyncio.run(main(tool, arguments, command))
