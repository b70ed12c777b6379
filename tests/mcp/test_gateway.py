"""The MCP gateway end to end, with the official SDK on both sides: an upstream built on `MCPServer` over stdio (the
gateway starts it) and over streamable HTTP (on loopback), a live ReviewHub fronting both at
`/mcp/gateway/<name>/`, and the SDK's `Client` over streamable HTTP as the agent. Reviewers decide through
`transitions`, the functions the request page calls."""

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult

from elicitation.mcp.tasks import TASKS_EXTENSION
from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import accounts, rules, transitions
from tests.delivery.liveserver import LiveServer, free_port
from tests.mcp.conftest import REPO, SERVERS, LiveReviewHub
from tests.mcp.test_tasks import CreateTaskResult, Tasks, cancel_task, get_task, poll_until_done

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

QUEUE = "gw-ops"
UPSTREAM_SECRET = "upstream-secret-5f1d9c"
UPSTREAM_SCRIPT = SERVERS / "gateway_upstream.py"
PASSED = ["read_status", "explode", "crash", "environment_names"]


@dataclass
class Gateway:
    server: LiveServer
    call_log: Path

    def url(self, name: str) -> str:
        return f"{self.server.url}/mcp/gateway/{name}/"

    def upstream_calls(self) -> list[dict[str, Any]]:
        if not self.call_log.exists():
            return []
        return [json.loads(line) for line in self.call_log.read_text().splitlines() if line]


def wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    while process.poll() is None:
        try:
            httpx.get(f"http://127.0.0.1:{port}/mcp", timeout=5)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError("the HTTP upstream exited at start")


@pytest.fixture(scope="module")
def gateway(django_db_setup: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    call_log = tmp_path_factory.mktemp("gateway") / "calls.jsonl"
    upstream_env = {"UPSTREAM_CALL_LOG": str(call_log), "UPSTREAM_EXPECTED_TOKEN": UPSTREAM_SECRET}
    http_port = free_port()
    http_upstream = subprocess.Popen(
        [sys.executable, str(UPSTREAM_SCRIPT), "--http", str(http_port)],
        cwd=REPO,
        env={**upstream_env, "PATH": "/usr/bin:/bin"},
    )
    wait_for_port(http_port, http_upstream)
    upstreams = {
        "tools": {
            "command": [sys.executable, str(UPSTREAM_SCRIPT)],
            "env": {**upstream_env, "UPSTREAM_TOKEN": UPSTREAM_SECRET},
            "queue": QUEUE,
            "pass": PASSED,
        },
        "web": {
            "url": f"http://127.0.0.1:{http_port}/mcp",
            "headers": {"Authorization": f"Bearer {UPSTREAM_SECRET}"},
            "queue": QUEUE,
            "pass": PASSED,
        },
        "down": {"url": f"http://127.0.0.1:{free_port()}/mcp", "queue": QUEUE, "timeout": 5},
        "slow": {
            "url": f"http://127.0.0.1:{http_port}/mcp",
            "headers": {"Authorization": f"Bearer {UPSTREAM_SECRET}"},
            "queue": QUEUE,
            "pass": ["stall", "read_status"],
            "timeout": 1,
        },
    }
    server = LiveReviewHub(
        MCP_GATEWAY_UPSTREAMS=json.dumps(upstreams),
        PERIODIC_SWEEPS_IN_PROCESS="false",  # expiry is applied by the test, as the sweeper would
        LOG_LEVEL="INFO",
    ).start()
    try:
        yield Gateway(server=server, call_log=call_log)
    finally:
        server.stop()
        http_upstream.terminate()
        http_upstream.wait(timeout=10)


@dataclass
class Setup:
    agent_key: str
    agent_id: int
    queue: Queue
    alice: User
    bob: User
    staff: User


@pytest.fixture
def setup(gateway: Gateway, transactional_db: None) -> Setup:
    gateway.call_log.unlink(missing_ok=True)
    queue = Queue.objects.create(
        slug=QUEUE, name="Gateway ops", lease_seconds=60, default_deadline_seconds=600
    )
    agent, key = accounts.create_agent("gw-agent", queue_slugs=[QUEUE])
    alice, bob = User.objects.create_user("alice"), User.objects.create_user("bob")
    queue.members.add(alice, bob)
    staff = User.objects.create_user("operator", is_staff=True, is_superuser=True)
    return Setup(agent_key=key, agent_id=agent.pk, queue=queue, alice=alice, bob=bob, staff=staff)


@asynccontextmanager
async def gateway_client(
    gateway: Gateway,
    name: str,
    key: str,
    extensions: list[Tasks] | None = None,
    content_types: list[str] | None = None,
) -> AsyncIterator[Client]:
    """The SDK's client as the agent; `content_types` collects the media type of each response with a body."""

    async def record(response: httpx2.Response) -> None:
        if content_types is not None and response.status_code == 200:
            content_types.append(response.headers.get("content-type", "").split(";")[0])

    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx2.Timeout(30, read=120),
            event_hooks={"response": [record]},
        ) as http,
        Client(streamable_http_client(gateway.url(name), http_client=http), extensions=extensions) as client,
    ):
        yield client


