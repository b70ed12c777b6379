"""Drive MCP 2026-07-28 input-required rounds by hand so that a restart loses nothing: every question goes to a
ReviewHub reviewer, and the round (its opaque requestState, the tool and its arguments) is kept in the ReviewHub
request itself, where a restarted agent finds it.

    make run                                                                  # terminal 1: AGENT_KEY=rh_...
    export REVIEWHUB_AGENT_KEY=rh_... RH_MCP_STATE_KEY=$(python -c "import secrets; print(secrets.token_hex(32))")
    python examples/mcp_input_required.py start      # asks; stop it with Ctrl-C while it waits
    python examples/mcp_input_required.py resume     # later, in a new process: finds the round and finishes it

Answer at http://127.0.0.1:8000/ (login reviewer / reviewer, queue "default") whenever you like, before or after
the restart. The server here is the example approvals server started over stdio; `RH_MCP_STATE_KEY` is its
request-state key, the same for both runs (a server that seals state with a per-process key cannot resume).
`rounds.json` (next to this script's working directory) also records rounds answered while nothing was running.

Needs `pip install "reviewhub[mcp]"` (the official `mcp` SDK).
"""

import asyncio
import os
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.input_required import (
    JsonFileRoundStore,
    find_pending_rounds,
    resolve_input_required,
    resume_input_required,
)
from reviewhub_client.mcp_bridge import ReviewHubElicitation

SERVER = StdioServerParameters(
    command=sys.executable,
    args=[str(Path(__file__).resolve().parents[1] / "tests/mcp/servers/approvals.py")],
    env={"RH_MCP_STATE_KEY": os.environ.get("RH_MCP_STATE_KEY", "")},
)


async def main(command: str) -> None:
    queue = os.environ.get("REVIEWHUB_QUEUE", "default")
    store = JsonFileRoundStore("rounds.json")
    async with AsyncReviewHubClient() as reviewhub:  # $REVIEWHUB_URL, $REVIEWHUB_AGENT_KEY
        # The bridge declares the elicitation capability (and answers any 2025-style mid-call question too).
        bridge = ReviewHubElicitation(reviewhub, queue=queue)
        async with Client(SERVER, elicitation_callback=bridge) as client:
            if command == "start":
                result = await resolve_input_required(
                    client.session, "release", {"version": "2.0"}, reviewhub, queue, store=store
                )
                print(result.content[0].text)  # type: ignore[union-attr]
                return
            for pending in await find_pending_rounds(reviewhub, store=store):
                print(
                    f"resuming round {pending.round} of {pending.params['name']} {pending.params['arguments']}"
                )
                result = await resume_input_required(client.session, pending, reviewhub, queue, store=store)
                print(result.content[0].text)  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "start"))
