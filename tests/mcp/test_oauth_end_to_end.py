"""A remote MCP host signs in to ReviewHub's /mcp/ with the official SDK's own OAuth client (`OAuthClientProvider`):
discovery from the 401, dynamic registration, ReviewHub's sign-in and consent pages in Chromium, the code exchange
with PKCE, then the tools — answered by a reviewer — as the agent and queues the person chose."""

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth.models import User
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.types import CallToolResult
from playwright.async_api import async_playwright

from elicitation.admin.mcp_grants import revoke_grants
from elicitation.models import ElicitationRequest, McpGrant, Queue
from elicitation.queue import accounts
from tests.browser.conftest import WAIT_MS
from tests.mcp.conftest import Hub, LiveReviewHub, ScriptedReviewer

pytestmark = [pytest.mark.mcp, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking"]
CALLBACK = "http://127.0.0.1:53682/callback"
SCREENSHOTS = Path(settings.BASE_DIR) / "test-output" / "screenshots"
PASSWORD = "correct horse battery staple"
QUEUE = "mcp-oauth"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve?"}},
    "required": ["approve"],
}


@pytest.fixture(scope="module")
def oauth_server(django_db_setup: None) -> Iterator[LiveReviewHub]:
    """A live ReviewHub whose PUBLIC_URL is its own address, so metadata, challenge and audience agree."""
    server = LiveReviewHub()
    # Every run registers from 127.0.0.1, and with Redis the count outlives the run: the registration rate has its
    # own tests (test_oauth_hardening.py), this server has none.
    server.env.update(PUBLIC_URL=server.url, OAUTH_REGISTRATION_RATE="off")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def oauth_hub(oauth_server: LiveReviewHub, transactional_db: None) -> Hub:
    queue = Queue.objects.create(slug=QUEUE, name="MCP OAuth", lease_seconds=60, default_deadline_seconds=600)
    Queue.objects.create(slug="elsewhere", name="Elsewhere")
    agent, key = accounts.create_agent(
        "oauth-agent", queue_slugs=[QUEUE, "elsewhere"], scopes=["flows:secrets"]
    )
    supervisor = User.objects.create_user("sam", password=PASSWORD)
    queue.supervisors.add(supervisor)
    reviewer = User.objects.create_user("rita")
    queue.members.add(reviewer)
    return Hub(
        url=oauth_server.url,
        agent_key=key,
        agent_id=agent.pk,
        reviewer_token=accounts.create_reviewer_token(reviewer, "oauth tests"),
        queue=QUEUE,
        server=oauth_server,
    )


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class ConsentingPerson:
    """Sam, in Chromium: follows the host's authorization link, signs in, picks the agent and queue, allows."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.callback: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.visits = 0

    async def start(self) -> None:
        async def on_callback(route: Any) -> None:
            if not self.callback.done():
                self.callback.set_result(route.request.url)
            await route.fulfill(status=200, body="Signed in; you can close this tab.")

        await self.page.route(CALLBACK + "**", on_callback)

    async def redirect_handler(self, authorization_url: str) -> None:
        self.visits += 1
        page = self.page
        await page.goto(authorization_url)
        await page.fill("#id_username", "sam")
        await page.fill("#id_password", PASSWORD)
        await page.click("button[type=submit]")
        await page.wait_for_selector("#authorizationForm")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(SCREENSHOTS / "mcp-oauth-consent.png"), full_page=True)
        await page.select_option("#id_agent", label="oauth-agent")
        await page.check(f"input[name=queues][value={QUEUE}]")
        await page.click("button[name=allow]")

    async def callback_handler(self) -> AuthorizationCodeResult:
        try:
            url = await asyncio.wait_for(self.callback, 30)
        except TimeoutError:
            await self.page.screenshot(path=str(SCREENSHOTS / "mcp-oauth-stuck.png"), full_page=True)
            raise AssertionError(f"no callback; the browser is at {self.page.url}") from None
        query = parse_qs(urlsplit(url).query)
        assert "code" in query, url
        return AuthorizationCodeResult(
            code=query["code"][0], state=query.get("state", [None])[0], iss=query.get("iss", [None])[0]
        )


@asynccontextmanager
async def chromium_page() -> AsyncIterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True
        )
        context = await browser.new_context()
        context.set_default_timeout(WAIT_MS)
        try:
            yield await context.new_page()
        finally:
            await browser.close()


@asynccontextmanager
async def oauth_mcp(hub: Hub, person: ConsentingPerson, storage: MemoryStorage) -> AsyncIterator[Client]:
    provider = OAuthClientProvider(
        server_url=hub.url + "/mcp/",
        client_metadata=OAuthClientMetadata(
            client_name="Test MCP host",
            redirect_uris=[CALLBACK],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=person.redirect_handler,
        callback_handler=person.callback_handler,
    )
    async with (
        httpx2.AsyncClient(auth=provider, timeout=httpx2.Timeout(30, read=120)) as http,
        Client(streamable_http_client(hub.url + "/mcp/", http_client=http)) as client,
    ):
        yield client


def structured(result: CallToolResult) -> Any:
    assert not result.is_error, result.content
    return result.structured_content


async def test_an_mcp_host_signs_in_with_oauth_and_asks_a_reviewer(oauth_hub: Hub) -> None:
    reviewer = ScriptedReviewer(oauth_hub)
    storage = MemoryStorage()
    async with chromium_page() as page:
        person = ConsentingPerson(page)
        await person.start()
        async with oauth_mcp(oauth_hub, person, storage) as client:
            queues = structured(await client.call_tool("list_queues", {}))["result"]
            asking = asyncio.ensure_future(
                client.call_tool(
                    "ask_reviewer",
                    {"message": "Ship it?", "requestedSchema": SCHEMA, "queue": QUEUE, "waitSeconds": 30},
                )
            )
            seen = await reviewer.answer_next("accept", {"approve": True})
            answered = structured(await asyncio.wait_for(asking, 60))
            outside = await client.call_tool(
                "ask_reviewer", {"message": "Here?", "requestedSchema": SCHEMA, "queue": "elsewhere"}
            )

    assert person.visits == 1
    assert [q["slug"] for q in queues] == [QUEUE]  # the consent's queue only, not all the agent's
    assert answered["id"] == seen["id"]
    assert answered["result"] == {"action": "accept", "content": {"approve": True}}
    assert outside.is_error and '"code": "invalid"' in outside.content[0].text  # type: ignore[union-attr]

    def recorded_then_revoked() -> tuple[int, tuple[str, int, str]]:
        grant = McpGrant.objects.get()
        revoke_grants(McpGrant.objects.all(), grant.user)  # the admin's action
        return (
            ElicitationRequest.objects.get(pk=seen["id"]).agent_id,
            (grant.user.username, grant.agent_id, grant.client_name),
        )

    asked_as, grant_row = await sync_to_async(recorded_then_revoked)()
    assert asked_as == oauth_hub.agent_id
    assert grant_row == ("sam", oauth_hub.agent_id, "Test MCP host")

    # The token the host holds is refused once the consent is revoked, with the discovery challenge.
    assert storage.tokens is not None
    bearer = {"Authorization": f"Bearer {storage.tokens.access_token}", "Accept": "application/json"}
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    refused = httpx.post(oauth_hub.url + "/mcp/", json=ping, headers=bearer, timeout=10)
    assert refused.status_code == 401
    assert (
        f'resource_metadata="{oauth_hub.url}/.well-known/oauth-protected-resource/mcp"'
        in refused.headers["www-authenticate"]
    )


async def test_the_401_names_the_resource_metadata_and_static_keys_still_work(oauth_hub: Hub) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    async with httpx.AsyncClient(base_url=oauth_hub.url, timeout=10) as http:
        anonymous = await http.post("/mcp/", json=ping)
        metadata = (await http.get("/.well-known/oauth-protected-resource/mcp")).json()
        wrong = await http.post("/mcp/", json=ping, headers={"Authorization": "Bearer not-a-token"})

    assert anonymous.status_code == 401
    challenge = anonymous.headers["www-authenticate"]
    assert challenge.startswith("Bearer ")
    assert f'resource_metadata="{oauth_hub.url}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert metadata["resource"] == oauth_hub.url + "/mcp"
    assert metadata["authorization_servers"] == [oauth_hub.url]
    assert wrong.status_code == 401

    headers = {"Authorization": f"Bearer {oauth_hub.agent_key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(oauth_hub.url + "/mcp/", http_client=http)) as client,
    ):
        queues = structured(await client.call_tool("list_queues", {}))["result"]
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(q["slug"] for q in queues) == ["elsewhere", QUEUE]
    for tool in tools.values():
        for name, schema in tool.input_schema.get("properties", {}).items():
            assert schema.get("description"), f"{tool.name}.{name} has no description"
