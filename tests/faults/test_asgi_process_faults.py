"""One ASGI process killed while agents wait on it: behind one address (a small TCP balancer standing in for the
load balancer), the agents' client reconnects to the surviving process, resumes, and gets every answer exactly
once, including answers given while it was disconnected."""

import asyncio
import contextlib
import threading
from collections import Counter
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from elicitation.models import ElicitationRequest, Queue, Status
from elicitation.queue import transitions
from reviewhub_client import AsyncReviewHubClient
from tests.conftest import FORM_SCHEMA
from tests.faults.processes import Daphne

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]
AGENTS = 4
REQUESTS_PER_AGENT = 3


class Balancer:
    """Forwards each new TCP connection to the first backend that accepts it, like a load balancer whose
    health check has dropped a dead process. Runs its own event loop in a thread."""

    def __init__(self, ports: list[int]) -> None:
        self.ports = ports
        self.loop = asyncio.new_event_loop()
        self.port = 0
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()
        server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for port in self.ports:
            try:
                upstream_reader, upstream_writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                continue
        else:
            writer.close()
            return

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(Exception):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            with contextlib.suppress(Exception):
                sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    def __enter__(self) -> "Balancer":
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def answer(request_id: str, reviewer: Any, approve: bool) -> None:
    """Runs in an executor thread: its own connection, closed after, so none outlives the test database."""
    try:
        transitions.claim_request(request_id, user=reviewer)
        transitions.respond(request_id, user=reviewer, action="accept", content={"approve": approve})
    finally:
        connection.close()


def test_agents_on_a_killed_process_reconnect_resume_and_get_every_answer_once(
    queue: Queue, make_agent: Any, make_reviewer: Any
) -> None:
    reviewer = make_reviewer("alice", queue)
    keys = [make_agent(f"agent-{n}", queue)[1] for n in range(AGENTS)]
    first, second = Daphne(), Daphne()
    first.start()
    second.start()
    try:
        with Balancer([first.port, second.port]) as balancer:
            results = asyncio.run(run_agents(balancer.url, keys, reviewer, kill=first.kill))
    finally:
        first.kill()
        second.stop()

    expected = {request_id: approve for request_id, approve in results["given"].items()}
    received = results["received"]
    assert Counter(request_id for request_id, _ in received) == Counter(dict.fromkeys(expected, 1))
    assert dict(received) == expected  # each agent got the answer given, exactly once per id
    assert results["after_kill"] > 0  # some answers were given while the agents had no socket
    assert not ElicitationRequest.objects.filter(status=Status.CLAIMED).exists()
    assert ElicitationRequest.objects.filter(status=Status.COMPLETED).count() == AGENTS * REQUESTS_PER_AGENT


async def run_agents(url: str, keys: list[str], reviewer: Any, kill: Any) -> dict[str, Any]:
    clients = [AsyncReviewHubClient(url, key, timeout=5, long_poll_seconds=2) for key in keys]
    given: dict[str, bool] = {}
    received: list[tuple[str, bool]] = []
    try:
        owned: list[tuple[AsyncReviewHubClient, str]] = []
        for client in clients:
            for _ in range(REQUESTS_PER_AGENT):
                created = await client.create("Approve?", FORM_SCHEMA, queue="payments")
                owned.append((client, str(created.id)))

        async def wait_one(client: AsyncReviewHubClient, request_id: str) -> None:
            result = await client.wait(request_id, timeout=90)
            received.append((request_id, bool((result.content or {}).get("approve"))))

        waits = [asyncio.ensure_future(wait_one(client, request_id)) for client, request_id in owned]
        await asyncio.sleep(2)  # every client's socket is up on the first process
        half = len(owned) // 2
        for index, (_, request_id) in enumerate(owned[:half]):
            given[request_id] = index % 2 == 0
            await sync_to_async(answer, thread_sensitive=False)(request_id, reviewer, given[request_id])
        for _ in range(100):  # the first half arrives over the live sockets
            if len(received) >= half:
                break
            await asyncio.sleep(0.1)
        await asyncio.to_thread(kill)  # SIGKILL the process every socket is connected to
        for index, (_, request_id) in enumerate(owned[half:]):
            given[request_id] = index % 2 == 1
            await sync_to_async(answer, thread_sensitive=False)(request_id, reviewer, given[request_id])
        await asyncio.wait_for(asyncio.gather(*waits), timeout=120)
    finally:
        for client in clients:
            await client.aclose()
    return {"given": given, "received": received, "after_kill": len(owned) - half}
