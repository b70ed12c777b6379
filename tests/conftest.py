"""Shared fixtures: queues, reviewers, agents with keys, API clients, and a movable clock."""

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import DatabaseError, connections
from django.db.backends.signals import connection_created
from django.utils import timezone
from rest_framework.test import APIClient

from elicitation.models import Agent, ElicitationRequest, Queue
from elicitation.queue import accounts, transitions

FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve the transfer?"},
        "note": {"type": "string", "title": "Note", "maxLength": 200},
    },
    "required": ["approve"],
}


class Clock:
    """Replaces elicitation.queue.clock.now so tests move time instead of sleeping."""

    def __init__(self) -> None:
        self.current = timezone.now()

    def now(self) -> datetime:
        return self.current

    def advance(self, **delta: float) -> datetime:
        self.current += timedelta(**delta)
        return self.current


def _flush_outwaits_live_servers(sender: Any, connection: Any, **kwargs: Any) -> None:
    """A transactional test's teardown TRUNCATEs every table while the live servers it started may be sweeping; a
    sweep's transaction that holds one table and waits for another deadlocks with it, and PostgreSQL aborts
    whichever waits past its deadlock_timeout first. Here (the test process only: servers do not load this file)
    that is 10 s, so the sweep (1 s, retried at its next run) is the one aborted, never the flush, whose failure
    would leave the rows for the next test. Needs a superuser, as the test database's is; otherwise unchanged."""
    if connection.vendor != "postgresql":
        return
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET deadlock_timeout = '10s'")
    except DatabaseError:
        pass


connection_created.connect(_flush_outwaits_live_servers)


@pytest.fixture(autouse=True)
def no_sweeper_in_process(settings: Any) -> None:
    """The embedded sweeper would start with the first ASGI event of a test; tests start a Sweeper themselves."""
    settings.PERIODIC_SWEEPS_IN_PROCESS = False


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr("elicitation.queue.clock.now", fake.now)
    return fake


@pytest.fixture
def queue(db: None) -> Queue:
    return Queue.objects.create(
        slug="payments", name="Payments", lease_seconds=60, default_deadline_seconds=600
    )


@pytest.fixture
def other_queue(db: None) -> Queue:
    return Queue.objects.create(slug="other", name="Other")


@pytest.fixture
def make_reviewer(db: None) -> Callable[..., User]:
    def make(username: str, *queues: Queue, supervisor: bool = False) -> User:
        user = User.objects.create_user(username, password="pw-" + username)
        for q in queues:
            q.members.add(user)
            if supervisor:
                q.supervisors.add(user)
        return user

    return make


@pytest.fixture
def reviewer(make_reviewer: Callable[..., User], queue: Queue) -> User:
    return make_reviewer("alice", queue)


@pytest.fixture
def make_agent(db: None) -> Callable[..., tuple[Agent, str]]:
    def make(name: str, *queues: Queue, scopes: list[str] | None = None) -> tuple[Agent, str]:
        return accounts.create_agent(name, queue_slugs=[q.slug for q in queues], scopes=scopes)

    return make


@pytest.fixture
def agent_with_key(make_agent: Callable[..., tuple[Agent, str]], queue: Queue) -> tuple[Agent, str]:
    return make_agent("agent-a", queue)


@pytest.fixture
def agent(agent_with_key: tuple[Agent, str]) -> Agent:
    return agent_with_key[0]


@pytest.fixture
def agent_client(agent_with_key: tuple[Agent, str]) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {agent_with_key[1]}")
    return client


@pytest.fixture
def reviewer_client(reviewer: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(user=reviewer)
    return client


@pytest.fixture
def make_request(agent: Agent, queue: Queue) -> Callable[..., ElicitationRequest]:
    def make(**overrides: Any) -> ElicitationRequest:
        fields: dict[str, Any] = {
            "agent": overrides.pop("agent", agent),
            "queue_slug": overrides.pop("queue_slug", queue.slug),
            "message": "Approve transfer of 100 EUR?",
            "mode": "form",
            "requested_schema": FORM_SCHEMA,
        }
        fields.update(overrides)
        request, _ = transitions.create_request(**fields)
        return request

    return make


@pytest.fixture(autouse=True)
def _in_memory_layer_per_test(settings: Any) -> Iterator[None]:
    """Each test gets a fresh channel layer so pushes from one test never reach another."""
    from channels.layers import channel_layers

    channel_layers.backends.clear()
    yield
    channel_layers.backends.clear()


@pytest.fixture(autouse=True)
def _fresh_rate_limits_per_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Rate and login-failure counters live in the cache (Redis in the services leg, shared across runs): each
    test counts under its own namespace so no test inherits another's 429s."""
    import uuid

    monkeypatch.setattr("elicitation.api.throttling.KEY_NAMESPACE", f"rh-test-{uuid.uuid4().hex}")
    # Nor a breaker another test's dead cache opened.
    from elicitation.api import throttling

    monkeypatch.setattr(throttling, "cache_breaker", throttling.CacheBreaker(throttling.BREAKER_OPEN_SECONDS))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Services tests need PostgreSQL and Redis; the embedded leg says plainly that it did not run them."""
    import os

    # Browser tests last: Playwright's sync API holds an event loop in the main thread while a browser is open.
    items.sort(key=lambda item: "browser" in item.keywords)
    if os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL"):
        return
    skip = pytest.mark.skip(reason="services leg only: set DATABASE_URL and REDIS_URL (make test-services)")
    for item in items:
        if "services" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _threads_give_back_their_database_connections() -> Iterator[None]:
    """A thread that used the ORM and ends without closing its connection takes its pool slot with it: the pool
    never hears of the connection again. A server's threads live as long as it does, but the tests end threads all
    the time (each event loop's executor, waiter and client threads), and over a whole services run the test
    process's pool ran dry. Every thread the tests start closes its connections as it ends."""
    import threading

    original = threading.Thread.run

    def run_then_close(self: threading.Thread) -> None:
        try:
            original(self)
        finally:
            connections.close_all()

    threading.Thread.run = run_then_close  # type: ignore[method-assign]
    yield
    threading.Thread.run = original  # type: ignore[method-assign]


@pytest.fixture(scope="session", autouse=True)
def _close_database_pools(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Close this process's PostgreSQL connections before the test database is dropped: any left open make DROP
    DATABASE fail ("being accessed by other users"). The pools close here; a connection a long-lived thread of this
    process still holds (the waiter hub's, the sync-to-async executor's) is ended by PostgreSQL, since no other
    process uses this run's test database by now (the servers the tests started are stopped)."""
    yield
    with django_db_blocker.unblock():
        for connection in connections.all():
            close_pool = getattr(connection, "close_pool", None)
            if close_pool is not None:
                close_pool()
        if connections["default"].vendor == "postgresql":
            with connections["default"]._nodb_cursor() as cursor:
                cursor.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = %s AND pid <> pg_backend_pid()",
                    [connections["default"].settings_dict["NAME"]],
                )
