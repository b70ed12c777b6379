"""`POST /api/v1/ws-ticket`: a short-lived, single-use ticket for sockets that cannot send headers."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.test import AsyncClient

from elicitation.delivery import tickets
from elicitation.models import Agent
from elicitation.queue import accounts
from tests.delivery.conftest import Socket

pytestmark = pytest.mark.django_db(transaction=True)

OpenSocket = Callable[..., Awaitable[Socket]]


async def issue(key: str) -> dict[str, Any]:
    response = await AsyncClient().post("/api/v1/ws-ticket", headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 201, response.content
    return response.json()


async def closed_with(socket: Socket) -> int | None:
    message = await socket.receive_output(timeout=2)
    return message.get("code") if message["type"] == "websocket.close" else None


async def test_an_agent_gets_a_ticket_that_opens_one_socket_once(
    open_socket: OpenSocket, agent_with_key: tuple[Agent, str]
) -> None:
    _agent, key = agent_with_key
    body = await issue(key)
    assert body["expiresIn"] == tickets.TICKET_MAX_AGE_SECONDS
    assert key not in body["ticket"]

    first = await open_socket(path=f"/ws/agent/?ticket={body['ticket']}")
    await first.send_json_to({"type": "ping"})
    assert await first.receive_json_from(timeout=2) == {"type": "pong"}

    again = await open_socket(path=f"/ws/agent/?ticket={body['ticket']}", expect_hello=False)
    assert await closed_with(again) == 4401


async def test_two_sockets_racing_with_one_ticket_let_exactly_one_in(
    open_socket: OpenSocket, agent_with_key: tuple[Agent, str]
) -> None:
    ticket = (await issue(agent_with_key[1]))["ticket"]
    sockets = await asyncio.gather(
        *(open_socket(path=f"/ws/agent/?ticket={ticket}", expect_hello=False) for _ in range(4))
    )
    first_messages = [await socket.receive_output(timeout=2) for socket in sockets]
    kinds = sorted(m["type"] for m in first_messages)
    assert kinds == ["websocket.close"] * 3 + ["websocket.send"]


@pytest.mark.parametrize("authorization", [None, "Bearer rh_00000000_wrong", "Bearer rhr_00000000_reviewer"])
async def test_a_ticket_needs_a_valid_agent_key(authorization: str | None, agent: Agent) -> None:
    headers = {"Authorization": authorization} if authorization else {}
    response = await AsyncClient().post("/api/v1/ws-ticket", headers=headers)
    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"


async def test_an_expired_ticket_is_refused(
    open_socket: OpenSocket, agent_with_key: tuple[Agent, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ticket = (await issue(agent_with_key[1]))["ticket"]
    monkeypatch.setattr(tickets, "TICKET_MAX_AGE_SECONDS", 0)
    await asyncio.sleep(1.1)
    socket = await open_socket(path=f"/ws/agent/?ticket={ticket}", expect_hello=False)
    assert await closed_with(socket) == 4401


async def test_rotating_the_key_voids_tickets_issued_under_it(
    open_socket: OpenSocket, agent_with_key: tuple[Agent, str]
) -> None:
    agent, key = agent_with_key
    ticket = (await issue(key))["ticket"]
    await database_sync_to_async(accounts.rotate_agent_key)(agent)
    socket = await open_socket(path=f"/ws/agent/?ticket={ticket}", expect_hello=False)
    assert await closed_with(socket) == 4401


@pytest.mark.parametrize("param", ["key", "token", "authorization", "ticket"])
async def test_the_key_itself_is_never_accepted_in_the_url(
    open_socket: OpenSocket, agent_with_key: tuple[Agent, str], param: str
) -> None:
    socket = await open_socket(path=f"/ws/agent/?{param}={agent_with_key[1]}", expect_hello=False)
    assert await closed_with(socket) == 4401


async def test_a_forged_ticket_is_refused(open_socket: OpenSocket, agent: Agent) -> None:
    from django.core import signing

    forged = signing.dumps({"agent": agent.pk, "prefix": agent.key_prefix}, salt="another-salt")
    socket = await open_socket(path=f"/ws/agent/?ticket={forged}", expect_hello=False)
    assert await closed_with(socket) == 4401


def test_two_tickets_issued_in_the_same_second_are_distinct_and_both_open_a_socket(
    agent_with_key: Any,
) -> None:
    agent, _ = agent_with_key
    first, second = tickets.issue_ticket(agent), tickets.issue_ticket(agent)
    assert first != second
    assert tickets.agent_for_ticket(f"ticket={first}") == agent
    assert tickets.agent_for_ticket(f"ticket={second}") == agent
    assert tickets.agent_for_ticket(f"ticket={first}") is None  # each still works once
