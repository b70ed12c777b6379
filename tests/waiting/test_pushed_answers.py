"""A long-poll woken by the push that closed its request answers with the body that push carries (rendered where
the request closed, delivery/pushes.long_poll_answer): Django's body and headers, no read, the call still counted
against the agent's rate. The losing sides: a key revoked or rotated before the answer, a body too large to carry,
an agent out of room in its rate window, each falls back to the read or to Django."""

import asyncio
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.utils import timezone

from elicitation.api import long_poll_answers, throttling
from elicitation.delivery import long_poll, pushes
from elicitation.models import Agent, AgentEvent, ElicitationRequest
from elicitation.queue import accounts
from reviewhub.asgi import long_polls
from reviewhub.rates import parse_rate
from tests.asgi import AsgiClient
from tests.waiting.test_long_poll_answers import (
    after_django_answered_once,
    after_key_change,
    key_change_push_lost,
    long_poll_answered_by,
)

pytestmark = pytest.mark.django_db(transaction=True)

Answer = Callable[..., Awaitable[ElicitationRequest]]


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[list[tuple[int, str, str]]]:
    """Every read the middleware makes to answer a wait (the path a pushed answer saves)."""
    calls: list[list[tuple[int, str, str]]] = []
    original = long_polls.answer_after_wait
    assert original is not None

    def counted(waits: list[tuple[int, str, str]]) -> list[bytes | None]:
        calls.append(waits)
        return original(waits)

    monkeypatch.setattr(long_polls, "route_headers", None)
    monkeypatch.setattr(long_polls, "answer_after_wait", counted)
    monkeypatch.setattr(long_polls, "rate_room", long_poll.RateRoom())
    return calls


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every call the middleware counts against an agent's rate."""
    calls: list[int] = []

    def counted(agent_id: int) -> throttling.Charge:
        calls.append(agent_id)
        return throttling.charge_agent_call(agent_id)

    monkeypatch.setattr(long_polls, "count_agent_call", counted)
    return calls


GENEROUS_RATE = parse_rate("1000/min")


@pytest.fixture
def generous_rate(settings: Any) -> None:
    """A rate the tests never reach, counted in the cache (no rate at all counts nothing)."""
    settings.AGENT_RATE = GENEROUS_RATE


def rate_count(agent: Agent) -> int:
    return throttling.current_count(throttling.AgentRateThrottle.scope, str(agent.pk), GENEROUS_RATE)[0]


async def get(request: ElicitationRequest, key: str) -> Any:
    return await AsgiClient().get(
        f"/api/v1/requests/{request.pk}", headers={"Authorization": f"Bearer {key}"}
    )


@pytest.fixture
async def answered_once(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    reads: list[Any],
    counts: list[int],
) -> tuple[Agent, str, ElicitationRequest]:
    """Once Django has answered the route (so the middleware knows its headers): the agent, its key, and a fresh
    request to wait on."""
    agent, key = agent_with_key
    _, request = await after_django_answered_once(answer, make_request, key)
    return agent, key, request


async def test_a_pushed_answer_is_djangos_body_and_headers_with_no_read_and_the_call_counted(
    generous_rate: None,
    answered_once: tuple[Agent, str, ElicitationRequest],
    answer: Answer,
    reads: list[Any],
    counts: list[int],
) -> None:
    agent, key, request = answered_once
    reads_before, counted_before = len(reads), rate_count(agent)

    async def accept(request: ElicitationRequest, action: str) -> ElicitationRequest:
        return await answer(request, "accept", {"approve": True})

    pushed = await long_poll_answered_by(accept, request, key)
    counted_after = rate_count(agent)
    plain = await get(request, key)

    assert len(reads) == reads_before  # no read: the push carried the body
    assert counts == [agent.pk]
    assert counted_after == counted_before + 1
    assert pushed.status_code == 200
    assert pushed.json()["status"] == "completed" and pushed.json()["result"] == {
        "action": "accept",
        "content": {"approve": True},
    }
    assert json.loads(pushed.content) == json.loads(plain.content)
    assert pushed.headers == plain.headers


