"""A long-poll on a request waits in front of Django (delivery/long_poll.py), then Django answers it as any GET:
it authenticates the key again, counts the call against the agent's rate and renders the request. The losing
sides: a key revoked or rotated during the wait (its push heard or lost), an agent over its rate, a client that
hangs up before the answer."""

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async
from channels.testing import HttpCommunicator

from elicitation.api.agent_views import RequestDetailView
from elicitation.delivery import pushes, waiters
from elicitation.models import Agent, ElicitationRequest
from elicitation.queue import accounts, signals
from reviewhub.asgi import application
from reviewhub.rates import parse_rate
from tests.asgi import AsgiClient, AsgiResponse

pytestmark = pytest.mark.django_db(transaction=True)

Answer = Callable[..., Awaitable[ElicitationRequest]]


@pytest.fixture
def django_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every answer RequestDetailView gives, by request id."""
    calls: list[str] = []
    original = RequestDetailView.dispatch

    def counted(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(kwargs["request_id"]))
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(RequestDetailView, "dispatch", counted)
    return calls


async def until_waiting(request: ElicitationRequest) -> None:
    """Until a long-poll on `request` waits in the hub."""
    async with asyncio.timeout(10):
        while str(request.pk) not in waiters.hub().request_waits:
            await asyncio.sleep(0.02)


async def long_poll_answered_by(
    answer: Answer,
    request: ElicitationRequest,
    key: str,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
) -> AsgiResponse:
    """Long-poll `request`, answer it once the wait has begun, return what the long-poll got."""
    polling = asyncio.ensure_future(
        AsgiClient().get(
            f"/api/v1/requests/{request.pk}",
            {"wait": 25, **(query or {})},
            headers={"Authorization": f"Bearer {key}", **(headers or {})},
        )
    )
    await until_waiting(request)
    await answer(request, "decline")
    return await asyncio.wait_for(polling, 10)


@contextlib.contextmanager
def key_change_push_lost() -> Iterator[None]:
    """Key changes still commit, but their push never leaves (as in a Redis blip)."""
    signals.agent_key_changed.disconnect(dispatch_uid="delivery.agent_key_changed")
    try:
        yield
    finally:
        signals.agent_key_changed.connect(
            pushes.on_agent_key_changed, dispatch_uid="delivery.agent_key_changed"
        )


def revoke_without_push(agent: Agent) -> None:
    """Revoke the agent's key with its push lost on the way."""
    with key_change_push_lost():
        accounts.revoke_agent(agent)


def rotate_without_push(agent: Agent) -> str:
    """Rotate the agent's key with its push lost on the way."""
    with key_change_push_lost():
        return accounts.rotate_agent_key(agent)


def after_key_change(change: Callable[[], object], answer: Answer) -> Answer:
    """An answer that first changes the agent's key (`change`, run as a reviewer's request would, in a thread)."""

    async def changed_then_answered(request: ElicitationRequest, action: str) -> ElicitationRequest:
        await database_sync_to_async(change)()
        return await answer(request, action)

    return changed_then_answered


async def test_a_long_poll_woken_by_the_closing_push_gets_djangos_answer_with_the_result(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    django_reads: list[str],
) -> None:
    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever returns early was woken by the push
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()

    async def accept(request: ElicitationRequest, action: str) -> ElicitationRequest:
        return await answer(request, "accept", {"approve": True})

    woken = await long_poll_answered_by(accept, request, key)
    plain = await AsgiClient().get(
        f"/api/v1/requests/{request.pk}", headers={"Authorization": f"Bearer {key}"}
    )

    assert django_reads == [str(request.pk), str(request.pk)]  # the long-poll's answer, then the plain GET's
    assert woken.status_code == 200
    assert woken.json()["status"] == "completed"
    result = woken.json()["result"]
    assert (result["action"], result["content"]) == ("accept", {"approve": True})
    assert woken.content == plain.content and woken.headers == plain.headers
    assert "content-security-policy" in woken.headers and woken.headers["x-content-type-options"] == "nosniff"


@pytest.mark.parametrize("push", ["heard", "lost"])
async def test_a_key_revoked_during_the_wait_is_refused(
    push: str,
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    django_reads: list[str],
) -> None:
    agent, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    revoke = (
        (lambda: accounts.revoke_agent(agent)) if push == "heard" else (lambda: revoke_without_push(agent))
    )

    response = await long_poll_answered_by(after_key_change(revoke, answer), request, key)

    assert response.status_code == 401
    assert "result" not in response.json() and "status" not in response.json()


