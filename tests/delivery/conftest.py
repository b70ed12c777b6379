"""Fixtures for the delivery tests: agent sockets on the real ASGI application, reviewers that answer."""

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator

from elicitation.delivery import pushes
from elicitation.models import ElicitationRequest
from elicitation.queue import signals, transitions
from reviewhub.asgi import application

Socket = WebsocketCommunicator


@pytest.fixture
async def open_socket() -> AsyncIterator[Callable[..., Awaitable[Socket]]]:
    """Open `/ws/agent/` as the real server would route it; every socket is closed after the test."""
    opened: list[Socket] = []

    async def open_(
        key: str | None = None, path: str = "/ws/agent/", expect_hello: bool = True, timeout: float = 5
    ) -> Socket:
        headers = [(b"authorization", f"Bearer {key}".encode())] if key else []
        socket = WebsocketCommunicator(application, path, headers=headers)
        opened.append(socket)
        connected, _ = await socket.connect(timeout=timeout)
        assert connected
        if expect_hello:
            hello = await socket.receive_json_from(timeout=timeout)
            assert hello["type"] == "hello"
        return socket

    yield open_
    for socket in opened:
        await socket.disconnect()


@pytest.fixture
def answer(reviewer: Any) -> Callable[..., Awaitable[ElicitationRequest]]:
    """The reviewer claims and answers a request (in a worker thread, as a request handler would)."""

    def claim_and_respond(request_id: Any, action: str, content: dict[str, Any] | None) -> ElicitationRequest:
        transitions.claim_request(request_id, user=reviewer)
        return transitions.respond(request_id, user=reviewer, action=action, content=content)

    async def answer_(
        request: ElicitationRequest, action: str = "accept", content: dict[str, Any] | None = None
    ) -> ElicitationRequest:
        if action == "accept" and content is None:
            content = {"approve": True}
        return await database_sync_to_async(claim_and_respond)(request.pk, action, content)

    return answer_


@contextlib.contextmanager
def agent_pushes_dropped() -> Iterator[None]:
    """Agent events still commit to the outbox, but their pushes never leave (as in a Redis blip)."""
    signals.agent_event_recorded.disconnect(dispatch_uid="delivery.agent_push")
    try:
        yield
    finally:
        signals.agent_event_recorded.connect(
            pushes.on_agent_event_recorded, dispatch_uid="delivery.agent_push"
        )