async def test_with_room_in_its_window_the_answer_leaves_first_and_is_counted_after(
    generous_rate: None,
    answered_once: tuple[Agent, str, ElicitationRequest],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    reads: list[Any],
    counts: list[int],
) -> None:
    agent, key, first = answered_once
    await long_poll_answered_by(answer, first, key)  # counted first: the room was not known yet
    assert long_polls.rate_room.room[agent.pk][0] >= 1
    counted_before = rate_count(agent)

    second = await database_sync_to_async(make_request)()
    answered = await long_poll_answered_by(answer, second, key)
    async with asyncio.timeout(5):
        while long_polls.counting:
            await asyncio.sleep(0.01)

    assert answered.status_code == 200 and answered.json()["id"] == str(second.pk)
    assert counts == [agent.pk, agent.pk]
    assert rate_count(agent) == counted_before + 1  # counted once, after the answer left
    assert not reads[1:]


async def test_a_rate_exceeded_by_a_pushed_answer_is_djangos_429(
    answered_once: tuple[Agent, str, ElicitationRequest], answer: Answer, settings: Any, counts: list[int]
) -> None:
    agent, key, request = answered_once
    settings.AGENT_RATE = parse_rate("1/min")  # Django's answer above used the only call

    response = await long_poll_answered_by(answer, request, key)

    assert counts == [agent.pk]  # counted before answering: this process knew of no room
    assert response.status_code == 429 and response.json()["code"] == "throttled"


def rotate_without_push(agent: Agent) -> str:
    """Rotate the agent's key with its push lost on the way."""
    with key_change_push_lost():
        return accounts.rotate_agent_key(agent)


async def test_a_key_rotated_before_the_answer_gets_no_pushed_body_and_django_refuses_it(
    answered_once: tuple[Agent, str, ElicitationRequest], answer: Answer, counts: list[int]
) -> None:
    agent, key, request = answered_once

    response = await long_poll_answered_by(
        after_key_change(lambda: rotate_without_push(agent), answer), request, key
    )

    assert response.status_code == 401
    assert "status" not in response.json()
    assert counts == []  # the pushed body named the new key: never used, never counted


async def test_a_body_too_large_to_carry_is_read_as_before(
    answered_once: tuple[Agent, str, ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
    reads: list[Any],
    counts: list[int],
) -> None:
    _, key, request = answered_once
    monkeypatch.setattr(pushes, "LONG_POLL_ANSWER_MAX_BYTES", 64)
    reads_before = len(reads)

    response = await long_poll_answered_by(answer, request, key)

    assert response.status_code == 200 and response.json()["status"] == "completed"
    assert len(reads) == reads_before + 1
    assert counts == []  # the read counted it, as before


def test_the_push_carries_the_body_for_the_key_the_closing_transaction_read(
    make_request: Callable[..., ElicitationRequest],
    agent_with_key: tuple[Agent, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent, _ = agent_with_key
    request = make_request()
    sent: list[dict[str, Any]] = []
    monkeypatch.setattr(pushes, "send_on_commit", lambda group, message: sent.append(message))
    request.status, request.action, request.agent = "completed", "decline", agent
    event = AgentEvent(agent=agent, seq=1, kind="completed", request=request, payload={})
    pushes.on_agent_event_recorded(AgentEvent, event)
    expected = long_poll_answers.request_body(request)
    agent.revoked_at = timezone.now()  # as the closing transaction read the agent's row
    pushes.on_agent_event_recorded(AgentEvent, event)
    request.status = "pending"
    agent.revoked_at = None
    pushes.on_agent_event_recorded(AgentEvent, event)

    closed, revoked, still_open = sent
    assert closed["long_poll_answer"] == {"body": expected, "key_prefix": agent.key_prefix}
    assert json.loads(closed["long_poll_answer"]["body"])["result"] == {"action": "decline"}
    assert "long_poll_answer" not in revoked
    assert "long_poll_answer" not in still_open


def test_the_rate_room_is_half_of_what_the_count_left_until_the_window_ends() -> None:
    async def scenario() -> list[bool]:
        room = long_poll.RateRoom()
        taken = [room.take(7)]  # nothing known: count first
        room.learn(7, throttling.Charge(None, 5, 30))
        taken += [room.take(7) for _ in range(3)]  # 5 // 2 = 2
        room.learn(7, throttling.Charge(12, 0, 12))  # over the rate
        taken.append(room.take(7))
        room.learn(7, throttling.Charge(None, None, 0))  # not counted (cache down)
        taken.append(room.take(7))
        room.learn(7, throttling.Charge(None, 40, 0))  # the window ends now
        taken.append(room.take(7))
        room.learn(7, throttling.Charge(None, math.inf, 0))  # no rate at all
        taken += [room.take(7) for _ in range(3)]
        return taken

    assert asyncio.run(scenario()) == [False, True, True, False, False, False, False, True, True, True]
