"""WebSockets under bad frames and a failing channel layer: an error frame with a code, the socket still usable,
no traceback in the log; with the layer down a new agent socket is accepted and served from the database, and
when the layer answers again every open socket rechecks at once."""

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from channels.layers import InMemoryChannelLayer, channel_layers
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import transitions
from reviewhub.asgi import application
from tests.answers import answer_of

pytestmark = pytest.mark.django_db(transaction=True)

Open = Callable[..., Awaitable[WebsocketCommunicator]]


class FlakyLayer(InMemoryChannelLayer):
    """The in-memory layer, except that while `down` every call that would need Redis raises as redis-py does."""

    down = False

    def fail_if_down(self) -> None:
        if FlakyLayer.down:
            raise ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    async def new_channel(self, prefix: str = "specific.") -> str:
        self.fail_if_down()
        return await super().new_channel(prefix)

    async def group_add(self, group: str, channel: str) -> None:
        self.fail_if_down()
        await super().group_add(group, channel)

    async def group_send(self, group: str, message: dict[str, Any]) -> None:
        self.fail_if_down()
        await super().group_send(group, message)


@pytest.fixture
def flaky_layer(settings: Any) -> Any:
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": f"{__name__}.FlakyLayer"}}
    settings.CHANNEL_LAYER_PROBE_SECONDS = 1
    settings.LONG_POLL_RECHECK_SECONDS = 1
    settings.AGENT_SOCKET_RECHECK_SECONDS = (
        60  # longer than any test here: only the wake can explain a fast recheck
    )
    channel_layers.backends.clear()
    FlakyLayer.down = False
    yield FlakyLayer
    FlakyLayer.down = False
    channel_layers.backends.clear()


def session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return (
        f"{django_settings.SESSION_COOKIE_NAME}={client.cookies[django_settings.SESSION_COOKIE_NAME].value}"
    )


@pytest.fixture
async def open_socket() -> AsyncIterator[Open]:
    opened: list[WebsocketCommunicator] = []

    async def open_(path: str, key: str | None = None, user: User | None = None) -> WebsocketCommunicator:
        headers = [(b"origin", b"http://testserver")]
        if key:
            headers.append((b"authorization", f"Bearer {key}".encode()))
        if user is not None:
            headers.append((b"cookie", (await sync_to_async(session_cookie)(user)).encode()))
        socket = WebsocketCommunicator(application, path, headers=headers)
        opened.append(socket)
        connected, code = await socket.connect(timeout=5)
        assert connected, code
        return socket

    yield open_
    for socket in opened:
        await socket.disconnect()


def deep_frame(depth: int) -> str:
    return '{"type": "subscribe", "ids": ' + "[" * depth + "]" * depth + "}"


BAD_FRAMES = [
    ({"bytes_data": b"\x00\x01binary"}, {"code": "binary_frame"}),
    ({"text_data": "subscribe please"}, {"code": "invalid_json"}),
    ({"text_data": '{"type": "ping"'}, {"code": "invalid_json"}),
    ({"text_data": deep_frame(50)}, {"code": "too_deep", "field": "ids" + "[0]" * 31}),
    ({"text_data": deep_frame(100_000)}, {"code": "too_deep"}),
    (
        {"text_data": json.dumps({"type": "subscribe", "ids": ["a\ud800"]})},
        {"code": "invalid_text", "field": "ids[0]"},
    ),
    ({"text_data": json.dumps({"type\udc00": "ping"})}, {"code": "invalid_text", "field": "type\\udc00"}),
]


async def assert_error_then_usable(
    socket: WebsocketCommunicator, frame: dict[str, Any], expected: dict[str, Any]
) -> None:
    await socket.send_to(**frame)
    error = await socket.receive_json_from(timeout=5)
    assert error["type"] == "error"
    assert {key: error.get(key) for key in expected} == expected
    assert error["detail"]
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=5) == {"type": "pong"}


