"""2026-07-28 input-required rounds driven by hand (SEP-2322) and answered by ReviewHub reviewers: real MCP servers,
a real `mcp` client session, a live ReviewHub, agent processes that die and come back."""

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.input_required import (
    InputRoundsExceeded,
    complete_result,
    recognize_input_required,
    resolve_input_required,
)
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.mcp.conftest import REPO, Hub, ScriptedReviewer, agent_requests, subprocess_env
from tests.mcp.servers import shapes
from tests.mcp.servers.approvals import server as approvals

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

AGENT = Path(__file__).resolve().parent / "agents" / "round_agent.py"
STATE_KEY = "test-only request-state key, 32+ bytes long......"
ELICIT = {
    "method": "elicitation/create",
    "params": {"mode": "form", "message": "?", "requestedSchema": {"type": "object", "properties": {}}},
}


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- recognition: the final spec's rule, on wire results -----------------------------------------------------------


def test_only_a_tagged_result_with_requests_or_state_is_a_round() -> None:
    asked = recognize_input_required({"resultType": "input_required", "inputRequests": {"k": ELICIT}})
    state_only = recognize_input_required({"resultType": "input_required", "requestState": "s1"})

    assert asked is not None and asked.input_requests == {"k": ELICIT} and asked.request_state is None
    assert state_only is not None and state_only.input_requests == {} and state_only.request_state == "s1"


@pytest.mark.parametrize(
    "wire",
    [
        {"content": [], "inputRequests": {"k": ELICIT}, "requestState": "s"},  # no resultType: complete
        {"resultType": "complete", "content": [], "inputRequests": {"k": ELICIT}},
        {"resultType": "input_required", "inputRequests": {}},  # half-shaped
        {"resultType": "input_required", "inputRequests": {}, "requestState": ""},
        {"resultType": "input_required", "inputRequests": ["not", "a", "map"]},
    ],
)
def test_anything_else_is_a_normal_result(wire: dict[str, Any]) -> None:
    assert recognize_input_required(wire) is None
    assert complete_result(wire).content == []


# --- the rounds, end to end ------------------------------------------------------------------------------------------


