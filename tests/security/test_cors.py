"""Browser pages on another origin (README "Browsers on another origin"): django-cors-headers answers for the agent
API only, for the origins CORS_ALLOWED_ORIGINS lists only, never with cookies, and not at all when it is unset.

The agent socket authenticates by key or ticket, never a cookie, so its door is the ticket, not the page's origin;
reviewer page sockets stay same-origin whatever the list says."""

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.test import AsyncClient, Client

from elicitation.models import Agent, Queue
from reviewhub import settings as project_settings
from reviewhub.asgi import application
from reviewhub.rates import parse_rate
from tests.conftest import FORM_SCHEMA
from tests.test_settings import settings_in_subprocess

ALLOWED = "https://agent-app.example"
UNLISTED = "https://elsewhere.example"
CORS_MIDDLEWARE = "corsheaders.middleware.CorsMiddleware"
ALLOW_ORIGIN = "access-control-allow-origin"


@pytest.fixture
def cors_on(settings: Any) -> None:
    """What reviewhub/settings.py makes of CORS_ALLOWED_ORIGINS=https://agent-app.example (the subprocess test
    below pins the middleware's place)."""
    settings.CORS_ALLOWED_ORIGINS = [ALLOWED]
    settings.MIDDLEWARE = [CORS_MIDDLEWARE, *settings.MIDDLEWARE]


def preflight(path: str, origin: str, method: str = "POST") -> Any:
    return Client().options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": "authorization,content-type,idempotency-key",
        },
    )


def create(key: str, origin: str | None) -> Any:
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": "cors-1"}
    if origin:
        headers["Origin"] = origin
    return Client().post(
        "/api/v1/requests",
        {"message": "Deploy from the browser?", "queue": "payments", "requestedSchema": FORM_SCHEMA},
        content_type="application/json",
        headers=headers,
    )


# --- The setting ------------------------------------------------------------------------------------------------


def test_cors_is_off_unless_origins_are_listed() -> None:
    result = settings_in_subprocess(
        {"CORS_ALLOWED_ORIGINS": ""},
        f"{CORS_MIDDLEWARE!r} in s.MIDDLEWARE, 'corsheaders' in s.INSTALLED_APPS, s.CORS_ALLOWED_ORIGINS",
    )
    assert result.stdout.strip() == "(False, False, [])", result.stderr


def test_listed_origins_turn_cors_on_first_in_the_chain_written_as_browsers_send_them() -> None:
    result = settings_in_subprocess(
        {"CORS_ALLOWED_ORIGINS": "https://App.Example.com:443, http://127.0.0.1:5173,http://[::1]:80"},
        "s.MIDDLEWARE[0], 'corsheaders' in s.INSTALLED_APPS, s.CORS_ALLOWED_ORIGINS, s.CORS_ALLOW_CREDENTIALS",
    )
    assert result.stdout.strip() == (
        f"({CORS_MIDDLEWARE!r}, True, "
        "['https://app.example.com', 'http://127.0.0.1:5173', 'http://[::1]'], False)"
    ), result.stderr


@pytest.mark.parametrize(
    "raw",
    [
        "https://app.example/",  # a trailing slash never matches an Origin header
        "https://app.example/agent",
        "app.example",
        "*",
        "null",
        "ftp://app.example",
        "https://user@app.example",
        "https://app.example:99999",
        "https://app.example:0",
        "https://app.example?x=1",
        "https://bücher.example",  # browsers send the xn-- form
    ],
)
def test_a_value_that_is_no_web_origin_is_refused(monkeypatch: pytest.MonkeyPatch, raw: str) -> None:
    monkeypatch.setenv("RH_ORIGINS", f"https://fine.example,{raw}")
    with pytest.raises(
        ImproperlyConfigured, match=r"RH_ORIGINS entry .* is not a web origin; write scheme://"
    ):
        project_settings.env_origins("RH_ORIGINS")


def test_a_bad_origin_in_the_environment_stops_startup_naming_it() -> None:
    result = settings_in_subprocess({"CORS_ALLOWED_ORIGINS": "https://app.example/"}, "1")
    assert result.returncode != 0
    assert "CORS_ALLOWED_ORIGINS entry 'https://app.example/' is not a web origin" in result.stderr


# --- The agent API ----------------------------------------------------------------------------------------------


def test_a_listed_origin_passes_the_preflight_for_the_clients_headers(cors_on: None) -> None:
    response = preflight("/api/v1/requests", ALLOWED)

    assert response.status_code == 200
    assert response[ALLOW_ORIGIN] == ALLOWED
    allowed_headers = {name.strip() for name in response["access-control-allow-headers"].split(",")}
    assert {"authorization", "content-type", "idempotency-key"} <= allowed_headers
    assert "POST" in response["access-control-allow-methods"]
    # No cookies cross origins: a page cannot ride on a reviewer's session.
    assert "access-control-allow-credentials" not in response


def test_a_listed_origin_reads_the_create_and_the_read_back(
    cors_on: None, agent_with_key: tuple[Agent, str]
) -> None:
    _, key = agent_with_key
    created = create(key, ALLOWED)
    read = Client().get(
        f"/api/v1/requests/{created.json()['id']}",
        headers={"Authorization": f"Bearer {key}", "Origin": ALLOWED},
    )
    ticket = Client().post("/api/v1/ws-ticket", headers={"Authorization": f"Bearer {key}", "Origin": ALLOWED})

    assert (created.status_code, read.status_code, ticket.status_code) == (201, 200, 201)
    for response in (created, read, ticket):
        assert response[ALLOW_ORIGIN] == ALLOWED
        assert response["access-control-expose-headers"] == "retry-after"
        assert "access-control-allow-credentials" not in response
    assert read.json()["status"] == "pending"


