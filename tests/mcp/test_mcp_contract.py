"""One contract at every door: the MCP door refuses with exactly the body REST answers (`{code, detail, fields?}`,
as the tool error's text and as its structuredContent, `isError: true`), refuses a malformed request id as `invalid`
without a crash, and charges every tool call to the same AGENT_RATE budget as REST, whether the caller holds the
agent's key or an OAuth token acting for it."""

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.test import Client as DjangoClient
from mcp.types import CallToolResult

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import accounts
from tests.mcp.conftest import Hub, LiveReviewHub, agent_api
from tests.mcp.test_mcp_tools import RecordingTransport, mcp_client
from tests.mcp.test_oauth_server import code_from, consent, exchange, pkce, register
from tests.mcp.test_reviewhub_mcp_server import reviewhub_mcp

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve?"}},
    "required": ["approve"],
}
NOT_A_UUID = "not-a-uuid"
BAD_ID_BODY = {
    "code": "invalid",
    "detail": "The request is not valid.",
    "fields": {"id": "Must be a valid UUID."},
}


def refusal(result: CallToolResult) -> dict[str, Any]:
    """The tool error's body: its text must be JSON as it stands (no prefix), and the same as structuredContent."""
    assert result.is_error, result.content
    assert len(result.content) == 1
    body: dict[str, Any] = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body == result.structured_content
    return body


def sse_messages(chunk: bytes) -> list[dict[str, Any]]:
    """JSON-RPC messages in one HTTP body, whether sent as plain JSON or as server-sent events."""
    text = chunk.decode(errors="replace").strip()
    if text.startswith("{"):
        return [json.loads(text)]
    return [json.loads(line[len("data:") :]) for line in text.splitlines() if line.startswith("data:")]


class ServerLog:
    """What a live server wrote to its log since this was made."""

    def __init__(self, server: LiveReviewHub) -> None:
        self.server = server
        self.start = server.log.stat().st_size

    def since(self) -> str:
        with self.server.log.open("rb") as log:
            log.seek(self.start)
            return log.read().decode(errors="replace")


# --- errors: the REST body, and nothing else ---------------------------------------------------------------------


async def test_a_malformed_id_is_an_invalid_error_naming_id_with_no_traceback_logged(hub: Hub) -> None:
    log = ServerLog(hub.server)
    async with reviewhub_mcp(hub) as client:
        read = await client.call_tool("get_request", {"id": NOT_A_UUID})
        waited = await client.call_tool("get_request", {"id": NOT_A_UUID, "waitSeconds": 5})
        cancelled = await client.call_tool("cancel_request", {"id": NOT_A_UUID})
        # A call that did reach the database afterwards: the server is alive and its log is being written.
        listed = await client.call_tool("list_open_requests", {})

    assert refusal(read) == refusal(waited) == refusal(cancelled) == BAD_ID_BODY
    assert not listed.is_error
    written = log.since()
    assert "Traceback" not in written, written
    assert "Error executing tool" not in written, written


async def test_a_tool_error_is_the_rest_body_on_the_wire_with_is_error(hub: Hub) -> None:
    _, other_key = await sync_to_async(accounts.create_agent)("other-agent", queue_slugs=[hub.queue])
    async with reviewhub_mcp(hub, key=other_key) as other_client:
        theirs = await other_client.call_tool(
            "ask_reviewer", {"message": "Theirs", "requestedSchema": SCHEMA, "queue": hub.queue}
        )
    their_id = theirs.structured_content["id"]  # type: ignore[index]
    recording = RecordingTransport()
    async with mcp_client(hub, transport=recording) as client:
        not_mine = await client.call_tool("get_request", {"id": their_id})
    with agent_api(hub) as api:
        rest = api.get(f"/requests/{their_id}")

    # Another agent's request: the same 404 body through both doors, and the request's existence not revealed.
    assert rest.status_code == 404
    assert refusal(not_mine) == rest.json() == {"code": "not_found", "detail": "No such request."}
    answers = [
        message["result"]
        for chunk in recording.wire
        if chunk
        for message in sse_messages(chunk)
        if isinstance(message.get("result"), dict) and "isError" in message["result"]
    ]
    assert len(answers) == 1
    assert answers[0]["isError"] is True
    assert answers[0]["structuredContent"] == rest.json()
    assert [json.loads(block["text"]) for block in answers[0]["content"]] == [rest.json()]


