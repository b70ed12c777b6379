"""The copy-paste examples work as documented, against a live ReviewHub with a reviewer answering."""

import asyncio
import json
import subprocess
import sys

import pytest

from tests.mcp.conftest import REPO, Hub, ScriptedReviewer, subprocess_env

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

ANSWERS = {
    "Deploy 1.4.2 to production?": {"approve": True, "note": "go"},  # examples/mcp_reviewhub_tools.py
    "Deploy 1.4 to production?": {"approve": True, "note": "tonight"},  # examples/mcp_bridge.py
}


def example(hub: Hub, script: str) -> subprocess.Popen[str]:
    env = subprocess_env(REVIEWHUB_URL=hub.url, REVIEWHUB_AGENT_KEY=hub.agent_key, REVIEWHUB_QUEUE=hub.queue)
    return subprocess.Popen(
        [sys.executable, str(REPO / "examples" / script)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def output(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=90)
    assert process.returncode == 0, err[-3000:]
    return out


async def test_the_mcp_examples_print_what_the_reviewer_answered(
    hub: Hub, scripted_reviewer: ScriptedReviewer
) -> None:
    # Both at once: starting Python processes is most of this test's time.
    tools, bridge = example(hub, "mcp_reviewhub_tools.py"), example(hub, "mcp_bridge.py")
    try:
        for _ in range(2):
            claimed = await scripted_reviewer.claim_next(timeout=90)
            await scripted_reviewer.respond(claimed["id"], "accept", ANSWERS[claimed["message"]])
        tools_out, bridge_out = await asyncio.gather(
            asyncio.to_thread(output, tools), asyncio.to_thread(output, bridge)
        )
    finally:
        for process in (tools, bridge):
            if process.poll() is None:
                process.kill()
                process.wait()

    assert json.loads(tools_out) == {"action": "accept", "content": {"approve": True, "note": "go"}}
    assert bridge_out.strip() == "deploy 1.4: approved (tonight)"
    bridge_request = next(
        seen for seen in scripted_reviewer.seen if seen["message"] == "Deploy 1.4 to production?"
    )
    assert bridge_request["context"]["mcp"]["tool"] == "deploy"