def text_of(result: CallToolResult) -> str:
    return "".join(getattr(block, "text", "") for block in result.content)


async def open_request(seconds: float = 60) -> ElicitationRequest:
    """The gateway's approval request, once it is in the queue."""
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        found = await asyncio.to_thread(
            lambda: (
                ElicitationRequest.objects.filter(status__in=["pending", "claimed"])
                .order_by("-created_at")
                .first()
            )
        )
        if found is not None:
            return found
        assert asyncio.get_running_loop().time() < deadline, "no approval request reached the queue"
        await asyncio.sleep(0.05)


async def decide(request_id: Any, user: User, action: str, content: dict[str, Any] | None = None) -> None:
    """What the request page's Claim and Answer buttons do."""

    def run() -> None:
        transitions.claim_request(request_id, user=user)
        transitions.respond(request_id, user=user, action=action, content=content)

    await asyncio.to_thread(run)


async def status_of(request_id: Any, wanted: str, seconds: float = 30) -> str:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        status = await asyncio.to_thread(lambda: ElicitationRequest.objects.get(pk=request_id).status)
        if status == wanted or asyncio.get_running_loop().time() > deadline:
            return str(status)
        await asyncio.sleep(0.05)


@pytest.mark.parametrize("name", ["tools", "web"])
async def test_tool_lists_resources_and_prompts_pass_through(
    gateway: Gateway, setup: Setup, name: str
) -> None:
    async with gateway_client(gateway, name, setup.agent_key) as client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        read = await client.read_resource("status://current")
        prompts = [p.name for p in (await client.list_prompts()).prompts]
        prompt = await client.get_prompt("greet", {"name": "Zoë"})

    assert tools == {"deploy", "read_status", "explode", "crash", "environment_names", "stall"}
    assert resources == ["status://current"]
    assert read.contents[0].text == "status: all green"  # type: ignore[union-attr]
    assert prompts == ["greet"]
    assert "Hello, Zoë!" in json.dumps(prompt.model_dump(mode="json"), ensure_ascii=False)


@pytest.mark.parametrize("name", ["tools", "web"])
async def test_a_call_that_needs_no_approval_passes_straight_through(
    gateway: Gateway, setup: Setup, name: str
) -> None:
    async with gateway_client(gateway, name, setup.agent_key) as client:
        result = await client.call_tool("read_status", {})

    assert not result.is_error
    assert text_of(result) == "all green"
    assert gateway.upstream_calls() == [
        {"tool": "read_status", "arguments": {}, "transport": "stdio" if name == "tools" else "http"}
    ]
    assert await asyncio.to_thread(ElicitationRequest.objects.count) == 0


@pytest.mark.parametrize("name", ["tools", "web"])
async def test_an_approved_call_is_forwarded_once_and_its_result_returned(
    gateway: Gateway, setup: Setup, name: str
) -> None:
    beats: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        beats.append(progress)

    async with gateway_client(gateway, name, setup.agent_key) as client:
        call = asyncio.ensure_future(
            client.call_tool("deploy", {"version": "1.4"}, progress_callback=on_progress)
        )
        request = await open_request()
        assert gateway.upstream_calls() == []  # held: nothing reached the upstream yet
        await asyncio.sleep(
            1.5
        )  # a beat of progress while a person decides (MCP_PROGRESS_INTERVAL_SECONDS=1)
        await decide(request.pk, setup.alice, "accept", {"approve": True})
        result = await asyncio.wait_for(call, 60)

    assert not result.is_error, result.content
    assert text_of(result) == "deployed 1.4 to production"
    assert gateway.upstream_calls() == [
        {
            "tool": "deploy",
            "arguments": {"version": "1.4", "environment": "production"},  # the upstream's default filled in
            "transport": "stdio" if name == "tools" else "http",
        }
    ]
    assert beats, "no progress notification while the call was held"
    mcp_context = request.context["mcp"]
    assert (mcp_context["server"], mcp_context["tool"], mcp_context["arguments"]) == (
        name,
        "deploy",
        {"version": "1.4"},
    )
    assert mcp_context["digest"] == rules.request_digest_of(request)
    assert (request.requested_schema or {})["required"] == ["approve"]
    assert result.meta is not None
    assert result.meta["reviewhub/gateway"] == {"requestId": str(request.pk), "digest": mcp_context["digest"]}
    assert UPSTREAM_SECRET not in json.dumps(request.context) + request.message


