"""An agent that long-polls again and again costs the database per interval, not per poll (bench #10): its key is
trusted for starting a wait while its revocation would be heard, and first looks are spaced reads. The losing
sides: a revoked key is refused whether its push was heard or lost, and the trust ends with the group."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from channels.db import database_sync_to_async

from elicitation.delivery import long_poll, pushes, waiters
from elicitation.models import Agent, ElicitationRequest
from elicitation.queue import accounts
from tests.asgi import AsgiClient, AsgiResponse
from tests.waiting.test_batched_waiting import counting_calls, until
from tests.waiting.test_long_poll_answered_by_django import long_poll_answered_by, revoke_without_push

pytestmark = pytest.mark.django_db(transaction=True)

Answer = Callable[..., Awaitable[ElicitationRequest]]


async def answered_once(
    answer: Answer, make_request: Callable[..., ElicitationRequest], key: str
) -> ElicitationRequest:
    """One long-poll answered (its key read and trusted); a fresh request to poll next."""
    await long_poll_answered_by(answer, await database_sync_to_async(make_request)(), key)
    return await database_sync_to_async(make_request)()


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
    request = await answered_once(answer, make_request, key)
    reads_before = len(key_reads)

    polls = [await poll(key, request) for _ in range(3)]

    assert [(p.status_code, p.json()["status"]) for p in polls] == [(200, "pending")] * 3
    # Each of Django's 200s confirmed the key again.
    assert reads_before >= 1 and len(key_reads) == reads_before


async def test_a_heard_revocation_ends_the_trust_and_the_next_poll_is_refused_at_once(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    agent, key = agent_with_key
    key_reads = counting_calls(monkeypatch, long_poll, "agent_for_key")
    request = await answered_once(answer, make_request, key)
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
    request = await answered_once(answer, make_request, key)
    reads_before = len(key_reads)

    await database_sync_to_async(revoke_without_push)(agent)
    ran_out = await poll(key, request)  # still trusted: it waits, then Django refuses the key
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
    request = await answered_once(answer, make_request, key)
    group = pushes.agent_group(agent.pk)

    await until(lambda: not waiters.hub().is_joined(group))  # nobody waits: after the linger it is left
    assert waiters.hub().trusted_keys == {}
    reads_before = len(key_reads)
    await poll(key, request)
    assert len(key_reads) == reads_before + 1

    monkeypatch.setattr(waiters, "KEY_TRUST_SECONDS", 0.0)
    await poll(key, request)
    assert len(key_reads) == reads_before + 2


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