def test_a_listed_origin_can_read_retry_after_on_a_429(
    cors_on: None, agent_with_key: tuple[Agent, str], settings: Any
) -> None:
    settings.AGENT_RATE = parse_rate("1/min")
    _, key = agent_with_key
    create(key, ALLOWED)
    refused = Client().get("/api/v1/requests", headers={"Authorization": f"Bearer {key}", "Origin": ALLOWED})

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert refused[ALLOW_ORIGIN] == ALLOWED
    assert refused["access-control-expose-headers"] == "retry-after"


def test_an_unlisted_origin_gets_no_cors_headers(cors_on: None, agent_with_key: tuple[Agent, str]) -> None:
    checked = preflight("/api/v1/requests", UNLISTED)
    # A browser never sends this call after the failed preflight; a script outside a browser was never CORS's to stop.
    created = create(agent_with_key[1], UNLISTED)

    assert checked.status_code == 200  # an empty answer, without which the browser refuses
    assert created.status_code == 201
    for response in (checked, created):
        assert ALLOW_ORIGIN not in response
        assert "access-control-allow-headers" not in response


def test_unset_no_origin_gets_cors_headers(agent_with_key: tuple[Agent, str], settings: Any) -> None:
    assert settings.CORS_ALLOWED_ORIGINS == []
    assert CORS_MIDDLEWARE not in settings.MIDDLEWARE

    checked = preflight("/api/v1/requests", ALLOWED)
    created = create(agent_with_key[1], ALLOWED)

    assert created.status_code == 201
    assert ALLOW_ORIGIN not in checked
    assert ALLOW_ORIGIN not in created


@pytest.mark.parametrize(
    "path",
    [
        "/",
        "/accounts/login/",
        "/queues/payments/",
        "/admin/login/",
        "/oauth/authorize/",
        "/api/v1/review/queues",  # the reviewer API takes session cookies
        "/api/v1/review/queues/payments/claim-next",
        "/api/v1/queues/payments/rules",
        "/api/schema/",
    ],
)
def test_reviewer_pages_admin_and_oauth_never_answer_another_origin(
    cors_on: None, reviewer: User, path: str
) -> None:
    client = Client()
    client.force_login(reviewer)
    for response in (
        client.get(path, headers={"Origin": ALLOWED}),
        client.post(path, headers={"Origin": ALLOWED}),
        preflight(path, ALLOWED),
    ):
        assert ALLOW_ORIGIN not in response, (path, response.status_code)


# --- Sockets ----------------------------------------------------------------------------------------------------


async def issue_ticket(key: str) -> str:
    response = await AsyncClient().post(
        "/api/v1/ws-ticket", headers={"Authorization": f"Bearer {key}", "Origin": ALLOWED}
    )
    assert response.status_code == 201, response.content
    return str(response.json()["ticket"])


async def first_frame(origin: str, path: str) -> dict[str, Any]:
    socket = WebsocketCommunicator(application, path, headers=[(b"origin", origin.encode())])
    connected, _ = await socket.connect(timeout=5)
    assert connected
    try:
        return dict(await socket.receive_output(timeout=5))
    finally:
        await socket.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_a_listed_origin_opens_the_agent_socket_with_a_ticket(
    cors_on: None, agent_with_key: tuple[Agent, str]
) -> None:
    ticket = await issue_ticket(agent_with_key[1])
    frame = await first_frame(ALLOWED, f"/ws/agent/?ticket={ticket}")
    assert frame["type"] == "websocket.send" and '"hello"' in frame["text"]


@pytest.mark.django_db(transaction=True)
async def test_the_agent_socket_is_opened_by_its_ticket_not_by_the_pages_origin(
    cors_on: None, agent_with_key: tuple[Agent, str]
) -> None:
    # A ticket the page's own backend got with the key (its documented use) opens it from any origin...
    ticket = await issue_ticket(agent_with_key[1])
    with_ticket = await first_frame(UNLISTED, f"/ws/agent/?ticket={ticket}")
    # ...and no origin, listed or not, opens it without one.
    without = await asyncio.gather(first_frame(UNLISTED, "/ws/agent/"), first_frame(ALLOWED, "/ws/agent/"))

    assert with_ticket["type"] == "websocket.send" and '"hello"' in with_ticket["text"]
    assert [frame.get("code") for frame in without] == [4401, 4401]


@pytest.mark.django_db(transaction=True)
async def test_reviewer_page_sockets_stay_same_origin_whatever_the_list_says(
    cors_on: None, reviewer: User, queue: Queue
) -> None:
    client = Client()
    await sync_to_async(client.force_login)(reviewer)
    name = django_settings.SESSION_COOKIE_NAME
    cookie = f"{name}={client.cookies[name].value}".encode()

    async def connects(origin: str) -> bool:
        socket = WebsocketCommunicator(
            application,
            f"/ws/queues/{queue.slug}/",
            headers=[(b"origin", origin.encode()), (b"cookie", cookie)],
        )
        connected, _ = await socket.connect(timeout=5)
        await socket.disconnect()
        return bool(connected)

    assert await connects("http://testserver") is True
    assert await connects(ALLOWED) is False
