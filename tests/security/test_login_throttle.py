"""Password guessing: five failed sign-ins for one username from one address lock that pair for the window."""

from typing import Any

import pytest
from django.contrib.auth import authenticate
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from tests.conftest import Clock

pytestmark = pytest.mark.django_db
LIMIT = 5


@pytest.fixture(autouse=True)
def _limits(settings: Any) -> None:
    settings.LOGIN_FAILURE_LIMIT = LIMIT
    settings.LOGIN_FAILURE_WINDOW_SECONDS = 900


@pytest.fixture
def alice(db: None) -> User:
    return User.objects.create_user("alice", password="right-password-1")


def sign_in(client: Client, password: str, username: str = "alice", address: str = "10.0.0.1") -> Any:
    return client.post(reverse("login"), {"username": username, "password": password}, REMOTE_ADDR=address)


def fail(client: Client, times: int = LIMIT, **kwargs: Any) -> None:
    for _ in range(times):
        response = sign_in(client, "wrong", **kwargs)
        assert response.status_code == 200  # the form's generic error, not yet locked


def signed_in(client: Client) -> bool:
    return "_auth_user_id" in client.session


def test_four_failures_still_let_the_right_password_in(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client, LIMIT - 1)

    response = sign_in(client, "right-password-1")

    assert response.status_code == 302
    assert signed_in(client)


def test_the_sixth_attempt_is_429_with_retry_after_even_with_the_right_password(
    alice: User, clock: Clock
) -> None:
    client = Client()
    fail(client)

    response = sign_in(client, "right-password-1")

    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 901
    assert "Too many failed sign-in attempts" in response.content.decode()
    assert not signed_in(client)


def test_the_lock_is_per_address(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client, address="10.0.0.1")

    response = sign_in(client, "right-password-1", address="10.0.0.2")

    assert response.status_code == 302


def test_the_lock_is_per_username(alice: User, clock: Clock) -> None:
    User.objects.create_user("bob", password="bobs-password-1")
    client = Client()
    fail(client, username="alice")

    assert sign_in(client, "bobs-password-1", username="bob").status_code == 302


def test_the_lock_ignores_username_case(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client, username="ALICE")

    assert sign_in(client, "right-password-1", username="alice").status_code == 429


def test_the_lock_ends_when_the_window_passes(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client)
    locked = sign_in(client, "right-password-1")

    clock.advance(seconds=int(locked["Retry-After"]))

    assert sign_in(client, "right-password-1").status_code == 302


def test_failures_after_the_window_start_a_new_count(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client, LIMIT - 1)
    clock.advance(seconds=901)

    fail(client, LIMIT - 1)

    assert sign_in(client, "right-password-1").status_code == 302


def test_locked_attempts_do_not_extend_the_window(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client)
    first = int(sign_in(client, "wrong")["Retry-After"])
    clock.advance(seconds=120)

    second = int(sign_in(client, "wrong")["Retry-After"])

    assert second <= first - 119


def test_a_successful_sign_in_clears_the_failures(alice: User, clock: Clock) -> None:
    client = Client()
    fail(client, LIMIT - 1)
    assert sign_in(client, "right-password-1").status_code == 302
    client.logout()

    fail(client, LIMIT - 1)

    assert sign_in(client, "right-password-1").status_code == 302


def test_the_lock_also_holds_for_authenticate_itself_and_so_for_the_admin(alice: User, clock: Clock) -> None:
    alice.is_staff = True
    alice.save()
    client = Client()
    fail(client)

    admin = client.post(
        reverse("admin:login"), {"username": "alice", "password": "right-password-1"}, REMOTE_ADDR="10.0.0.1"
    )

    assert admin.status_code == 429
    assert not signed_in(client)


def test_authenticate_refuses_a_locked_pair_without_checking_the_password(alice: User, clock: Clock) -> None:
    from django.test import RequestFactory

    fail(Client())
    request = RequestFactory().post("/", REMOTE_ADDR="10.0.0.1")

    assert authenticate(request, username="alice", password="right-password-1") is None
    other = RequestFactory().post("/", REMOTE_ADDR="10.9.9.9")
    assert authenticate(other, username="alice", password="right-password-1") == alice


def test_the_lock_fails_open_when_the_cache_is_down(
    alice: User, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = Client()
    fail(client)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("redis is restarting")

    monkeypatch.setattr("elicitation.reviewer.login_throttle.cache.get", broken)

    assert sign_in(client, "right-password-1").status_code == 302


def test_no_username_or_password_is_logged_when_a_pair_is_locked(
    alice: User, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    fail(Client(), username="alice")

    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "login locked after 5 failures" in text
    assert "alice" not in text
    assert "wrong" not in text