async def test_a_key_rotated_during_the_wait_is_refused_even_with_its_push_lost(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
) -> None:
    agent, key = agent_with_key
    request = await database_sync_to_async(make_request)()

    response = await long_poll_answered_by(
        after_key_change(lambda: rotate_without_push(agent), answer), request, key
    )

    assert response.status_code == 401
    assert "status" not in response.json()


async def test_a_wait_that_runs_out_gets_the_open_state_from_django(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    settings: Any,
    django_reads: list[str],
) -> None:
    settings.MAX_LONG_POLL_SECONDS = 1
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()

    response = await AsgiClient().get(
        f"/api/v1/requests/{request.pk}", {"wait": 30}, headers={"Authorization": f"Bearer {key}"}
    )

    assert (response.status_code, response.json()["status"]) == (200, "pending")
    assert django_reads == [str(request.pk)]


async def test_each_long_poll_is_one_call_against_the_rate_and_the_one_over_it_gets_429(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    clock: Any,  # the rate's fixed window stays where it is: three calls never straddle a minute boundary
) -> None:
    settings.AGENT_RATE = parse_rate("2/min")
    _, key = agent_with_key
    requests = [await database_sync_to_async(make_request)() for _ in range(3)]

    answered = [await long_poll_answered_by(answer, request, key) for request in requests]

    assert [response.status_code for response in answered] == [200, 200, 429]
    assert answered[2].json()["code"] == "throttled"
    assert 1 <= int(answered[2].headers["retry-after"]) <= 60


@pytest.mark.parametrize(
    ("headers", "query", "status"),
    [
        ({"Accept": "application/json; indent=4"}, {}, 200),
        ({}, {"format": "json"}, 200),
        ({"Accept": "text/html"}, {}, 406),
    ],
)
async def test_what_the_agent_asks_of_the_rendering_is_djangos_to_read(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    django_reads: list[str],
    headers: dict[str, str],
    query: dict[str, str],
    status: int,
) -> None:
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()

    response = await long_poll_answered_by(answer, request, key, headers, query)

    assert django_reads == [str(request.pk)]
    assert response.status_code == status
    if status == 200:
        assert json.loads(response.content)["result"]["action"] == "decline"
    if "indent" in headers.get("Accept", ""):
        assert response.content.startswith(b'{\n    "')


async def test_a_client_that_hangs_up_during_the_wait_is_not_answered_and_its_wait_ends(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    django_reads: list[str],
) -> None:
    _, key = agent_with_key
    request = await database_sync_to_async(make_request)()
    communicator = HttpCommunicator(
        application,
        "GET",
        f"/api/v1/requests/{request.pk}?wait=25",
        headers=[(b"host", b"testserver"), (b"authorization", f"Bearer {key}".encode())],
    )
    await communicator.send_input({"type": "http.request", "body": b""})
    await until_waiting(request)

    await communicator.send_input({"type": "http.disconnect"})
    await communicator.wait(timeout=5)  # the application returns: not after the 25 s wait

    assert await communicator.receive_nothing()  # nothing was sent
    async with asyncio.timeout(5):  # the cancelled wait leaves the hub on its next turn of the loop
        while str(request.pk) in waiters.hub().request_waits:
            await asyncio.sleep(0.02)
    assert django_reads == []


async def test_waits_that_end_together_are_answered_by_django_a_few_at_a_time_and_every_one_is_answered(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.MAX_LONG_POLL_SECONDS = 1
    settings.DB_POOL_MAX_SIZE = 2  # two answers at once: one per pooled connection
    _, key = agent_with_key
    requests = [await database_sync_to_async(make_request)() for _ in range(6)]
    inside, most = 0, 0
    count_lock = threading.Lock()
    pairs = threading.Barrier(2, timeout=30)  # two answers are inside Django together before either leaves
    original = RequestDetailView.dispatch

    def counted(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal inside, most
        with count_lock:
            inside += 1
            most = max(most, inside)
        try:
            pairs.wait()
            return original(self, request, *args, **kwargs)
        finally:
            with count_lock:
                inside -= 1

    monkeypatch.setattr(RequestDetailView, "dispatch", counted)

    answered = await asyncio.gather(
        *(
            AsgiClient().get(
                f"/api/v1/requests/{request.pk}", {"wait": 30}, headers={"Authorization": f"Bearer {key}"}
            )
            for request in requests
        )
    )

    assert [(r.status_code, r.json()["status"]) for r in answered] == [(200, "pending")] * 6
    assert most == 2
