"""An agent that long-polls again and again costs the database per interval, not per poll (bench #10): its key is
trusted while its revocation would be heard, first looks and the answers of waits that ran out are spaced reads.
The losing sides: a revoked key is refused whether its push was heard or lost, and the trust ends with the group."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async
from django.db import connection
from django.test.utils import CaptureQueriesContext

from elicitation.delivery import long_poll, pushes, waiters
from elicitation.models import Agent, ElicitationRequest
from elicitation.queue import accounts
from reviewhub.asgi import long_polls
from tests.asgi import AsgiClient, AsgiResponse
from tests.waiting.test_batched_waiting import counting_calls, until
from tests.waiting.test_long_poll_answers import after_django_answered_once, revoke_without_push

pytestmark = pytest.mark.django_db(transaction=True)

Answer = Callable[..., Awaitable[ElicitationRequest]]


@pytest.fixture(autouse=True)
def nothing_learned(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(long_polls, "route_headers", None)


async def poll(key: str, request: ElicitationRequest, wait: int = 30) -> AsgiResponse:
    return await AsgiClient().get(
        f"/api/v1/requests/{request.pk}", {"wait": wait}, headers={"Authorization": f"Bearer {key}"}
    )


async def test_an_agent_polling_again_costs_no_key_read_while_its_group_is_joined(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MAX_LONG_POLL_SECONDS = 1
    _, key = agent_with_key
    key_reads = counting_calls(monkeypatch, long_poll, "agent_for_key")
    _, request = await after_django_answered_once(answer, make_request, key)
    reads_before = len(key_reads)

    polls = [await poll(key, request) for _ in range(3)]

    assert [(p.status_code, p.json()["status"]) for p in polls] == [(200, "pending")] * 3
    assert reads_before >= 1 and len(key_reads) == reads_before  # each answer re-confirmed the key on its row


async def test_a_heard_revocation_ends_the_trust_and_the_next_poll_is_refused_at_once(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent, key = agent_with_key
    key_reads = counting_calls(monkeypatch, long_poll, "agent_for_key")
    _, request = await after_django_answered_once(answer, make_request, key)
    await until(lambda: bool(waiters.hub().trusted_keys))
    reads_before = len(key_reads)

    await database_sync_to_async(accounts.revoke_agent)(agent)
    await until(lambda: not waiters.hub().trusted_keys)  # the push reached the hub
    refused = await asyncio.wait_for(poll(key, request), 5)  # not after a 30 s wait

    assert refused.status_code == 401
    assert len(key_reads) == reads_before + 1  # read again, and refused


async def test_a_lost_revocation_lets_a_trusted_key_wait_but_never_be_answered(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MAX_LONG_POLL_SECONDS = 1
    agent, key = agent_with_key
    key_reads = counting_calls(monkeypatch, long_poll, "agent_for_key")
    _, request = await after_django_answered_once(answer, make_request, key)
    reads_before = len(key_reads)

    await database_sync_to_async(revoke_without_push)(agent)
    ran_out = await poll(key, request)  # still trusted: it waits, then its answer's row refuses the key
    again = await poll(key, request)

    assert (ran_out.status_code, again.status_code) == (401, 401)
    assert "status" not in ran_out.json()
    assert (
        len(key_reads) == reads_before + 1
    )  # the refused answer ended the trust: the next poll read the key


async def test_the_trust_ends_when_the_agents_group_is_left_or_it_grows_old(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MAX_LONG_POLL_SECONDS = 1
    monkeypatch.setattr(waiters, "GROUP_LINGER_SECONDS", 0.3)
    agent, key = agent_with_key
    key_reads = counting_calls(monkeypatch, long_poll, "agent_for_key")
    _, request = await after_django_answered_once(answer, make_request, key)
    group = pushes.agent_group(agent.pk)

    await until(lambda: not waiters.hub().is_joined(group))  # nobody waits: after the linger it is left
    assert waiters.hub().trusted_keys == {}
    reads_before = len(key_reads)
    await poll(key, request)
    assert len(key_reads) == reads_before + 1

    monkeypatch.setattr(waiters, "KEY_TRUST_SECONDS", 0.0)
    await poll(key, request)
    assert len(key_reads) == reads_before + 2


async def test_waits_that_run_out_together_are_answered_by_one_query(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, key = agent_with_key
    await after_django_answered_once(answer, make_request, key)
    requests = await database_sync_to_async(lambda: [make_request() for _ in range(20)])()
    settings.MAX_LONG_POLL_SECONDS = 1
    answer_reads: list[tuple[int, int]] = []  # (waits answered, queries run)
    original = long_polls.answer_after_wait
    assert original is not None

    def counted(waits: list[tuple[int, str, str]]) -> list[bytes | None]:
        with CaptureQueriesContext(connection) as captured:
            bodies = original(waits)
        answer_reads.append((len(waits), len(captured.captured_queries)))
        return bodies

    monkeypatch.setattr(long_polls, "answer_after_wait", counted)

    async def poll_later(index: int, request: ElicitationRequest) -> AsgiResponse:
        await asyncio.sleep(0.02 * index)  # they run out over ~0.4 s, not all in one loop turn
        return await poll(key, request)

    polls = await asyncio.gather(*(poll_later(index, request) for index, request in enumerate(requests)))

    assert [(p.status_code, p.json()["id"]) for p in polls] == [(200, str(r.pk)) for r in requests]
    assert sum(waits for waits, _ in answer_reads) == 20
    # A few spaced reads (TIMED_OUT_ANSWER_SPACING apart) of one query each, not one per wait.
    assert len(answer_reads) <= 5 and {queries for _, queries in answer_reads} == {1}


async def test_spaced_reads_answer_the_first_at_once_and_the_rest_together() -> None:
    batches: list[list[str]] = []

    def read(keys: list[str]) -> dict[str, str]:
        batches.append(keys)
        if "bad" in keys:
            raise RuntimeError("the database went away")
        return {key: key.upper() for key in keys if key != "missing"}

    reads = waiters.SpacedReads(read, spacing=0.5)
    assert await reads.look_up("a") == "A"

    async def look_up_later(key: str) -> str | None:
        await asyncio.sleep(0.1)  # well inside the spacing: it joins the read that is waiting for its turn
        return await reads.look_up(key)

    later = await asyncio.gather(
        reads.look_up("b"), look_up_later("c"), reads.look_up("b"), reads.look_up("missing")
    )
    failing = await asyncio.gather(reads.look_up("bad"), reads.look_up("d"), return_exceptions=True)
    recovered = await reads.look_up("e")

    assert later == ["B", "C", "B", None]
    assert [type(outcome) for outcome in failing] == [RuntimeError, RuntimeError]  # the whole batch failed
    assert recovered == "E"  # and the next one reads again
    assert batches == [["a"], ["b", "missing", "c"], ["bad", "d"], ["e"]]