async def test_only_a_call_that_may_wait_for_a_person_is_answered_as_a_stream(
    gateway: Gateway, setup: Setup
) -> None:
    """Lists and passed tools cannot be held, so they are answered as plain JSON; a held call streams, so its
    progress notifications reach the client while a person decides."""
    content_types: list[str] = []
    first_beat = asyncio.Event()

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        first_beat.set()

    async with gateway_client(gateway, "web", setup.agent_key, content_types=content_types) as client:
        await client.list_tools()
        await client.call_tool("read_status", {})
        unheld = list(content_types)
        call = asyncio.ensure_future(
            client.call_tool("deploy", {"version": "1.5"}, progress_callback=on_progress)
        )
        request = await open_request()
        await asyncio.wait_for(first_beat.wait(), 60)
        await decide(request.pk, setup.alice, "accept", {"approve": True})
        result = await asyncio.wait_for(call, 60)

    assert len(unheld) >= 2 and set(unheld) == {"application/json"}  # the client's own discovery among them
    assert content_types[len(unheld) :] == ["text/event-stream"]
    assert text_of(result) == "deployed 1.5 to production"


async def test_a_declined_call_is_a_tool_error_and_never_reaches_the_upstream(
    gateway: Gateway, setup: Setup
) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        call = asyncio.ensure_future(client.call_tool("deploy", {"version": "9.9"}))
        request = await open_request()
        await decide(request.pk, setup.alice, "decline")
        result = await asyncio.wait_for(call, 60)

    assert result.is_error
    assert result.structured_content == {
        "code": "declined",
        "detail": "The call to 'deploy' on 'tools' was not forwarded: the reviewer declined it.",
        "requestId": str(request.pk),
    }
    assert "declined" in text_of(result)
    assert gateway.upstream_calls() == []


async def test_an_approval_answered_no_is_refused_too(gateway: Gateway, setup: Setup) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        call = asyncio.ensure_future(client.call_tool("deploy", {"version": "9.8"}))
        request = await open_request()
        await decide(request.pk, setup.alice, "accept", {"approve": False})
        result = await asyncio.wait_for(call, 60)

    assert result.is_error
    assert result.structured_content["code"] == "declined"
    assert gateway.upstream_calls() == []


async def test_an_expired_approval_is_a_tool_error_saying_so(gateway: Gateway, setup: Setup) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        call = asyncio.ensure_future(client.call_tool("deploy", {"version": "2.0"}))
        request = await open_request()
        await asyncio.to_thread(transitions.expire_request, request.pk, actor_user=setup.staff)
        result = await asyncio.wait_for(call, 60)

    assert result.is_error
    assert result.structured_content["code"] == "expired"
    assert "nobody decided before the approval request expired" in text_of(result)
    assert gateway.upstream_calls() == []


async def test_a_client_that_disconnects_withdraws_its_held_call(gateway: Gateway, setup: Setup) -> None:
    async def call(client: Client) -> None:
        await client.call_tool("deploy", {"version": "3.0"})

    async with (
        gateway_client(gateway, "tools", setup.agent_key) as client,
        anyio.create_task_group() as group,
    ):
        group.start_soon(call, client)
        request = await open_request()
        group.cancel_scope.cancel()  # the client goes away mid-hold

    assert await status_of(request.pk, "withdrawn") == "withdrawn"
    await asyncio.sleep(0.5)
    assert gateway.upstream_calls() == []


