"""Limits: per-agent and per-reviewer request rates (429 + Retry-After), body, schema and message sizes."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.api import throttling
from elicitation.models import Agent, Queue
from elicitation.queue import accounts
from reviewhub.rates import Rate, parse_rate
from tests.conftest import FORM_SCHEMA, Clock


def agent_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def token_client(user: User) -> APIClient:
    token = accounts.create_reviewer_token(user, name="script")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def create_body(queue: Queue, **overrides: Any) -> dict[str, Any]:
    return {"message": "Approve?", "requestedSchema": FORM_SCHEMA, "queue": queue.slug, **overrides}


# --- rates ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "limit", "window"),
    [
        ("600/min", 600, 60),
        ("20/s", 20, 1),
        ("5/second", 5, 1),
        ("1000/5min", 1000, 300),
        ("3/hours", 3, 3600),
    ],
)
def test_rates_parse_from_the_usual_spellings(text: str, limit: int, window: int) -> None:
    assert parse_rate(text) == Rate(limit, window)


@pytest.mark.parametrize("text", ["", "off", "None"])
def test_an_empty_or_off_rate_means_no_limit(text: str) -> None:
    assert parse_rate(text) is None


@pytest.mark.parametrize("text", ["600", "0/min", "ten/min", "5/fortnight", "5/0min"])
def test_a_malformed_rate_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


@pytest.mark.django_db
def test_an_agent_over_its_rate_gets_429_with_retry_after(
    settings: Any, clock: Clock, queue: Queue, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("3/min")
    client = agent_client(agent_with_key[1])

    statuses = [client.get("/api/v1/requests").status_code for _ in range(3)]
    refused = client.get("/api/v1/requests")

    assert statuses == [200, 200, 200]
    assert refused.status_code == 429
    assert refused.json()["code"] == "throttled"
    assert 1 <= int(refused["Retry-After"]) <= 60


@pytest.mark.django_db
def test_every_agent_endpoint_counts_towards_the_same_rate(
    settings: Any, clock: Clock, queue: Queue, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("2/min")
    client = agent_client(agent_with_key[1])

    created = client.post("/api/v1/requests", create_body(queue), format="json")
    listed = client.get("/api/v1/events")
    refused = client.post("/api/v1/requests", create_body(queue), format="json")

    assert (created.status_code, listed.status_code, refused.status_code) == (201, 200, 429)


@pytest.mark.django_db
def test_one_agents_rate_does_not_limit_another(
    settings: Any,
    clock: Clock,
    queue: Queue,
    make_agent: Callable[..., tuple[Agent, str]],
    agent_with_key: tuple[Agent, str],
) -> None:
    settings.AGENT_RATE = parse_rate("1/min")
    _, other_key = make_agent("agent-b", queue)
    first = agent_client(agent_with_key[1])

    assert first.get("/api/v1/requests").status_code == 200
    assert first.get("/api/v1/requests").status_code == 429
    assert agent_client(other_key).get("/api/v1/requests").status_code == 200


@pytest.mark.django_db
def test_an_agent_may_call_again_once_the_window_has_passed(
    settings: Any, clock: Clock, queue: Queue, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("1/min")
    client = agent_client(agent_with_key[1])
    client.get("/api/v1/requests")
    refused = client.get("/api/v1/requests")

    clock.advance(seconds=int(refused["Retry-After"]))

    assert client.get("/api/v1/requests").status_code == 200


@pytest.mark.django_db
def test_a_bad_key_is_401_not_429_even_past_the_rate(settings: Any, clock: Clock, queue: Queue) -> None:
    settings.AGENT_RATE = parse_rate("1/min")
    client = agent_client("rh_00000000_" + "x" * 43)

    assert [client.get("/api/v1/requests").status_code for _ in range(3)] == [401, 401, 401]


@pytest.mark.django_db
def test_a_reviewer_over_its_rate_gets_429_whether_by_token_or_session(
    settings: Any, clock: Clock, reviewer: User, queue: Queue
) -> None:
    settings.REVIEWER_RATE = parse_rate("2/min")
    by_token = token_client(reviewer)
    by_session = APIClient()
    by_session.force_login(reviewer)

    assert by_token.get("/api/v1/review/queues").status_code == 200
    assert by_session.get("/api/v1/review/queues").status_code == 200
    refused = by_token.get("/api/v1/review/queues")

    assert refused.status_code == 429
    assert int(refused["Retry-After"]) >= 1
    assert by_session.post(f"/api/v1/review/queues/{queue.slug}/claim-next").status_code == 429


@pytest.mark.django_db
def test_one_reviewers_rate_does_not_limit_another(
    settings: Any, clock: Clock, make_reviewer: Callable[..., User], reviewer: User, queue: Queue
) -> None:
    settings.REVIEWER_RATE = parse_rate("1/min")
    bob = make_reviewer("bob", queue)
    alice_client = token_client(reviewer)

    assert alice_client.get("/api/v1/review/queues").status_code == 200
    assert alice_client.get("/api/v1/review/queues").status_code == 429
    assert token_client(bob).get("/api/v1/review/queues").status_code == 200


@pytest.mark.django_db
def test_the_rate_limit_lets_requests_through_when_the_cache_is_down(
    settings: Any, queue: Queue, agent_with_key: tuple[Agent, str]
) -> None:
    settings.AGENT_RATE = parse_rate("1/min")
    # A Redis cache nobody listens for: every counter call fails to connect, on either test leg.
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": "redis://127.0.0.1:1/0",
        }
    }
    client = agent_client(agent_with_key[1])

    assert [client.get("/api/v1/requests").status_code for _ in range(3)] == [200, 200, 200]


def test_a_malformed_rate_in_the_environment_stops_startup() -> None:
    from tests.test_settings import settings_in_subprocess

    result = settings_in_subprocess({"AGENT_RATE": "lots"}, "1")

    assert result.returncode != 0
    assert "AGENT_RATE='lots' is not a rate" in result.stderr


def test_settings_hold_each_rate_parsed_once() -> None:
    from tests.test_settings import settings_in_subprocess

    result = settings_in_subprocess(
        {"AGENT_RATE": "1000/5min", "REVIEWER_RATE": "off"}, "s.AGENT_RATE, s.REVIEWER_RATE"
    )

    assert result.stdout.strip() == "(Rate(limit=1000, window_seconds=300), None)", result.stderr


# --- sizes ------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_body_over_the_limit_is_413_before_it_is_parsed(
    settings: Any, queue: Queue, agent_client: APIClient
) -> None:
    settings.MAX_BODY_BYTES = 2048
    body = create_body(queue, message="x" * 3000)

    response = agent_client.post("/api/v1/requests", body, format="json")

    assert response.status_code == 413
    assert response.json()["code"] == "too_large"
    assert "limit is 2048" in response.json()["detail"]


@pytest.mark.django_db
def test_a_message_over_the_limit_is_refused_naming_the_field(queue: Queue, agent_client: APIClient) -> None:
    from django.conf import settings

    response = agent_client.post(
        "/api/v1/requests", create_body(queue, message="x" * (settings.MAX_MESSAGE_LENGTH + 1)), format="json"
    )

    assert response.status_code == 400
    assert str(settings.MAX_MESSAGE_LENGTH) in response.json()["fields"]["message"]


@pytest.mark.django_db
def test_a_schema_with_too_many_properties_is_refused_naming_the_limit(
    settings: Any, queue: Queue, agent_client: APIClient
) -> None:
    settings.MAX_SCHEMA_PROPERTIES = 3
    schema = {"type": "object", "properties": {f"q{i}": {"type": "boolean"} for i in range(4)}}

    response = agent_client.post(
        "/api/v1/requests", create_body(queue, requestedSchema=schema), format="json"
    )

    assert response.status_code == 400
    fields = response.json()["fields"]
    assert any(path.startswith("requestedSchema") and "3" in reason for path, reason in fields.items()), (
        fields
    )


@pytest.mark.django_db
def test_a_question_with_too_many_options_is_refused_naming_the_question(
    settings: Any, queue: Queue, agent_client: APIClient
) -> None:
    settings.MAX_SCHEMA_OPTIONS = 5
    schema = {
        "type": "object",
        "properties": {"pick": {"type": "string", "enum": [str(i) for i in range(6)]}},
    }

    response = agent_client.post(
        "/api/v1/requests", create_body(queue, requestedSchema=schema), format="json"
    )

    assert response.status_code == 400
    fields = response.json()["fields"]
    assert any("pick" in path and "5" in reason for path, reason in fields.items()), fields


@pytest.mark.django_db
def test_an_over_long_schema_string_is_refused_naming_its_path(queue: Queue, agent_client: APIClient) -> None:
    schema = {"type": "object", "properties": {"note": {"type": "string", "title": "t" * 10_001}}}

    response = agent_client.post(
        "/api/v1/requests", create_body(queue, requestedSchema=schema), format="json"
    )

    assert response.status_code == 400
    fields = response.json()["fields"]
    assert any("note" in path and "title" in path for path in fields), fields


@pytest.mark.services
def test_the_redis_counter_counts_in_one_command_with_the_windows_expiry() -> None:
    """The counter (one atomic script) leaves what Django's cache would: an integer cache.get() reads back, which
    expires with its window; a second hit counts on without touching the expiry."""
    from django.conf import settings
    from django.core.cache import cache

    from reviewhub.redis_pool import shared_client

    key = f"{throttling.KEY_NAMESPACE}:rate:agent:7:0"
    assert throttling._increment(key, 65) == 1
    full_key = cache.make_and_validate_key(key)  # type: ignore[attr-defined]
    client = shared_client(settings.CACHES["default"]["LOCATION"].split(",")[0])
    assert 60 <= client.ttl(full_key) <= 65
    client.expire(full_key, 30)
    assert [throttling._increment(key, 65) for _ in range(2)] == [2, 3]
    assert cache.get(key) == 3
    assert 0 < client.ttl(full_key) <= 30
