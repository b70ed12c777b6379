"""The client's wait survives the server dying: it reconnects, resumes from its last cursor, and still returns the
answer, including one given while it was disconnected."""

import asyncio
import time
from typing import Any

import pytest
from channels.db import database_sync_to_async

from elicitation.models import Agent
from elicitation.queue import transitions
from reviewhub_client import AsyncReviewHubClient
from reviewhub_client.client import AgentSocket
from tests.client.conftest import Setup
from tests.conftest import FORM_SCHEMA
from tests.delivery.liveserver import LiveServer, answer_through_api

pytestmark = pytest.mark.django_db(transaction=True)


async def eventually(check: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


async def test_a_wait_returns_the_answer_given_while_the_server_was_dead_and_resumes_the_feed(
    setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []
    original = AgentSocket._record

    def record(socket: AgentSocket, cursor: int) -> None:
        seen.append(cursor)
        original(socket, cursor)

    monkeypatch.setattr(AgentSocket, "_record", record)

    def answer_in_database(request_id: str, action: str) -> None:
        transitions.claim_request(request_id, user=setup.reviewer)
        transitions.respond(request_id, user=setup.reviewer, action=action, content=None)

    server = await database_sync_to_async(LiveServer().start)()
    restarted: LiveServer | None = None
    try:
        async with AsyncReviewHubClient(server.url, setup.key, timeout=5) as hub:
            waited = await hub.create("Survive a restart?", FORM_SCHEMA)
            bystander = await hub.create("Answered while down, not awaited", FORM_SCHEMA)
            waiting = asyncio.ensure_future(hub.wait(waited.id, timeout=120))
            socket = hub._socket
            assert socket is not None
            await eventually(lambda: socket.connected)
            await asyncio.sleep(0.3)  # subscribed
            assert socket.cursor == 0

            await database_sync_to_async(server.kill)()
            await eventually(lambda: not socket.connected, timeout=10)
            await database_sync_to_async(answer_in_database)(waited.id, "decline")  # nobody can hear it
            await database_sync_to_async(answer_in_database)(bystander.id, "cancel")
            await asyncio.sleep(0.5)
            assert not waiting.done()

            restarted = await database_sync_to_async(LiveServer(port=server.port).start)()

            declined = await asyncio.wait_for(waiting, timeout=60)
            assert (declined.action, declined.content) == ("decline", None)

            # The next wait reconnects (if the first did not already) and resumes after cursor 0: both events
            # missed while the server was dead come through the replay, then the new answer live.
            late = await hub.create("After the restart", FORM_SCHEMA)
            waiting = asyncio.ensure_future(hub.wait(late.id, timeout=60))
            await eventually(lambda: socket.connected and socket.cursor == 2)
            await asyncio.to_thread(
                answer_through_api, restarted.url, setup.reviewer_token, late.id, "accept", {"approve": True}
            )
            accepted = await waiting
            assert (accepted.action, accepted.content) == ("accept", {"approve": True})
            await eventually(lambda: socket.cursor == 3)
    finally:
        await database_sync_to_async(server.stop)()
        if restarted is not None:
            await database_sync_to_async(restarted.stop)()

    assert sorted(set(seen)) == [1, 2, 3]
    assert len(seen) == len(set(seen)), seen  # no event was delivered twice
    agent = await database_sync_to_async(Agent.objects.get)(pk=setup.agent.pk)
    assert agent.last_event_seq == 3