async def test_an_auto_accept_rule_forwards_without_a_person(gateway: Gateway, setup: Setup) -> None:
    await asyncio.to_thread(
        rules.replace_policy,
        setup.queue,
        {
            "rules": [
                {
                    "name": "patch releases go out",
                    "match": {
                        "server": "tools",
                        "tool": "deploy",
                        "arguments": {"version": {"regex": r"^1\.4\.\d+$"}},
                    },
                    "action": "accept",
                    "content": {"approve": True},
                }
            ]
        },
    )
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        result = await asyncio.wait_for(client.call_tool("deploy", {"version": "1.4.2"}), 30)

    assert not result.is_error, result.content
    assert text_of(result) == "deployed 1.4.2 to production"
    [request] = await asyncio.to_thread(lambda: list(ElicitationRequest.objects.all()))
    assert request.status == "completed" and request.answered_by_id is None
    assert [call["tool"] for call in gateway.upstream_calls()] == ["deploy"]


async def test_a_quorum_of_two_forwards_only_after_the_second_approval(
    gateway: Gateway, setup: Setup
) -> None:
    await asyncio.to_thread(rules.replace_policy, setup.queue, {"quorum": {"approvals": 2}})
    async with gateway_client(gateway, "web", setup.agent_key) as client:
        call = asyncio.ensure_future(client.call_tool("deploy", {"version": "5.0"}))
        request = await open_request()
        await decide(request.pk, setup.alice, "accept", {"approve": True})
        await asyncio.sleep(2.5)  # past a long-poll recheck: one approval of two forwards nothing
        assert not call.done()
        assert gateway.upstream_calls() == []
        await asyncio.to_thread(transitions.respond, request.pk, user=setup.bob, action="accept")
        result = await asyncio.wait_for(call, 60)

    assert not result.is_error, result.content
    assert [call["tool"] for call in gateway.upstream_calls()] == ["deploy"]


async def test_an_unknown_gateway_name_is_a_404(gateway: Gateway, setup: Setup) -> None:
    async with httpx.AsyncClient(base_url=gateway.server.url, timeout=10) as http:
        response = await http.post(
            "/mcp/gateway/nope/",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={
                "Authorization": f"Bearer {setup.agent_key}",
                "Accept": "application/json, text/event-stream",
            },
        )
        anonymous = await http.post(
            "/mcp/gateway/tools/", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
        )

    assert response.status_code == 404
    assert response.text == "No MCP gateway by that name."
    assert anonymous.status_code == 401
    assert anonymous.headers["www-authenticate"].startswith("Bearer")


async def test_an_agent_not_on_the_gateways_queue_is_refused(gateway: Gateway, setup: Setup) -> None:
    await asyncio.to_thread(Queue.objects.create, slug="elsewhere", name="Elsewhere")
    _, other_key = await asyncio.to_thread(accounts.create_agent, "other-agent", queue_slugs=["elsewhere"])
    async with gateway_client(gateway, "tools", other_key) as client:
        with pytest.raises(MCPError) as listed:
            await client.list_tools()
        result = await client.call_tool("read_status", {})

    assert "Unknown queue" in str(listed.value)
    assert result.is_error and result.structured_content["code"] == "invalid"
    assert gateway.upstream_calls() == []


async def test_upstream_failures_are_reported_never_a_500(gateway: Gateway, setup: Setup) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        failed_tool = await client.call_tool("explode", {})
        with pytest.raises(MCPError) as crashed:
            await client.call_tool("crash", {})
        after_crash = await client.call_tool("read_status", {})  # a new upstream process
    async with gateway_client(gateway, "down", setup.agent_key) as client:
        with pytest.raises(MCPError) as unreachable:
            await client.list_tools()

    assert failed_tool.is_error and "the upstream tool failed on purpose" in text_of(failed_tool)
    assert "Upstream MCP server 'tools' is unavailable: the connection closed" in str(crashed.value)
    assert text_of(after_crash) == "all green"
    assert "Upstream MCP server 'down' is unavailable" in str(unreachable.value)
    assert UPSTREAM_SECRET not in gateway.server.logs()


async def test_an_upstream_slower_than_its_timeout_is_reported_and_its_link_kept(
    gateway: Gateway, setup: Setup
) -> None:
    async with gateway_client(gateway, "slow", setup.agent_key) as client:
        with pytest.raises(MCPError) as late:
            await client.call_tool("stall", {"seconds": 10})
        after = await client.call_tool("read_status", {})

    assert late.value.error.code == -32011
    assert "Upstream MCP server 'slow' did not answer within 1 s" in str(late.value)
    assert text_of(after) == "all green"  # on the link that stayed open


