"""The reviewer page socket: session-authenticated, membership-checked, relays queue and request pushes."""

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import DraftState, ElicitationRequest, Queue
from elicitation.queue import transitions
from reviewhub.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

Connect = Callable[..., Awaitable[tuple[bool, Any, WebsocketCommunicator]]]


def session_cookie(user: User) -> str:
    client = Client()
    client.force_login(user)
    return f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"


@pytest.fixture
async def connect() -> AsyncIterator[Connect]:
    opened: list[WebsocketCommunicator] = []

    async def open_(path: str, user: User | None = None, origin: str = "http://testserver") -> Any:
        headers = [(b"origin", origin.encode())]
        if user is not None:
            headers.append((b"cookie", (await sync_to_async(session_cookie)(user)).encode()))
        socket = WebsocketCommunicator(application, path, headers=headers)
        opened.append(socket)
        connected, code = await socket.connect(timeout=5)
        return connected, code, socket

    yield open_
    for socket in opened:
        await socket.disconnect()


async def test_a_member_sees_a_new_request_arrive_on_the_queue_socket(
    connect: Connect, reviewer: User, queue: Queue, make_request: Any
) -> None:
    connected, _, socket = await connect(f"/ws/queues/{queue.slug}/", reviewer)
    assert connected
    request = await sync_to_async(make_request)(message="<b>new</b>", priority=3)
    message = await socket.receive_json_from(timeout=2)
    assert message["type"] == "queue.update" and message["kind"] == "created"
    assert message["request"]["id"] == str(request.pk)
    assert message["request"]["message_excerpt"] == "<b>new</b>"  # raw text: the page inserts it as text
    assert message["request"]["priority"] == 3


async def test_claims_and_withdrawals_reach_the_queue_and_request_sockets(
    connect: Connect, make_reviewer: Any, queue: Queue, make_request: Any, agent: Any
) -> None:
    alice = await sync_to_async(make_reviewer)("alice", queue)
    bob = await sync_to_async(make_reviewer)("bob", queue)
    request = await sync_to_async(make_request)()
    _, _, queue_socket = await connect(f"/ws/queues/{queue.slug}/", alice)
    _, _, request_socket = await connect(f"/ws/requests/{request.pk}/", alice)
    await sync_to_async(transitions.claim_request)(request.pk, user=bob)
    for socket, kind in ((queue_socket, "queue.update"), (request_socket, "request.update")):
        message = await socket.receive_json_from(timeout=2)
        assert (message["type"], message["kind"], message["request"]["claimed_by"]) == (
            kind,
            "claimed",
            "bob",
        )
    await sync_to_async(transitions.withdraw_request)(request.pk, agent=agent)
    for socket in (queue_socket, request_socket):
        message = await socket.receive_json_from(timeout=2)
        assert (message["kind"], message["request"]["status"]) == ("withdrawn", "withdrawn")


async def test_drafts_are_relayed_to_everyone_viewing_the_request(
    connect: Connect, make_reviewer: Any, queue: Queue, make_request: Any
) -> None:
    alice = await sync_to_async(make_reviewer)("alice", queue)
    bob = await sync_to_async(make_reviewer)("bob", queue)
    request = await sync_to_async(make_request)()
    await sync_to_async(transitions.claim_request)(request.pk, user=alice)
    _, _, watcher = await connect(f"/ws/requests/{request.pk}/", bob)
    await sync_to_async(transitions.save_draft)(
        request.pk, user=alice, question_id="note", value="hello", state=DraftState.DRAFT
    )
    message = await watcher.receive_json_from(timeout=2)
    assert message["type"] == "request.draft"
    assert {key: message["draft"][key] for key in ("question", "value", "state", "updated_by")} == {
        "question": "note",
        "value": "hello",
        "state": "draft",
        "updated_by": "alice",
    }


async def test_non_members_anonymous_visitors_and_unknown_ids_are_refused(
    connect: Connect, make_reviewer: Any, queue: Queue, other_queue: Queue, make_request: Any
) -> None:
    outsider = await sync_to_async(make_reviewer)("mallory", other_queue)
    request: ElicitationRequest = await sync_to_async(make_request)()
    for path, user in (
        (f"/ws/queues/{queue.slug}/", outsider),
        (f"/ws/requests/{request.pk}/", outsider),
        (f"/ws/queues/{queue.slug}/", None),
        ("/ws/queues/no-such-queue/", outsider),
        ("/ws/requests/00000000-0000-0000-0000-000000000000/", outsider),
    ):
        connected, code, _ = await connect(path, user)
        assert not connected, path
        assert code == 4403, path


async def test_a_cross_site_page_cannot_open_a_reviewer_socket(
    connect: Connect, reviewer: User, queue: Queue
) -> None:
    connected, _, _ = await connect(f"/ws/queues/{queue.slug}/", reviewer, origin="https://evil.example")
    assert not connected


async def test_the_socket_only_relays_and_answers_pings(
    connect: Connect, reviewer: User, queue: Queue
) -> None:
    _, _, socket = await connect(f"/ws/queues/{queue.slug}/", reviewer)
    await socket.send_json_to({"type": "claim", "id": "anything"})
    assert await socket.receive_nothing(timeout=0.2)
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=2) == {"type": "pong"}
