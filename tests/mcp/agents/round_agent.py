"""An agent process driving 2026-07-28 input-required rounds by hand, for the restart tests.

    python round_agent.py start VERSION   # call `deploy`; every round is posted to ReviewHub and awaited
    python round_agent.py resume          # a new process: find the unfinished rounds and finish them

Runs the example approvals server inside the process (so each agent process has a new server too, and only
`RH_MCP_STATE_KEY`, shared by both, lets the new one accept the state the old one sealed) and talks to ReviewHub
through `reviewhub_client` ($REVIEWHUB_URL, $REVIEWHUB_AGENT_KEY). `RH_ROUND_STORE` adds a local round store.
Prints one JSON line for what `resume` found and one per finished call.
"""

import asyncio
import json
import os
import sys

from mcp import Client

from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.input_required import (
    JsonFileRoundStore,
    find_pending_rounds,
    resolve_input_required,
    resume_input_required,
)
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.mcp.servers.approvals import server as approvals


async def main(command: str, *args: str) -> None:
    queue = os.environ["RH_QUEUE"]
    store = JsonFileRoundStore(os.environ["RH_ROUND_STORE"]) if os.environ.get("RH_ROUND_STORE") else None
    async with AsyncReviewHubClient() as reviewhub:
        # The callback declares the elicitation capability (and would answer a 2025-style mid-call question).
        bridge = ReviewHubElicitation(reviewhub, queue=queue)
        async with Client(approvals, elicitation_callback=bridge) as client:
            await run(command, args, client, reviewhub, queue, store)


async def run(
    command: str,
    args: tuple[str, ...],
    client: Client,
    reviewhub: AsyncReviewHubClient,
    queue: str,
    store: JsonFileRoundStore | None,
) -> None:
    if command == "start":
        result = await resolve_input_required(
            client.session, "deploy", {"version": args[0]}, reviewhub, queue, store=store
        )
        print(json.dumps({"text": result.content[0].text}), flush=True)  # type: ignore[union-attr]
        return
    pending = await find_pending_rounds(reviewhub, store=store)
    print(json.dumps({"pending": [p.round_id for p in pending]}), flush=True)
    for round_ in pending:
        result = await resume_input_required(client.session, round_, reviewhub, queue, store=store)
        print(json.dumps({"text": result.content[0].text}), flush=True)  # type: ignore[union-attr]


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:]))