async def test_a_tasks_client_gets_a_task_at_once_and_the_approved_result_once(
    gateway: Gateway, setup: Setup
) -> None:
    async with gateway_client(gateway, "web", setup.agent_key, extensions=[Tasks()]) as client:
        assert TASKS_EXTENSION in (client.server_capabilities.extensions or {})
        created = await asyncio.wait_for(
            client.session.call_tool("deploy", {"version": "7.0"}, allow_claimed=True), 20
        )
        assert isinstance(created, CreateTaskResult), created
        working = await get_task(client, created.task_id)
        request = await open_request()
        assert gateway.upstream_calls() == []
        await decide(request.pk, setup.alice, "accept", {"approve": True})
        done = await poll_until_done(client, created.task_id)
        again = await get_task(client, created.task_id)
        passed = await client.session.call_tool(
            "read_status", {}, allow_claimed=True
        )  # no task for a passed tool

    assert working["status"] == "working"
    assert done["status"] == "completed"
    assert done["result"]["content"][0]["text"] == "deployed 7.0 to production"
    assert again["result"] == done["result"]
    assert isinstance(passed, CallToolResult) and text_of(passed) == "all green"
    assert [call["tool"] for call in gateway.upstream_calls()] == ["deploy", "read_status"]


async def test_a_declined_task_completes_with_the_tool_error_and_a_cancelled_one_withdraws(
    gateway: Gateway, setup: Setup
) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key, extensions=[Tasks()]) as client:
        declined = await client.session.call_tool("deploy", {"version": "8.0"}, allow_claimed=True)
        assert isinstance(declined, CreateTaskResult)
        request = await open_request()
        await decide(request.pk, setup.alice, "decline")
        refused = await poll_until_done(client, declined.task_id)

        cancelled = await client.session.call_tool("deploy", {"version": "8.1"}, allow_claimed=True)
        assert isinstance(cancelled, CreateTaskResult)
        second = await open_request()
        await cancel_task(client, cancelled.task_id)
        withdrawn = await poll_until_done(client, cancelled.task_id)

    assert refused["status"] == "completed" and refused["result"]["isError"] is True
    assert refused["result"]["structuredContent"]["code"] == "declined"
    assert withdrawn["result"]["structuredContent"]["code"] == "withdrawn"
    assert await status_of(second.pk, "withdrawn") == "withdrawn"
    assert gateway.upstream_calls() == []


async def test_a_stdio_upstream_gets_its_own_env_and_none_of_reviewhubs(
    gateway: Gateway, setup: Setup
) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        result = await client.call_tool("environment_names", {})

    assert not result.is_error, result.content
    names = set(result.structured_content["result"])
    assert {"UPSTREAM_TOKEN", "UPSTREAM_CALL_LOG", "PATH"} <= names
    assert not names & {
        "SECRET_KEY",
        "DATABASE_URL",
        "SQLITE_PATH",
        "MCP_GATEWAY_UPSTREAMS",
        "DJANGO_SETTINGS_MODULE",
    }


async def test_a_remembered_decision_lets_the_same_call_through_and_holds_another(
    gateway: Gateway, setup: Setup
) -> None:
    async with gateway_client(gateway, "tools", setup.agent_key) as client:
        first = asyncio.ensure_future(client.call_tool("deploy", {"version": "6.0"}))
        request = await open_request()
        await decide(request.pk, setup.alice, "accept", {"approve": True})
        assert not (await asyncio.wait_for(first, 60)).is_error

        def remember() -> None:
            answered = ElicitationRequest.objects.select_related("agent", "queue").get(pk=request.pk)
            data = rules.remembered_rule_data(answered, arguments={"version": ("eq", "6.0")}, days=1)
            rules.remember_decision(answered, data, user=setup.alice)

        await asyncio.to_thread(remember)
        again = await asyncio.wait_for(client.call_tool("deploy", {"version": "6.0"}), 30)
        other = asyncio.ensure_future(client.call_tool("deploy", {"version": "6.1"}))
        held = await open_request()
        other.cancel()

    # The given-up call's request is withdrawn by the server after the client left; waited for, so the test's
    # teardown does not empty the tables while the server is still writing (a deadlock on PostgreSQL).
    assert await status_of(held.pk, "withdrawn") == "withdrawn"
    assert not again.is_error and text_of(again) == "deployed 6.0 to production"
    assert held.context["mcp"]["arguments"] == {"version": "6.1"}
    assert [call["arguments"]["version"] for call in gateway.upstream_calls()] == ["6.0", "6.0"]