async def test_arguments_the_input_schema_refuses_answer_the_rest_invalid_body(hub: Hub) -> None:
    async with reviewhub_mcp(hub) as client:
        negative_wait = await client.call_tool(
            "ask_reviewer",
            {"message": "Wait?", "requestedSchema": SCHEMA, "queue": hub.queue, "waitSeconds": -1},
        )
        no_message = await client.call_tool("ask_reviewer", {"queue": hub.queue, "requestedSchema": SCHEMA})

    refused = refusal(negative_wait)
    assert (refused["code"], refused["detail"]) == ("invalid", "The request is not valid.")
    assert list(refused["fields"]) == ["waitSeconds"]
    assert list(refusal(no_message)["fields"]) == ["message"]
    assert await sync_to_async(ElicitationRequest.objects.count)() == 0


async def test_a_schema_refusal_reads_the_same_through_both_doors(hub: Hub) -> None:
    nested = {"type": "object", "properties": {"a": {"type": "object"}}}
    async with reviewhub_mcp(hub) as client:
        over_mcp = await client.call_tool(
            "ask_reviewer", {"message": "Nested?", "requestedSchema": nested, "queue": hub.queue}
        )
        missing_schema = await client.call_tool("ask_reviewer", {"message": "Form?", "queue": hub.queue})
    with agent_api(hub) as api:
        over_rest = api.post(
            "/requests", json={"message": "Nested?", "requestedSchema": nested, "queue": hub.queue}
        )
        rest_missing_schema = api.post("/requests", json={"message": "Form?", "queue": hub.queue})

    assert over_rest.status_code == rest_missing_schema.status_code == 400
    assert refusal(over_mcp) == over_rest.json()
    # A refusal of REST's serializer (not the domain's): the same words and field paths over MCP.
    assert refusal(missing_schema) == rest_missing_schema.json()
    assert rest_missing_schema.json()["detail"] == "The request is not valid."


# --- one AGENT_RATE budget behind both doors -------------------------------------------------------------------------

RATE_LIMIT = 4


@pytest.fixture(scope="module")
def rate_limited_server(django_db_setup: None) -> Iterator[LiveReviewHub]:
    """A live ReviewHub whose agents may make RATE_LIMIT calls a day. Its counts live in its own memory (no Redis):
    in the services leg a shared Redis would keep the counts of an earlier run's agents, whose ids a new test
    database hands out again. A day's window: a test never straddles the window's end unless run at midnight UTC."""
    server = LiveReviewHub(AGENT_RATE=f"{RATE_LIMIT}/day", REDIS_URL="")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def rate_hub(rate_limited_server: LiveReviewHub, transactional_db: None) -> Hub:
    queue = Queue.objects.create(slug="rated", name="Rated", default_deadline_seconds=600)
    agent, key = accounts.create_agent("rated-agent", queue_slugs=[queue.slug])
    supervisor = User.objects.create_user("sam")
    queue.supervisors.add(supervisor)
    return Hub(
        url=rate_limited_server.url,
        agent_key=key,
        agent_id=agent.pk,
        reviewer_token=accounts.create_reviewer_token(supervisor, "rate tests"),
        queue=queue.slug,
        server=rate_limited_server,
    )


@pytest.fixture
def oauth_token(rate_hub: Hub, settings: Any) -> str:
    """An OAuth access token for /mcp/ acting for the rate hub's agent, from the consent a supervisor gave."""
    settings.OAUTH_REGISTRATION_RATE = None  # registration has its own limit and tests; one client here
    browser = DjangoClient()
    browser.force_login(User.objects.get(username="sam"))
    world = {"browser": browser, "agent": Agent.objects.get(pk=rate_hub.agent_id)}
    client_id = register(DjangoClient())["client_id"]
    verifier, challenge = pkce()
    code = code_from(consent(world, client_id, challenge, queues=[rate_hub.queue]))
    response = exchange(client_id, code, verifier)
    assert response.status_code == 200, response.content
    return str(response.json()["access_token"])


