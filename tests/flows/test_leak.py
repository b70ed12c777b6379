"""The leak test: a known random secret goes through a hosted flow (forwarded by an MCP client, answered on the flow
page), then every place ReviewHub stores, logs, shows or sends anything is searched for it. The one retrieve
response is the only place it may appear."""

import asyncio
import base64
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import connection, connections
from django.test import AsyncClient
from django.urls import reverse

from elicitation.models import Agent, ElicitationRequest, FlowStatus, HostedFlow, Queue, Scope
from elicitation.queue import accounts
from reviewhub.celery import app as celery_app
from reviewhub.routing import websocket_urlpatterns
from tests.answers import answer_of
from tests.flows.conftest import FLOW_SCHEMA, new_secret
from tests.flows.leaks import LeakSearch, WebhookReceiver, model_rows, sqlite_file_bytes, table_rows

pytestmark = pytest.mark.django_db(transaction=True)

MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


class RecordingHandler(logging.Handler):
    """A plain handler placed first on the root logger, without the redaction filter, formatting at emit time:
    it sees records exactly as the code made them, before any handler's filter rewrote them."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.texts: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.texts.append(f"{self.format(record)} {record.__dict__!r}")


class Frames:
    """Every frame an agent socket receives, read in the background until told to stop."""

    def __init__(self, communicator: WebsocketCommunicator) -> None:
        self.communicator = communicator
        self.frames: list[str] = []

    async def drain(self, quiet: float = 1.0) -> None:
        # receive_nothing() waits without cancelling the consumer (a timed-out receive would).
        while not await self.communicator.receive_nothing(timeout=quiet):
            self.frames.append(json.dumps(await self.communicator.receive_json_from()))


def admin_urls() -> list[str]:
    """The changelist and every object's change page of every model registered in the admin."""
    urls = []
    for model in admin.site._registry:
        info = (model._meta.app_label, model._meta.model_name)
        urls.append(reverse("admin:{}_{}_changelist".format(*info)))
        for obj in model._default_manager.all()[:50]:
            urls.append(reverse("admin:{}_{}_change".format(*info), args=[obj.pk]))
    return urls


