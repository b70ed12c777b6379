"""After every pooled PostgreSQL connection of a server is dropped at once, the very next requests succeed: each
connection the pool hands out is checked first (CONN_HEALTH_CHECKS), so dead ones are replaced on the spot
instead of failing requests one by one; and what cannot be served fails fast with 503 + Retry-After."""

import time

import httpx
import pytest
from django.db import connection

from elicitation.models import Queue
from tests.faults.processes import Daphne
from tests.faults.test_database_faults import terminate_server_connections

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
