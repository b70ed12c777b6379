"""The database goes away: pages and API answer 503 with Retry-After (never a 500, never internals), a server
whose connections are killed mid-traffic recovers by itself, and nothing answered is lost or doubled."""

import threading
import time
from collections import Counter
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.db import OperationalError, connection
from django.test import Client

from elicitation.models import AgentEvent, ElicitationRequest, Queue, Status
from elicitation.queue import accounts, transitions
from tests.conftest import FORM_SCHEMA
from tests.faults.processes import APPLICATION_NAME, Daphne

INTERNALS = ("Traceback", "postgres", "psycopg", "OperationalError", "127.0.0.1:1", "settings.py", "SELECT")


def assert_unavailable(response: Any) -> None:
    assert response.status_code == 503, (response.status_code, response.text[:300])
    assert int(response.headers["Retry-After"]) >= 1
    assert not [word for word in INTERNALS if word in response.text], response.text[:300]


# --- embedded: the mapping itself ---------------------------------------------------------------------------------


def database_down(*args: Any, **kwargs: Any) -> Any:
    raise OperationalError('connection to server at "127.0.0.1:1" failed: psycopg says no (SELECT 1)')


@pytest.mark.django_db
def test_a_page_answers_503_with_retry_after_when_the_database_fails(
    monkeypatch: pytest.MonkeyPatch, settings: Any, reviewer: User
) -> None:
    settings.DEBUG = False
    browser = Client(raise_request_exception=False)
    browser.force_login(reviewer)
    monkeypatch.setattr("elicitation.queue.selectors.queue_summaries", database_down)

    response = browser.get("/")

    assert_unavailable(response)
    assert "briefly unavailable" in response.content.decode()


@pytest.mark.django_db
def test_the_api_answers_503_json_with_retry_after_when_the_database_fails(
    monkeypatch: pytest.MonkeyPatch, settings: Any, agent_client: Any
) -> None:
    settings.DEBUG = False
    agent_client.raise_request_exception = False
    monkeypatch.setattr("elicitation.queue.selectors.agent_requests", database_down)

    response = agent_client.get("/api/v1/requests")

    assert_unavailable(response)
    assert response.json()["code"] == "unavailable"


