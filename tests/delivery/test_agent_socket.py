"""The agent WebSocket: completions reach the waiting agent once, whenever they happened, and only its own."""

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async

from elicitation.delivery import pushes
from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import accounts
from tests.answers import answer_of
from tests.delivery.conftest import Socket, agent_pushes_dropped

pytestmark = pytest.mark.django_db(transaction=True)

OpenSocket = Callable[..., Awaitable[Socket]]
Answer = Callable[..., Awaitable[ElicitationRequest]]


@pytest.fixture
def key(agent_with_key: tuple[Agent, str]) -> str:
    return agent_with_key[1]


@pytest.fixture
def new_request(
    make_request: Callable[..., ElicitationRequest],
) -> Callable[[], Awaitable[ElicitationRequest]]:
    return database_sync_to_async(make_request)


async def test_a_completion_made_before_the_subscription_is_delivered_at_once(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    request = await new_request()
    await answer(request, "accept", {"approve": True, "note": "ok"})
    socket = await open_socket(key)

    await socket.send_json_to({"type": "subscribe", "ids": [str(request.pk)]})

    message = await socket.receive_json_from(timeout=2)
    assert {**message, "result": answer_of(message["result"])} == {
        "type": "completed",
        "id": str(request.pk),
        "cursor": 1,
        "status": "completed",
        "result": {"action": "accept", "content": {"approve": True, "note": "ok"}},
    }
    assert await socket.receive_nothing(timeout=0.3)


async def test_a_subscribed_open_request_reports_its_state_then_its_completion_within_milliseconds(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    request = await new_request()
    socket = await open_socket(key)
    await socket.send_json_to({"type": "subscribe", "ids": [str(request.pk)]})
    assert await socket.receive_json_from(timeout=2) == {
        "type": "state",
        "id": str(request.pk),
        "status": "pending",
    }

    await answer(request, "decline")
    started = time.monotonic()
    message = await socket.receive_json_from(timeout=2)

    assert time.monotonic() - started < 0.5  # pushed, not found by the periodic recheck
    assert (message["type"], message["id"], answer_of(message["result"])) == (
        "completed",
        str(request.pk),
        {"action": "decline"},
    )
    assert "content" not in message["result"]


async def test_a_completion_made_while_disconnected_is_delivered_on_resume(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    first, second = await new_request(), await new_request()
    socket = await open_socket(key)
    await socket.send_json_to({"type": "resume", "after": 0})
    assert await socket.receive_json_from(timeout=2) == {"type": "resumed", "cursor": 0}
    await answer(first)
    seen = await socket.receive_json_from(timeout=2)
    assert (seen["id"], seen["cursor"]) == (str(first.pk), 1)
    await socket.disconnect()

    await answer(second, "cancel")  # nobody is listening
    again = await open_socket(key)
    await again.send_json_to({"type": "resume", "after": seen["cursor"]})

    missed = await again.receive_json_from(timeout=2)
    assert (missed["id"], missed["cursor"], answer_of(missed["result"])) == (
        str(second.pk),
        2,
        {"action": "cancel"},
    )
    assert await again.receive_json_from(timeout=2) == {"type": "resumed", "cursor": 2}
    assert await again.receive_nothing(timeout=0.3)  # the first completion is not sent again


async def test_resume_and_subscribe_together_send_each_event_once(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    done, later = await new_request(), await new_request()
    await answer(done)
    socket = await open_socket(key)

    # Subscribe first (the closing event goes out), then resume from before it: not sent a second time.
    await socket.send_json_to({"type": "subscribe", "ids": [str(done.pk), str(later.pk)]})
    received = [await socket.receive_json_from(timeout=2) for _ in range(2)]
    await socket.send_json_to({"type": "resume", "after": 0})
    received.append(await socket.receive_json_from(timeout=2))
    await answer(later, "decline")
    received.append(await socket.receive_json_from(timeout=2))

    assert [(m["type"], m.get("id"), m.get("cursor")) for m in received] == [
        ("completed", str(done.pk), 1),
        ("state", str(later.pk), None),
        ("resumed", None, 1),
        ("completed", str(later.pk), 2),
    ]
    assert await socket.receive_nothing(timeout=0.3)


async def test_a_missing_push_is_filled_from_the_outbox_in_cursor_order(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer, monkeypatch: pytest.MonkeyPatch
) -> None:
    lost, pushed = await new_request(), await new_request()
    socket = await open_socket(key)
    await socket.send_json_to({"type": "resume", "after": 0})
    await socket.receive_json_from(timeout=2)

    with agent_pushes_dropped():
        await answer(lost)  # committed, but its push never leaves
    await answer(pushed)  # this push arrives with a gap before it

    received = [await socket.receive_json_from(timeout=2) for _ in range(2)]
    assert [(m["id"], m["cursor"]) for m in received] == [(str(lost.pk), 1), (str(pushed.pk), 2)]
    assert await socket.receive_nothing(timeout=0.3)


async def test_a_lost_push_with_nothing_after_it_is_found_by_the_recheck(
    open_socket: OpenSocket,
    key: str,
    new_request: Any,
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
    settings: Any,
) -> None:
    settings.AGENT_SOCKET_RECHECK_SECONDS = 1
    subscribed, resumed_only = await new_request(), await new_request()
    by_subscription = await open_socket(key)
    await by_subscription.send_json_to({"type": "subscribe", "ids": [str(subscribed.pk)]})
    await by_subscription.receive_json_from(timeout=2)
    by_cursor = await open_socket(key)
    await by_cursor.send_json_to({"type": "resume", "after": 0})
    await by_cursor.receive_json_from(timeout=2)

    with agent_pushes_dropped():
        await answer(subscribed)
        await answer(resumed_only)

    found = await by_subscription.receive_json_from(timeout=3)
    assert (found["id"], found["type"]) == (str(subscribed.pk), "completed")
    replayed = [await by_cursor.receive_json_from(timeout=3) for _ in range(2)]
    assert [m["cursor"] for m in replayed] == [1, 2]


async def test_another_agents_requests_can_neither_be_subscribed_nor_heard(
    open_socket: OpenSocket,
    key: str,
    new_request: Any,
    answer: Answer,
    make_agent: Any,
    queue: Queue,
) -> None:
    other_agent, _ = await database_sync_to_async(make_agent)("agent-b", queue)
    theirs = await new_request(agent=other_agent)
    socket = await open_socket(key)

    await socket.send_json_to({"type": "subscribe", "ids": [str(theirs.pk), "not-a-uuid"]})
    assert await socket.receive_json_from(timeout=2) == {
        "type": "error",
        "code": "not_found",
        "id": str(theirs.pk),
        "detail": "No such request.",
    }
    assert (await socket.receive_json_from(timeout=2))["code"] == "not_found"
    await socket.send_json_to({"type": "resume", "after": 0})
    await socket.receive_json_from(timeout=2)

    await answer(theirs)
    assert await socket.receive_nothing(timeout=0.5)


async def test_revoking_the_key_closes_its_open_socket(
    open_socket: OpenSocket, key: str, agent: Agent
) -> None:
    socket = await open_socket(key)

    await database_sync_to_async(accounts.revoke_agent)(agent)

    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}


async def test_rotating_the_key_closes_old_key_sockets_and_keeps_new_ones(
    open_socket: OpenSocket, key: str, agent: Agent, settings: Any
) -> None:
    settings.AGENT_SOCKET_RECHECK_SECONDS = 1
    old = await open_socket(key)

    new_key = await database_sync_to_async(accounts.rotate_agent_key)(agent)
    assert await old.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}

    new = await open_socket(new_key)
    await database_sync_to_async(accounts.rotate_agent_key)(agent)
    assert (await new.receive_output(timeout=3))["code"] == 4401  # rotated away in turn


async def test_a_revocation_whose_push_was_lost_still_closes_the_socket(
    open_socket: OpenSocket, key: str, agent: Agent, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.AGENT_SOCKET_RECHECK_SECONDS = 1
    socket = await open_socket(key)
    monkeypatch.setattr(pushes, "send_to_groups", lambda batch: None)

    await database_sync_to_async(accounts.revoke_agent)(agent)

    assert await socket.receive_output(timeout=3) == {"type": "websocket.close", "code": 4401}


@pytest.mark.parametrize("header", ["", "Bearer rh_deadbeef_nope", "Bearer rhr_12345678_reviewer-token"])
async def test_a_socket_without_a_valid_agent_key_is_closed_with_4401(
    open_socket: OpenSocket, agent: Agent, header: str
) -> None:
    socket = await open_socket(header.removeprefix("Bearer ") or None, expect_hello=False)
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}


async def test_a_revoked_key_cannot_open_a_socket(open_socket: OpenSocket, key: str, agent: Agent) -> None:
    await database_sync_to_async(accounts.revoke_agent)(agent)
    socket = await open_socket(key, expect_hello=False)
    assert await socket.receive_output(timeout=2) == {"type": "websocket.close", "code": 4401}


async def test_the_socket_says_hello_with_the_latest_cursor_and_answers_pings(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    await answer(await new_request())
    from channels.testing import WebsocketCommunicator

    from reviewhub.asgi import application

    socket = WebsocketCommunicator(
        application, "/ws/agent/", headers=[(b"authorization", f"Bearer {key}".encode())]
    )
    await socket.connect(timeout=5)
    try:
        assert await socket.receive_json_from(timeout=2) == {"type": "hello", "cursor": 1}
        await socket.send_json_to({"type": "ping"})
        assert await socket.receive_json_from(timeout=2) == {"type": "pong"}
    finally:
        await socket.disconnect()


@pytest.mark.parametrize(
    ("message", "code"),
    [
        ({"type": "subscribe", "ids": []}, "invalid"),
        ({"type": "subscribe", "ids": "abc"}, "invalid"),
        ({"type": "subscribe", "ids": ["x"] * 501}, "invalid"),
        ({"type": "resume", "after": -1}, "invalid"),
        ({"type": "resume", "after": "3"}, "invalid"),
        ({"type": "resume", "after": True}, "invalid"),
        ({"type": "shout"}, "unknown_type"),
        (["not", "an", "object"], "unknown_type"),
    ],
)
async def test_malformed_messages_get_an_error_and_the_socket_stays_open(
    open_socket: OpenSocket, key: str, message: Any, code: str
) -> None:
    socket = await open_socket(key)
    await socket.send_json_to(message)
    assert (await socket.receive_json_from(timeout=2))["code"] == code
    await socket.send_json_to({"type": "ping"})
    assert await socket.receive_json_from(timeout=2) == {"type": "pong"}


async def test_many_waiters_on_one_socket_each_hear_their_own_answer_once(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    requests = [await new_request() for _ in range(5)]
    socket = await open_socket(key)
    await socket.send_json_to({"type": "subscribe", "ids": [str(r.pk) for r in requests]})
    for _ in requests:
        assert (await socket.receive_json_from(timeout=2))["type"] == "state"

    await asyncio.gather(*(answer(r, "decline") for r in reversed(requests)))

    received = [await socket.receive_json_from(timeout=2) for _ in requests]
    assert sorted(m["id"] for m in received) == sorted(str(r.pk) for r in requests)
    assert sorted(m["cursor"] for m in received) == [1, 2, 3, 4, 5]
    assert await socket.receive_nothing(timeout=0.3)


async def test_subscribing_after_resuming_from_the_head_still_reports_an_older_completion(
    open_socket: OpenSocket, key: str, new_request: Any, answer: Answer
) -> None:
    done = await new_request()
    await answer(done, "decline")
    socket = await open_socket(key)  # hello says cursor 1
    await socket.send_json_to({"type": "resume", "after": 1})
    assert await socket.receive_json_from(timeout=2) == {"type": "resumed", "cursor": 1}

    await socket.send_json_to({"type": "subscribe", "ids": [str(done.pk)]})

    message = await socket.receive_json_from(timeout=2)
    assert (message["id"], message["cursor"], answer_of(message["result"])) == (
        str(done.pk),
        1,
        {"action": "decline"},
    )
    await socket.send_json_to({"type": "subscribe", "ids": [str(done.pk)]})
    # Asked again: answered again, as a state (the event itself is never repeated on one socket).
    state = await socket.receive_json_from(timeout=2)
    assert {**state, "result": answer_of(state["result"])} == {
        "type": "state",
        "id": str(done.pk),
        "status": "completed",
        "result": {"action": "decline"},
    }
    assert await socket.receive_nothing(timeout=0.3)