async def test_a_submitted_secret_appears_only_in_the_one_retrieve_response(
    queue: Queue,
    reviewer: User,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Webhooks are attempted inline, as in the embedded default, even when a broker is configured.
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
    secret = new_secret()
    search = LeakSearch(secret)
    caplog.set_level(logging.DEBUG)
    recorder = RecordingHandler()
    logging.getLogger().handlers.insert(0, recorder)
    superuser = await sync_to_async(User.objects.create_superuser)("root", "root@example.com", "pw-root")
    _, key = await sync_to_async(_create_flows_agent)(queue)
    agent_http = AsyncClient()
    agent_headers = {"Authorization": f"Bearer {key}"}  # AsyncClient applies headers per request only
    browser = AsyncClient()
    await browser.aforce_login(reviewer, backend=MODEL_BACKEND)
    responses: list[tuple[str, str]] = []

    async def call(client: AsyncClient, method: str, path: str, body: Any = None) -> Any:
        headers = agent_headers if client is agent_http else {}
        if body is None:
            response = await getattr(client, method)(path, headers=headers)
        elif isinstance(body, dict) and method == "post" and client is browser:
            response = await client.post(path, body)  # a form post, as the browser sends it
        else:
            response = await getattr(client, method)(
                path, body, content_type="application/json", headers=headers
            )
        responses.append((f"{method.upper()} {path} -> {response.status_code}", response.content.decode()))
        return response

    try:
        with WebhookReceiver() as receiver:
            # The MCP server opens the flow; the MCP client forwards the URL elicitation to ReviewHub.
            flow = (
                await call(
                    agent_http,
                    "post",
                    "/api/v1/flows",
                    {
                        "message": "Registry token, please",
                        "requestedSchema": FLOW_SCHEMA,
                        "queue": queue.slug,
                        "callbackUrl": receiver.url,
                    },
                )
            ).json()
            forwarded = (
                await call(
                    agent_http,
                    "post",
                    "/api/v1/requests",
                    {
                        "message": "Open the link to give the token",
                        "mode": "url",
                        "url": flow["url"],
                        "elicitationId": flow["elicitation"]["elicitationId"],
                        "queue": queue.slug,
                        "callbackUrl": receiver.url,
                    },
                )
            ).json()
            request_ids = [flow["requestId"], forwarded["id"]]

            # The agent waits on its socket: subscribed to both requests, and resuming its feed.
            communicator = WebsocketCommunicator(
                URLRouter(websocket_urlpatterns),
                "/ws/agent/",
                headers=[(b"authorization", f"Bearer {key}".encode())],
            )
            connected, _ = await communicator.connect()
            assert connected
            frames = Frames(communicator)
            await communicator.send_json_to({"type": "subscribe", "ids": request_ids})
            await communicator.send_json_to({"type": "resume", "after": 0})
            await frames.drain(quiet=0.5)

            # The reviewer claims the forwarded request, opens the flow page, and submits the secret.
            claim = await call(browser, "post", f"/api/v1/review/requests/{forwarded['id']}/claim", {})
            assert claim.status_code == 200, claim.content
            await call(browser, "get", f"/requests/{forwarded['id']}/")
            assert (await call(browser, "get", f"/flows/{flow['id']}/")).status_code == 200
            submitted = await call(
                browser, "post", f"/flows/{flow['id']}/", {"answer-api_token": secret, "action": "accept"}
            )
            assert submitted.status_code == 303, submitted.content
            await call(browser, "get", f"/flows/{flow['id']}/")
            for request_id in request_ids:
                await call(browser, "get", f"/api/v1/review/requests/{request_id}")
                await call(browser, "get", f"/requests/{request_id}/")
            await call(browser, "get", f"/queues/{queue.slug}/")
            await call(browser, "get", "/")

            # What the agent reads: results, feed, flow state, and the one retrieve.
            for request_id in request_ids:
                result = await call(agent_http, "get", f"/api/v1/requests/{request_id}")
                assert answer_of(result.json()["result"]) == {"action": "accept"}
            await call(agent_http, "get", "/api/v1/events?after=0")
            await call(agent_http, "get", "/api/v1/requests?status=all")
            await call(agent_http, "get", f"/api/v1/flows/{flow['id']}")
            retrieved = await agent_http.post(f"/api/v1/flows/{flow['id']}/retrieve", headers=agent_headers)
            assert retrieved.status_code == 200
            assert retrieved.json()["content"] == {"api_token": secret}
            assert (await call(agent_http, "post", f"/api/v1/flows/{flow['id']}/retrieve")).status_code == 410

            await frames.drain(quiet=1.0)
            await communicator.disconnect()
            for _ in range(50):  # eager deliveries run after commit; give the loopback server a moment
                if len(receiver.bodies) >= 2:
                    break
                await asyncio.sleep(0.1)
            webhook_bodies = list(receiver.bodies)

        # Admin, as a superuser: every list and change page of every registered model.
        staff = AsyncClient()
        await staff.aforce_login(superuser, backend=MODEL_BACKEND)
        for url in await sync_to_async(admin_urls)():
            response = await call(staff, "get", url)
            assert response.status_code == 200, url
    finally:
        logging.getLogger().removeHandler(recorder)
        # Views ran in asgiref's worker thread: close its connection so the test database can be dropped.
        await sync_to_async(connections.close_all)()

    # Everything that should have happened did (so the searches below had something to search).
    completed = [json.loads(f) for f in frames.frames if json.loads(f).get("type") == "completed"]
    assert {f["id"] for f in completed} == set(request_ids)
    assert all(answer_of(f["result"]) == {"action": "accept"} for f in completed)
    assert len(webhook_bodies) == 2 and all('"action":"accept"' in body for body in webhook_bodies)
    flow_row = await sync_to_async(HostedFlow.objects.get)(pk=flow["id"])
    assert flow_row.status == FlowStatus.RETRIEVED
    forwarded_row = await sync_to_async(ElicitationRequest.objects.get)(pk=forwarded["id"])
    assert (forwarded_row.action, forwarded_row.content) == ("accept", None)

    search.check_all("response", [f"{what}\n{body}" for what, body in responses])
    search.check_all("websocket frame", frames.frames)
    search.check_all("webhook body", webhook_bodies)
    search.check_all("caplog", [caplog.text, *[repr(r.__dict__) for r in caplog.records]])
    search.check_all("root handler", recorder.texts)

    def dump_database() -> list[tuple[str, str]]:
        try:
            return [*model_rows(), *table_rows()]
        finally:
            connections.close_all()

    for where, text in await sync_to_async(dump_database)():
        search.check(where, text)
    if connection.vendor == "sqlite":
        for where, text in sqlite_file_bytes(Path(django_settings.DATABASES["default"]["NAME"])):
            search.check(where, text)
    assert search.hits == []
    assert search.searched > 200  # the searches covered real material, not an empty list
    assert len(responses) > 20


def _create_flows_agent(queue: Queue) -> tuple[Agent, str]:

    return accounts.create_agent(
        "vault-mcp", queue_slugs=[queue.slug], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
    )


@pytest.mark.django_db
def test_the_admin_never_shows_a_flows_ciphertext_or_nonce(
    open_flow: Any, reviewer: User, browser_for: Any, admin_client: Any
) -> None:
    from tests.flows.conftest import submit

    flow = open_flow()
    assert submit(browser_for(reviewer), flow, api_token=new_secret()).status_code == 303
    row = HostedFlow.objects.get(pk=flow["id"])
    stored = [bytes(row.ciphertext or b""), bytes(row.nonce or b"")]
    assert all(stored)
    needles = [
        text
        for data in stored
        for text in (data.hex(), data.hex().upper(), base64.b64encode(data).decode(), repr(data)[2:30])
    ]
    pages = 0
    for url in admin_urls():
        response = admin_client.get(url)
        assert response.status_code == 200, url
        html = response.content.decode()
        assert not [needle for needle in needles if needle in html], url
        pages += 1
    assert pages >= 4