@pytest.mark.django_db
def test_other_crashes_stay_a_bare_500(
    monkeypatch: pytest.MonkeyPatch, settings: Any, reviewer: User
) -> None:
    settings.DEBUG = False
    browser = Client(raise_request_exception=False)
    browser.force_login(reviewer)

    def bug(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("internal detail")

    monkeypatch.setattr("elicitation.queue.selectors.queue_summaries", bug)

    response = browser.get("/")

    assert response.status_code == 500
    assert "internal detail" not in response.content.decode()


# --- services: real PostgreSQL, real uvicorn -------------------------------------------------------------------


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_server_that_cannot_reach_the_database_answers_503_everywhere(agent_with_key: Any) -> None:
    # A short pool wait: by default a request waits DB_POOL_TIMEOUT_SECONDS (10) for a connection before the 503.
    server = Daphne(
        DATABASE_URL="postgres://postgres@127.0.0.1:1/rh_sec", DB_POOL_TIMEOUT_SECONDS="1"
    ).start()
    try:
        key = agent_with_key[1]
        with httpx.Client(base_url=server.url, timeout=20) as client:
            api = client.get("/api/v1/requests", headers={"Authorization": f"Bearer {key}"})
            health = client.get("/healthz")
        with httpx.Client(base_url=server.url, timeout=20, cookies={"sessionid": "x" * 32}) as client:
            page = client.get("/")
    finally:
        server.stop()

    assert_unavailable(api)
    assert api.json()["code"] == "unavailable"
    assert_unavailable(page)
    assert health.status_code == 503


RECOVERY_SECONDS = 20  # bounded: a server still failing after this has not recovered


def terminate_server_connections() -> int:
    """Kill the fault server's sessions on this run's own test database (found by their application name)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND application_name = %s",
            [APPLICATION_NAME],
        )
        return int(cursor.fetchone()[0])


def wait_until_server_sessions_gone(bound_seconds: float = 60) -> None:
    """pg_terminate_backend only signals: a loaded machine may take a moment before the backends exit and their
    sockets close. Wait for that, so a test measures the pool after the drop, not a race with it."""
    deadline = time.monotonic() + bound_seconds
    while time.monotonic() < deadline:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                [APPLICATION_NAME],
            )
            if cursor.fetchone()[0] == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"the terminated sessions were still there after {bound_seconds} s")


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "server_env",
    [
        pytest.param({}, id="connection-pool"),  # the default: psycopg's pool (DB_POOL_MAX_SIZE)
        pytest.param({"DB_CONN_MAX_AGE": "60"}, id="persistent-connections"),
    ],
)
def test_connections_killed_mid_traffic_give_503s_then_recover_and_lose_no_answer(
    queue: Queue, make_agent: Any, make_reviewer: Any, server_env: dict[str, str]
) -> None:
    # Only ever terminate connections on this run's throwaway test database (test_rh_sec here, test_test in CI).
    assert connection.vendor == "postgresql" and connection.settings_dict["NAME"].startswith("test_")
    agent, key = make_agent("agent-a", queue)
    reviewer = make_reviewer("alice", queue)
    token = accounts.create_reviewer_token(reviewer, name="fault")
    browser = Client()
    browser.force_login(reviewer)
    session_id = browser.cookies["sessionid"].value
    agent_headers = {"Authorization": f"Bearer {key}"}
    reviewer_headers = {"Authorization": f"Bearer {token}"}
    # Either way the server holds connections across requests, which the kills then break.
    server = Daphne(DB_POOL_TIMEOUT_SECONDS="2", **server_env).start()
    statuses: Counter[int] = Counter()
    bad: list[str] = []
    answered: list[str] = []
    stop = threading.Event()

    def record(response: httpx.Response) -> httpx.Response:
        statuses[response.status_code] += 1
        if response.status_code >= 500 and (
            response.status_code != 503 or "Retry-After" not in response.headers
        ):
            bad.append(f"{response.request.method} {response.request.url.path} {response.status_code}")
        return response

    def traffic() -> None:
        with httpx.Client(base_url=server.url, timeout=20, cookies={"sessionid": session_id}) as client:
            while not stop.is_set():
                created = record(
                    client.post(
                        "/api/v1/requests",
                        json={"message": "Approve?", "requestedSchema": FORM_SCHEMA, "queue": queue.slug},
                        headers=agent_headers,
                    )
                )
                record(client.get("/"))
                record(client.get("/api/v1/events", params={"after": 0}, headers=agent_headers))
                claimed = record(
                    client.post(f"/api/v1/review/queues/{queue.slug}/claim-next", headers=reviewer_headers)
                )
                if claimed.status_code == 200:
                    request_id = claimed.json()["id"]
                    responded = record(
                        client.post(
                            f"/api/v1/review/requests/{request_id}/respond",
                            json={"action": "accept", "content": {"approve": True}},
                            headers=reviewer_headers,
                        )
                    )
                    if responded.status_code == 200:
                        answered.append(request_id)
                del created

    worker = threading.Thread(target=traffic)
    worker.start()
    kills = 0
    try:
        deadline = time.monotonic() + 6
        while time.monotonic() < deadline:
            kills += terminate_server_connections()
            time.sleep(0.15)
        stop.set()
        worker.join(timeout=60)
        # Recovery: with the kills over, the pool replaces what it lost (each connection it hands out is
        # checked first) within seconds, then every call succeeds again on the same server.
        with httpx.Client(base_url=server.url, timeout=20, cookies={"sessionid": session_id}) as client:
            recovered_by = time.monotonic() + RECOVERY_SECONDS
            while client.get("/healthz").status_code != 200 and time.monotonic() < recovered_by:
                time.sleep(0.2)
            after = [client.get("/api/v1/requests", headers=agent_headers).status_code for _ in range(5)]
            after.append(client.get("/").status_code)
    finally:
        stop.set()
        server.stop()

    assert not worker.is_alive()
    assert kills > 0
    assert bad == [], (bad, statuses, server.logs())
    assert statuses[500] == 0
    assert statuses[503] > 0, statuses  # the fault was felt (on a loaded machine, maybe by every call)
    assert after == [200] * 6, server.logs()
    # Every answer the reviewer was told was recorded is in the agent's feed, exactly once.
    completed = set(
        str(pk)
        for pk in ElicitationRequest.objects.filter(status=Status.COMPLETED).values_list("pk", flat=True)
    )
    assert set(answered) <= completed
    per_request = Counter(
        event.payload["id"] for event in AgentEvent.objects.filter(agent=agent, kind="completed")
    )
    assert {request_id: per_request[request_id] for request_id in completed} == {r: 1 for r in completed}
    # No claim outlives its lease: once the sweep has run past the lease, nothing is left claimed.
    from django.utils import timezone

    transitions.release_expired_claims(
        now=timezone.now() + __import__("datetime").timedelta(seconds=queue.lease_seconds + 1)
    )
    assert not ElicitationRequest.objects.filter(status=Status.CLAIMED).exists()
