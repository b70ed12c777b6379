"""A long-poll on a request is answered in front of Django once its wait ends (delivery/long_poll.py with
api/long_poll_answers.py): the same body and headers as Django's answer, without its pass. Whatever Django must
judge (a key revoked meanwhile, a rate exceeded, options only DRF reads) still goes through Django."""

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
from channels.db import database_sync_to_async

from elicitation.api.agent_views import RequestDetailView
from elicitation.delivery import pushes, waiters
from elicitation.models import Agent, ElicitationRequest
from elicitation.queue import accounts, signals
from reviewhub.asgi import long_polls
from reviewhub.rates import parse_rate
from tests.asgi import AsgiClient, AsgiResponse

pytestmark = pytest.mark.django_db(transaction=True)

Answer = Callable[..., Awaitable[ElicitationRequest]]


@pytest.fixture
def django_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every answer RequestDetailView gives, by request id; and the middleware starts with nothing learned."""
    monkeypatch.setattr(long_polls, "route_headers", None)
    calls: list[str] = []
    original = RequestDetailView.dispatch

    def counted(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(str(kwargs["request_id"]))
        return original(self, request, *args, **kwargs)

    monkeypatch.setattr(RequestDetailView, "dispatch", counted)
    return calls


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
    async with asyncio.timeout(10):
        while str(request.pk) not in waiters.hub().request_waits:
            await asyncio.sleep(0.02)
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


def after_key_change(change: Callable[[], object], answer: Answer) -> Answer:
    """An answer that first changes the agent's key (`change`, run as a reviewer's request would, in a thread)."""

    async def changed_then_answered(request: ElicitationRequest, action: str) -> ElicitationRequest:
        await database_sync_to_async(change)()
        return await answer(request, action)

    return changed_then_answered


async def after_django_answered_once(
    answer: Answer, make_request: Callable[..., ElicitationRequest], key: str
) -> tuple[ElicitationRequest, ElicitationRequest]:
    """Django answers one long-poll (the middleware learns the route's headers from it); returns that request and
    a fresh one to wait on."""
    learn, request = [await database_sync_to_async(make_request)() for _ in range(2)]
    await long_poll_answered_by(answer, learn, key)
    return learn, request


async def test_a_push_settled_long_poll_gets_djangos_body_and_headers_without_djangos_pass(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    django_reads: list[str],
) -> None:
    settings.LONG_POLL_RECHECK_SECONDS = 30  # whatever returns early was woken by the push
    _, key = agent_with_key
    first, second = [await database_sync_to_async(make_request)() for _ in range(2)]

    # Before Django has answered the route, a settled wait still goes through it (and it learns the headers).
    through_django = await long_poll_answered_by(answer, first, key)
    settled = await long_poll_answered_by(answer, second, key)
    plain = await AsgiClient().get(
        f"/api/v1/requests/{second.pk}", headers={"Authorization": f"Bearer {key}"}
    )

    assert django_reads == [str(first.pk), str(second.pk)]  # the settled long-poll was not one of them
    assert (through_django.status_code, settled.status_code) == (200, 200)
    assert settled.json()["status"] == "completed" and settled.json()["result"] == {"action": "decline"}
    assert settled.content == plain.content
    assert settled.headers == plain.headers
    assert (
        "content-security-policy" in settled.headers
        and settled.headers["x-content-type-options"] == "nosniff"
    )


async def test_a_key_revoked_during_the_wait_is_refused_by_django(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    django_reads: list[str],
) -> None:
    agent, key = agent_with_key
    _, request = await after_django_answered_once(answer, make_request, key)

    response = await long_poll_answered_by(
        after_key_change(lambda: accounts.revoke_agent(agent), answer), request, key
    )

    assert response.status_code == 401
    assert "result" not in response.json()


async def test_a_revocation_whose_push_was_lost_is_still_refused_by_django(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    django_reads: list[str],
) -> None:
    """The key is re-checked on the row read with the request: no push is needed for a revoked key to be refused."""
    agent, key = agent_with_key
    _, request = await after_django_answered_once(answer, make_request, key)

    response = await long_poll_answered_by(
        after_key_change(lambda: revoke_without_push(agent), answer), request, key
    )

    assert response.status_code == 401
    assert django_reads[-1] == str(request.pk)


async def test_a_wait_that_runs_out_is_answered_in_front_of_django_with_the_open_state(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    django_reads: list[str],
) -> None:
    _, key = agent_with_key
    learn, request = await after_django_answered_once(answer, make_request, key)
    settings.MAX_LONG_POLL_SECONDS = 1

    response = await AsgiClient().get(
        f"/api/v1/requests/{request.pk}", {"wait": 30}, headers={"Authorization": f"Bearer {key}"}
    )

    assert (response.status_code, response.json()["status"]) == (200, "pending")
    assert django_reads == [str(learn.pk)]


async def test_an_agent_over_its_rate_gets_djangos_429_not_the_answer(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    settings: Any,
    django_reads: list[str],
) -> None:
    _, key = agent_with_key
    _, request = await after_django_answered_once(answer, make_request, key)
    settings.AGENT_RATE = parse_rate("1/min")  # the settled answer's own charge is the one too many

    response = await long_poll_answered_by(answer, request, key)

    assert response.status_code == 429
    assert response.json()["code"] == "throttled"


@pytest.mark.parametrize(
    ("headers", "query"),
    [({"Accept": "application/json; indent=4"}, {}), ({}, {"format": "json"}), ({"Accept": "text/html"}, {})],
)
async def test_what_only_django_reads_sends_a_settled_wait_through_django(
    agent_with_key: tuple[Agent, str],
    make_request: Callable[..., ElicitationRequest],
    answer: Answer,
    django_reads: list[str],
    headers: dict[str, str],
    query: dict[str, str],
) -> None:
    _, key = agent_with_key
    _, request = await after_django_answered_once(answer, make_request, key)

    response = await long_poll_answered_by(answer, request, key, headers, query)

    assert django_reads[-1] == str(request.pk)  # Django answered it, whatever it answered
    assert response.status_code in {200, 406}
