"""The input-required driver over a real 2026-07-28 session (streamable HTTP, `server/discover`, per-request
`_meta`) against a server written at the wire level, answered by a reviewer on a live ReviewHub.

The final result of that server carries no `resultType`, which a client MUST read as `complete`; the SDK's typed
`send_request` refuses it, so the driver reads results without that validation (see `send_unvalidated`).
"""

import asyncio
from collections.abc import Iterator

import pytest
from mcp import Client
from pydantic import ValidationError

from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.input_required import resolve_input_required
from reviewhub_client.mcp_bridge import ReviewHubElicitation
from tests.mcp.conftest import Hub, ScriptedReviewer
from tests.mcp.servers.mrtr_wire import VERSION, MrtrWireServer

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def wire_server() -> Iterator[MrtrWireServer]:
    server = MrtrWireServer().start()
    yield server
    server.stop()


async def test_a_2026_session_completes_on_a_result_without_result_type_and_echoes_the_state_under_a_new_id(
    wire_server: MrtrWireServer,
    hub: Hub,
    scripted_reviewer: ScriptedReviewer,
    reviewhub_client: AsyncReviewHubClient,
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(wire_server.url, elicitation_callback=bridge) as client:
        assert client.session.protocol_version == VERSION
        calling = asyncio.ensure_future(
            resolve_input_required(client.session, "confirm", {"version": "2.0"}, reviewhub_client, hub.queue)
        )
        seen = await scripted_reviewer.answer_next("accept", {"confirmed": True})
        result = await asyncio.wait_for(calling, 60)

    assert not result.is_error
    assert result.content[0].text == "2.0: shipped"  # type: ignore[union-attr]
    assert seen["message"] == "Ship 2.0 to production?"
    assert seen["context"]["mcp"]["requestState"] == wire_server.states[0]
    first, retry = wire_server.calls
    assert "requestState" not in first["params"] and "inputResponses" not in first["params"]
    assert retry["params"]["requestState"] == wire_server.states[0]  # echoed byte for byte
    answer = retry["params"]["inputResponses"]["ship"]
    assert (answer["action"], answer["content"]) == ("accept", {"confirmed": True})
    assert answer["_meta"]["reviewhub/receipt"]  # the decision's receipt reaches the server
    assert retry["params"]["arguments"] == first["params"]["arguments"] == {"version": "2.0"}
    assert retry["id"] != first["id"]
    for call in (first, retry):  # sent as the session sends any request at 2026-07-28
        assert call["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"] == VERSION
        assert "elicitation" in call["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]
        assert (call["headers"]["mcp-method"], call["headers"]["mcp-name"]) == ("tools/call", "confirm")
        assert call["headers"]["mcp-protocol-version"] == VERSION


async def test_a_declined_question_is_retried_with_the_decline_and_its_final_result_returned(
    wire_server: MrtrWireServer,
    hub: Hub,
    scripted_reviewer: ScriptedReviewer,
    reviewhub_client: AsyncReviewHubClient,
) -> None:
    bridge = ReviewHubElicitation(reviewhub_client, queue=hub.queue)
    async with Client(wire_server.url, elicitation_callback=bridge) as client:
        calling = asyncio.ensure_future(
            resolve_input_required(client.session, "confirm", {"version": "2.1"}, reviewhub_client, hub.queue)
        )
        await scripted_reviewer.answer_next("decline")
        result = await asyncio.wait_for(calling, 60)

    assert result.content[0].text == "2.1: held"  # type: ignore[union-attr]
    assert wire_server.calls[1]["params"]["inputResponses"]["ship"]["action"] == "decline"


async def test_the_sdks_typed_path_still_refuses_a_result_without_result_type(
    wire_server: MrtrWireServer,
) -> None:
    # Why send_unvalidated exists. When this fails, the SDK reads such a result itself: drop the workaround.
    async with Client(wire_server.url) as client:
        await client.session.call_tool("confirm", {"version": "2.2"}, allow_input_required=True)
        with pytest.raises(ValidationError, match="resultType"):
            await client.session.call_tool(
                "confirm",
                {"version": "2.2"},
                input_responses={"ship": {"action": "accept", "content": {"confirmed": True}}},  # type: ignore[dict-item]
                request_state=wire_server.states[0],
                allow_input_required=True,
            )