def ask(queue: str, n: int) -> dict[str, Any]:
    return {"message": f"Question {n}", "requestedSchema": SCHEMA, "queue": queue}


def agent_request_count(hub: Hub) -> int:
    return ElicitationRequest.objects.filter(agent_id=hub.agent_id).count()


def assert_throttled_like_rest(over_mcp: dict[str, Any], over_rest: httpx.Response) -> None:
    """MCP's refusal is REST's 429 body; only the seconds left may have ticked between the two answers."""
    rest = over_rest.json()
    assert over_rest.status_code == 429
    assert rest["retryAfter"] == int(over_rest.headers["Retry-After"])
    assert set(over_mcp) == set(rest) == {"code", "detail", "retryAfter"}
    assert over_mcp["code"] == rest["code"] == "throttled"
    assert 0 <= abs(rest["retryAfter"] - over_mcp["retryAfter"]) <= 1
    waited = over_mcp["retryAfter"]
    assert over_mcp["detail"] == f"Request was throttled. Expected available in {waited} seconds."
    assert 1 <= waited <= 86400


async def test_a_key_that_spent_its_budget_on_rest_is_refused_over_mcp_and_nothing_is_created(
    rate_hub: Hub,
) -> None:
    with agent_api(rate_hub) as api:
        spent = [api.get("/requests").status_code for _ in range(RATE_LIMIT)]
        over_rest = api.get("/requests")
    async with reviewhub_mcp(rate_hub) as client:
        over_mcp = await client.call_tool("ask_reviewer", ask(rate_hub.queue, 1))
        listing = await client.call_tool("list_queues", {})

    assert spent == [200] * RATE_LIMIT
    assert_throttled_like_rest(refusal(over_mcp), over_rest)
    assert refusal(listing)["code"] == "throttled"  # every tool, reads included
    assert await sync_to_async(agent_request_count)(rate_hub) == 0


async def test_a_key_that_spent_its_budget_over_mcp_is_refused_on_rest(rate_hub: Hub) -> None:
    async with reviewhub_mcp(rate_hub) as client:
        asked = [await client.call_tool("ask_reviewer", ask(rate_hub.queue, n)) for n in range(RATE_LIMIT)]
        over_mcp = await client.call_tool("ask_reviewer", ask(rate_hub.queue, RATE_LIMIT))
    with agent_api(rate_hub) as api:
        over_rest = api.post("/requests", json=ask(rate_hub.queue, RATE_LIMIT + 1))

    # The losing side: every call within the budget went through; the first past it did not, through either door.
    assert [result.is_error for result in asked] == [False] * RATE_LIMIT
    assert_throttled_like_rest(refusal(over_mcp), over_rest)
    assert await sync_to_async(agent_request_count)(rate_hub) == RATE_LIMIT


async def test_an_oauth_token_acting_for_an_agent_draws_on_the_agents_budget(
    rate_hub: Hub, oauth_token: str
) -> None:
    half = RATE_LIMIT // 2
    with agent_api(rate_hub) as api:
        spent = [api.get("/requests").status_code for _ in range(half)]
    async with reviewhub_mcp(rate_hub, key=oauth_token) as client:
        asked = [
            await client.call_tool("ask_reviewer", ask(rate_hub.queue, n)) for n in range(RATE_LIMIT - half)
        ]
        over_mcp = await client.call_tool("ask_reviewer", ask(rate_hub.queue, RATE_LIMIT))
    with agent_api(rate_hub) as api:
        over_rest = api.get("/requests")

    assert spent == [200] * half
    assert [result.is_error for result in asked] == [False] * (RATE_LIMIT - half)
    assert_throttled_like_rest(refusal(over_mcp), over_rest)
    assert await sync_to_async(agent_request_count)(rate_hub) == RATE_LIMIT - half
    assert "Traceback" not in rate_hub.server.log.read_text(errors="replace")