async def test_a_round_is_posted_with_its_state_and_retried_with_keyed_answers_and_the_echoed_state(
    hub: Hub,
    scripted_reviewer: ScriptedReviewer,
    reviewhub_client: AsyncReviewHubClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wire = tmp_path / "wire.jsonl"
    monkeypatch.setenv("RH_MCP_RECORD", str(wire))
    async with Client(
        approvals, elicitation_callback=ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    ) as client:
        calling = asyncio.ensure_future(
            resolve_input_required(client.session, "deploy", {"version": "7.0"}, reviewhub_client, hub.queue)
        )
        seen = await scripted_reviewer.answer_next("accept", {"approve": True, "note": "ship it"})
        result = await asyncio.wait_for(calling, 60)

    assert result.content[0].text == "deploy 7.0: approved (ship it)"  # type: ignore[union-attr]
    mcp = seen["context"]["mcp"]
    key = "tests.mcp.servers.approvals:ask_approval"
    assert {k: mcp[k] for k in ("server", "method", "params", "inputKey", "inputKeys", "round")} == {
        "server": "deploy-approvals",
        "method": "tools/call",
        "params": {"name": "deploy", "arguments": {"version": "7.0"}},
        "inputKey": key,
        "inputKeys": [key],
        "round": 1,
    }
    assert mcp["inputRequests"][key]["method"] == "elicitation/create"
    first, retry = records(wire)
    assert (first["requestState"], first["inputResponses"]) == (None, [])
    assert retry["requestState"] == mcp["requestState"]  # echoed byte for byte
    assert retry["inputResponses"] == [key]
    assert retry["arguments"] == first["arguments"] == {"version": "7.0"}
    assert retry["id"] != first["id"]


async def test_every_input_of_a_round_becomes_one_request_of_that_round(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    answers = {"When may 3.1 go out?": {"start": "07:00"}, "Deploy 3.1 to production?": {"approve": False}}
    async with Client(
        approvals, elicitation_callback=ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    ) as client:
        calling = asyncio.ensure_future(
            resolve_input_required(client.session, "release", {"version": "3.1"}, reviewhub_client, hub.queue)
        )
        for _ in range(2):
            claimed = await scripted_reviewer.claim_next()
            await scripted_reviewer.respond(claimed["id"], "accept", answers[claimed["message"]])
        result = await asyncio.wait_for(calling, 60)

    assert result.content[0].text == "release 3.1 at 07:00: rejected (no note)"  # type: ignore[union-attr]
    rounds = [seen["context"]["mcp"] for seen in scripted_reviewer.seen]
    assert rounds[0]["roundId"] == rounds[1]["roundId"]
    assert rounds[0]["requestState"] == rounds[1]["requestState"]
    assert (
        sorted(r["inputKey"] for r in rounds) == rounds[0]["inputKeys"] == sorted(rounds[0]["inputRequests"])
    )


async def test_a_server_that_never_stops_asking_is_cut_off_after_max_rounds(
    hub: Hub, scripted_reviewer: ScriptedReviewer, reviewhub_client: AsyncReviewHubClient
) -> None:
    async with Client(
        approvals, elicitation_callback=ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    ) as client:
        calling = asyncio.ensure_future(
            resolve_input_required(client.session, "endless", {}, reviewhub_client, hub.queue, max_rounds=2)
        )
        for _ in range(2):
            await scripted_reviewer.answer_next("accept", {"ok": True})
        with pytest.raises(InputRoundsExceeded, match=r"'endless'.*after 2 rounds"):
            await asyncio.wait_for(calling, 60)

    assert [seen["message"] for seen in scripted_reviewer.seen] == [
        "Round 1: one more thing?",
        "Round 2: one more thing?",
    ]
    assert len(agent_requests(hub)) == 2  # the third question was never posted


async def test_a_state_only_round_is_retried_with_the_state_and_asks_nobody(
    hub: Hub, reviewhub_client: AsyncReviewHubClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RH_MCP_RECORD", str(tmp_path / "wire.jsonl"))
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(approvals, elicitation_callback=bridge) as client:
        result = await resolve_input_required(client.session, "warm_up", {}, reviewhub_client, hub.queue)

    assert result.content[0].text == "warm after warming"  # type: ignore[union-attr]
    first, retry = records(tmp_path / "wire.jsonl")
    assert first["requestState"] is None and retry["requestState"] is not None
    assert retry["inputResponses"] == []
    assert agent_requests(hub) == []


async def test_a_half_shaped_result_is_the_final_result_and_not_retried(
    hub: Hub, reviewhub_client: AsyncReviewHubClient
) -> None:
    shapes.calls.clear()
    async with Client(
        shapes.server, elicitation_callback=ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    ) as client:
        result = await resolve_input_required(client.session, "half", {}, reviewhub_client, hub.queue)

    assert result.content[0].text == "half-shaped, but final"  # type: ignore[union-attr]
    assert len(shapes.calls) == 1
    assert agent_requests(hub) == []


# --- a restarted agent process ----------------------------------------------------------------------------------------


def agent_process(hub: Hub, tmp_path: Path, *args: str, store: bool = False) -> subprocess.Popen[str]:
    env = subprocess_env(
        REVIEWHUB_URL=hub.url,
        REVIEWHUB_AGENT_KEY=hub.agent_key,
        RH_QUEUE=hub.queue,
        RH_MCP_STATE_KEY=STATE_KEY,
        RH_MCP_RECORD=str(tmp_path / "wire.jsonl"),
        **({"RH_ROUND_STORE": str(tmp_path / "rounds.json")} if store else {}),
    )
    return subprocess.Popen(
        [sys.executable, str(AGENT), *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def until_posted(hub: Hub, *processes: subprocess.Popen[str]) -> dict[str, dict[str, Any]]:
    """The agents' open requests by the version they deploy, once every agent has posted its round (a loaded CI
    box may take a while to start them)."""
    deadline = asyncio.get_running_loop().time() + 90
    while asyncio.get_running_loop().time() < deadline:
        rows = await asyncio.to_thread(agent_requests, hub, "open")
        if len(rows) == len(processes):
            return {row["context"]["mcp"]["params"]["arguments"]["version"]: row for row in rows}
        for process in processes:
            assert process.poll() is None, process.communicate()[1][-3000:]
        await asyncio.sleep(0.05)
    raise AssertionError("the agents never posted their rounds")


def finish(process: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = process.communicate(timeout=90)
    assert process.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines()]


async def test_a_new_agent_process_resumes_rounds_from_open_requests_and_from_the_local_store(
    hub: Hub, scripted_reviewer: ScriptedReviewer, tmp_path: Path
) -> None:
    # Two agents (started together: process start-up dominates this test) each reach their first round.
    stopped = agent_process(hub, tmp_path, "start", "8.0")  # no local store: ReviewHub is its only record
    crashed = agent_process(hub, tmp_path, "start", "9.0", store=True)
    posted = await until_posted(hub, stopped, crashed)
    await asyncio.sleep(0.5)  # both are in their waits
    stopped.send_signal(signal.SIGINT)  # a graceful stop (Ctrl-C): its question stays open
    crashed.kill()  # a crash
    stopped.wait(timeout=30)
    crashed.wait(timeout=30)
    assert sorted(row["status"] for row in agent_requests(hub)) == ["pending", "pending"]
    # 9.0 is answered while no agent runs: it is no longer open, only the local store knows its round.
    await scripted_reviewer.claim_specific(posted["9.0"]["id"])
    await scripted_reviewer.respond(posted["9.0"]["id"], "decline")

    resuming = agent_process(hub, tmp_path, "resume", store=True)
    assert resuming.stdout is not None
    found = json.loads(await asyncio.to_thread(resuming.stdout.readline))  # it has looked for its rounds
    seen = await scripted_reviewer.answer_next("accept", {"approve": True, "note": "resumed"})
    lines = await asyncio.to_thread(finish, resuming)

    rounds = {version: row["context"]["mcp"] for version, row in posted.items()}
    assert sorted(found["pending"]) == sorted(mcp["roundId"] for mcp in rounds.values())
    assert seen["id"] == posted["8.0"]["id"]
    assert sorted(line["text"] for line in lines) == ["deploy 8.0: approved (resumed)", "deploy 9.0: decline"]
    assert len(agent_requests(hub)) == 2  # nothing was asked twice
    assert json.loads((tmp_path / "rounds.json").read_text()) == {}  # finished rounds leave the store
    for version, mcp in rounds.items():
        calls = [
            call for call in records(tmp_path / "wire.jsonl") if call["arguments"] == {"version": version}
        ]
        initial, resumed = calls
        assert initial["requestState"] is None
        assert resumed["requestState"] == mcp["requestState"]  # as stored in ReviewHub, byte for byte
        assert resumed["inputResponses"] == [mcp["inputKey"]]
