"""After every pooled PostgreSQL connection of a server is dropped at once, the very next requests succeed: each
connection the pool hands out is checked first (CONN_HEALTH_CHECKS), so dead ones are replaced on the spot
instead of failing requests one by one; and what cannot be served fails fast with 503 + Retry-After. The check
costs a round trip only for a connection the server spoke to while it sat idle (reviewhub/db_pool.py)."""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from django.db import connection

from elicitation.models import Queue
from reviewhub import db_pool
from tests.faults.processes import Daphne
from tests.faults.test_database_faults import terminate_server_connections, wait_until_server_sessions_gone

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


def test_requests_right_after_every_pooled_connection_is_dropped_succeed(
    queue: Queue, make_agent: object
) -> None:
    assert connection.vendor == "postgresql" and connection.settings_dict["NAME"].startswith("test_")
    _, key = make_agent("agent-a", queue)  # type: ignore[operator]
    headers = {"Authorization": f"Bearer {key}"}
    server = Daphne(DB_POOL_TIMEOUT_SECONDS="2").start()
    try:
        with httpx.Client(base_url=server.url, timeout=20, headers=headers) as client:
            for _ in range(10):  # the pool now holds open connections
                assert client.get("/api/v1/requests").status_code == 200
            killed = terminate_server_connections()
            wait_until_server_sessions_gone()
            timings: list[tuple[int, float, str | None]] = []
            for _ in range(10):
                started = time.monotonic()
                response = client.get("/api/v1/requests")
                timings.append(
                    (response.status_code, time.monotonic() - started, response.headers.get("Retry-After"))
                )
    finally:
        server.stop()

    assert killed > 0
    # A request that drew a connection killed under it fails fast and says when to retry ...
    for status, took, retry_after in timings:
        assert status == 200 or (status == 503 and retry_after is not None and took < 1), timings
    # ... and the pool has replaced what it lost by the next request: all later requests succeed.
    first_ok = next(index for index, (status, _, _) in enumerate(timings) if status == 200)
    assert first_ok <= 1 and all(status == 200 for status, _, _ in timings[first_ok:]), (
        timings,
        server.logs(),
    )
    assert sum(took for _, took, _ in timings[: first_ok + 1]) < 1
    print(
        f"\npool recovery: {killed} connections dropped; after it {[(s, round(t, 3)) for s, t, _ in timings]}"
    )


def test_the_first_dead_connection_found_makes_the_pool_replace_every_dead_one() -> None:
    assert isinstance(connection.pool, db_pool.SweepingConnectionPool)  # what the settings' backend builds
    name = "reviewhub-pool-sweep-test"
    params = {**connection.get_connection_params(), "autocommit": True, "application_name": name}
    pool = db_pool.SweepingConnectionPool(kwargs=params, min_size=3, max_size=3, open=False)
    pool.open(wait=True, timeout=30)
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = %s",
                [name],
            )
            assert cursor.fetchone()[0] == 3
        deadline = time.monotonic() + 60
        with connection.cursor() as cursor:
            while time.monotonic() < deadline:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
                if cursor.fetchone()[0] == 0:
                    break
                time.sleep(0.05)
        started = time.monotonic()
        with pool.connection(timeout=5) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        took = time.monotonic() - started
        lost = pool.get_stats().get("connections_lost")
    finally:
        pool.close()

    # psycopg alone retries the second dead one after 1 s and the third after 2 more (past a 2-s pool timeout).
    assert lost == 3 and took < 1, (lost, took)


@pytest.fixture
def idle_connection() -> Iterator[psycopg.Connection[Any]]:
    """A connection to this run's test database, autocommit and idle, as the pool keeps them."""
    params = connection.get_connection_params()
    with psycopg.connect(**{**params, "autocommit": True}) as conn:
        conn.execute("SELECT 1")
        yield conn


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The connections psycopg's own check (its empty query: one round trip) was run on."""
    checked: list[object] = []
    psycopg_check = db_pool.plain_check

    def counted(conn: Any) -> None:
        checked.append(conn)
        psycopg_check(conn)

    monkeypatch.setattr(db_pool, "plain_check", counted)
    return checked


def test_a_quiet_idle_connection_is_handed_out_without_a_round_trip(
    idle_connection: psycopg.Connection[Any], round_trips: list[object]
) -> None:
    for _ in range(3):
        db_pool.check_pooled_connection(idle_connection)

    assert round_trips == []
    assert idle_connection.execute("SELECT 1").fetchone() == (1,)


def test_a_connection_whose_backend_was_terminated_is_checked_and_refused(
    idle_connection: psycopg.Connection[Any], round_trips: list[object]
) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_terminate_backend(%s)", [idle_connection.info.backend_pid])
    # The backend ends asynchronously; its FATAL message and close then make the socket readable.
    deadline = time.monotonic() + 10
    while not db_pool.server_spoke(idle_connection) and time.monotonic() < deadline:
        time.sleep(0.01)

    with pytest.raises(psycopg.OperationalError):
        db_pool.check_pooled_connection(idle_connection)
    assert round_trips == [idle_connection]


def test_a_closed_connection_is_refused(
    idle_connection: psycopg.Connection[Any], round_trips: list[object]
) -> None:
    idle_connection.close()

    with pytest.raises(psycopg.OperationalError):
        db_pool.check_pooled_connection(idle_connection)
    assert round_trips == [idle_connection]