@pytest.mark.parametrize(("frame", "expected"), BAD_FRAMES)
async def test_a_bad_frame_on_the_agent_socket_gets_an_error_frame_and_the_socket_stays_usable(
    open_socket: Open,
    agent_with_key: tuple[Agent, str],
    frame: dict[str, Any],
    expected: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    socket = await open_socket("/ws/agent/", key=agent_with_key[1])
    assert (await socket.receive_json_from(timeout=5))["type"] == "hello"

    await assert_error_then_usable(socket, frame, expected)

    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


@pytest.mark.parametrize(("frame", "expected"), BAD_FRAMES)
async def test_a_bad_frame_on_a_reviewer_page_socket_gets_an_error_frame_and_the_socket_stays_usable(
    open_socket: Open,
    reviewer: User,
    queue: Queue,
    frame: dict[str, Any],
    expected: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    socket = await open_socket(f"/ws/queues/{queue.slug}/", user=reviewer)

    await assert_error_then_usable(socket, frame, expected)

    assert [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info] == []


async def test_a_subscription_survives_a_bad_frame_in_between(
    open_socket: Open,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    reviewer: User,
) -> None:
    request = await database_sync_to_async(make_request)()
    socket = await open_socket("/ws/agent/", key=agent_with_key[1])
    await socket.receive_json_from(timeout=5)
    await socket.send_json_to({"type": "subscribe", "ids": [str(request.pk)]})
    assert (await socket.receive_json_from(timeout=5))["status"] == "pending"

    await socket.send_to(bytes_data=b"\xff")
    assert (await socket.receive_json_from(timeout=5))["code"] == "binary_frame"
    await database_sync_to_async(transitions.claim_request)(request.pk, user=reviewer)
    await database_sync_to_async(transitions.respond)(
        request.pk, user=reviewer, action="decline", content=None
    )

    completed = await socket.receive_json_from(timeout=5)
    assert (completed["type"], completed["id"], answer_of(completed["result"])) == (
        "completed",
        str(request.pk),
        {"action": "decline"},
    )


# --- the channel layer away ----------------------------------------------------------------------------------------


async def answer(request: ElicitationRequest, reviewer: User) -> None:
    await database_sync_to_async(transitions.claim_request)(request.pk, user=reviewer)
    await database_sync_to_async(transitions.respond)(
        request.pk, user=reviewer, action="accept", content={"approve": True}
    )


async def test_with_the_layer_down_a_new_agent_socket_is_accepted_and_served_from_the_database(
    flaky_layer: Any,
    open_socket: Open,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    reviewer: User,
) -> None:
    request = await database_sync_to_async(make_request)()
    flaky_layer.down = True

    socket = await open_socket("/ws/agent/", key=agent_with_key[1])  # no HTTP 500: the upgrade is accepted

    assert (await socket.receive_json_from(timeout=5)) == {"type": "hello", "cursor": 0}
    await socket.send_json_to({"type": "subscribe", "ids": [str(request.pk)]})
    assert (await socket.receive_json_from(timeout=5))["status"] == "pending"
    await answer(request, reviewer)  # its push fails: the layer is down
    completed = await socket.receive_json_from(timeout=5)  # found by the socket's database recheck
    assert (completed["type"], answer_of(completed["result"])) == (
        "completed",
        {"action": "accept", "content": {"approve": True}},
    )
    assert await ElicitationRequest.objects.filter(pk=request.pk, status="completed").aexists()


async def test_when_the_layer_comes_back_a_subscribe_only_socket_rechecks_at_once(
    flaky_layer: Any,
    open_socket: Open,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    reviewer: User,
) -> None:
    request = await database_sync_to_async(make_request)()
    socket = await open_socket("/ws/agent/", key=agent_with_key[1])
    await socket.receive_json_from(timeout=5)
    await socket.send_json_to({"type": "subscribe", "ids": [str(request.pk)]})
    assert (await socket.receive_json_from(timeout=5))["status"] == "pending"
    await asyncio.sleep(1.5)  # the process's layer watch has looked at least once while all was well

    flaky_layer.down = True
    await answer(request, reviewer)  # the push is lost
    assert await socket.receive_nothing(
        timeout=2.5
    )  # joined: no fast polling while the layer is merely quiet
    flaky_layer.down = False
    started = time.monotonic()
    completed = await socket.receive_json_from(timeout=10)

    # AGENT_SOCKET_RECHECK_SECONDS is 60: only the layer coming back explains it.
    assert time.monotonic() - started < 5
    assert (completed["type"], completed["id"]) == ("completed", str(request.pk))


async def test_with_the_layer_down_a_reviewer_page_socket_closes_with_try_again_later(
    flaky_layer: Any, reviewer: User, queue: Queue
) -> None:
    flaky_layer.down = True
    cookie = await sync_to_async(session_cookie)(reviewer)
    socket = WebsocketCommunicator(
        application,
        f"/ws/queues/{queue.slug}/",
        headers=[(b"origin", b"http://testserver"), (b"cookie", cookie.encode())],
    )
    connected, _ = await socket.connect(timeout=5)

    assert connected  # accepted, never an HTTP error on the upgrade
    closed = await socket.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4013}
    await socket.wait()
