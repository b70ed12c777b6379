"""Production secrets and sessions: no secret silently derived from SECRET_KEY in production, flow keys and the
API-key pepper rotate without losing anything, weak passwords refused, idle sessions end; and a newcomer's first
minutes (a wrong key says so, the demo shows every kind of request)."""

import base64
import io
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from elicitation.flows import crypto, hosted_flows
from elicitation.models import Agent, ElicitationRequest, FlowStatus, HostedFlow, Queue
from elicitation.queue import keys
from elicitation.reviewer.session_idle import LAST_SEEN
from tests.security.test_hardening import PRODUCTION_ENV, run_in_production

KEY_1 = base64.b64encode(b"1" * 32).decode()
KEY_2 = base64.b64encode(b"2" * 32).decode()


# --- production refuses derived secrets ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("os.environ.pop('API_KEY_PEPPER')", "API_KEY_PEPPER must be set in production"),
        ("os.environ['API_KEY_PEPPER'] = os.environ['SECRET_KEY']", "differ from SECRET_KEY"),
        ("os.environ.pop('FLOW_ENCRYPTION_KEYS')", "FLOW_ENCRYPTION_KEYS must be set in production"),
    ],
)
def test_production_refuses_to_start_with_secrets_derived_from_the_secret_key(
    change: str, message: str
) -> None:
    result = run_in_production(f"import os; {change}; import reviewhub.settings")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr
    assert PRODUCTION_ENV["SECRET_KEY"] not in result.stderr


def test_production_starts_with_every_secret_set() -> None:
    result = run_in_production("import reviewhub.settings as s; print(len(s.FLOW_ENCRYPTION_KEYS))")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "1"


# --- the API-key pepper rotates with a window --------------------------------------------------------------------


def agent_client(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


@pytest.mark.django_db
def test_a_pepper_rotation_window_keeps_keys_working_and_rehashes_them_on_use(
    settings: Any, make_agent: Callable[..., tuple[Agent, str]], queue: Queue
) -> None:
    settings.API_KEY_PEPPER = "old-pepper-0123456789"
    agent, key = make_agent("rotating", queue)
    idle, idle_key = make_agent("idle", queue)
    old_hash = Agent.objects.get(pk=idle.pk).key_hash

    settings.API_KEY_PEPPER = "new-pepper-9876543210"
    settings.API_KEY_PEPPER_PREVIOUS = ["old-pepper-0123456789"]
    during = agent_client(key).get("/api/v1/requests")

    assert during.status_code == 200
    assert Agent.objects.get(pk=agent.pk).key_hash == keys.hash_key(key)  # now under the new pepper
    assert Agent.objects.get(pk=idle.pk).key_hash == old_hash  # unused keys are left as they were

    settings.API_KEY_PEPPER_PREVIOUS = []
    assert agent_client(key).get("/api/v1/requests").status_code == 200
    after = agent_client(idle_key).get("/api/v1/requests")
    assert after.status_code == 401
    assert after.json()["code"] == "unauthenticated"


def test_the_pepper_command_prints_a_new_pepper_and_the_window_setting() -> None:
    out = io.StringIO()
    call_command("rotate_api_key_pepper", stdout=out)

    lines = out.getvalue().splitlines()
    assert "API_KEY_PEPPER_PREVIOUS=<the current API_KEY_PEPPER>" in lines
    new = [line for line in lines if line.startswith("API_KEY_PEPPER=")]
    assert len(new) == 1 and len(new[0]) > len("API_KEY_PEPPER=") + 40


# --- the flow encryption key rotates ---------------------------------------------------------------------------------


@pytest.fixture
def submitted_flow(settings: Any, make_agent: Callable[..., tuple[Agent, str]], queue: Queue) -> HostedFlow:
    settings.FLOW_ENCRYPTION_KEYS = {"k1": base64.b64decode(KEY_1)}
    agent, _ = make_agent("flows", queue, scopes=["requests", "flows:secrets"])
    flow, _ = hosted_flows.create_hosted_flow(
        agent=agent,
        queue_slug=queue.slug,
        message="Token?",
        requested_schema={"type": "object", "properties": {"token": {"type": "string", "sensitive": True}}},
    )
    key_id, nonce, ciphertext = crypto.encrypt_content(flow.pk, {"token": "s3cr3t"})
    HostedFlow.objects.filter(pk=flow.pk).update(
        status=FlowStatus.SUBMITTED, key_id=key_id, nonce=nonce, ciphertext=ciphertext
    )
    return HostedFlow.objects.get(pk=flow.pk)


@pytest.mark.django_db
def test_a_flow_key_rotation_keeps_old_secrets_readable_and_reencrypts_them(
    settings: Any, submitted_flow: HostedFlow
) -> None:
    out = io.StringIO()
    call_command("rotate_flow_key", stdout=out)
    entry = out.getvalue().splitlines()[-1]
    new_id, _, encoded = entry.partition(":")
    assert new_id == "k2" and len(base64.urlsafe_b64decode(encoded)) == 32

    settings.FLOW_ENCRYPTION_KEYS = {"k2": base64.urlsafe_b64decode(encoded), "k1": base64.b64decode(KEY_1)}
    flow = HostedFlow.objects.get(pk=submitted_flow.pk)
    assert crypto.decrypt_content(flow.pk, flow.key_id, flow.nonce, flow.ciphertext) == {"token": "s3cr3t"}
    assert crypto.encrypt_content(flow.pk, {"x": "y"})[0] == "k2"  # new writes use the new key

    moved = io.StringIO()
    call_command("rotate_flow_key", "--reencrypt", stdout=moved)
    assert "re-encrypted 1 stored secret(s) under key 'k2'" in moved.getvalue()

    settings.FLOW_ENCRYPTION_KEYS = {"k2": base64.urlsafe_b64decode(encoded)}  # the old key retired
    flow = HostedFlow.objects.get(pk=submitted_flow.pk)
    assert (flow.key_id, flow.status) == ("k2", "submitted")
    assert crypto.decrypt_content(flow.pk, flow.key_id, flow.nonce, flow.ciphertext) == {"token": "s3cr3t"}


# --- passwords and sessions ----------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("weak", ["password", "12345678901", "short", "bobbybobby"])
def test_create_reviewer_refuses_a_weak_password_and_creates_nothing(tmp_path: Path, weak: str) -> None:
    secret = tmp_path / "pw"
    secret.write_text(weak)

    with pytest.raises(CommandError, match="too weak"):
        call_command("create_reviewer", "bobbybobby", "--queues", "payments", "--password-file", str(secret))

    assert not User.objects.filter(username="bobbybobby").exists()
    assert not Queue.objects.filter(slug="payments").exists()


@pytest.mark.django_db
def test_the_admin_refuses_a_weak_password_for_a_new_user(admin_client: Client) -> None:
    response = admin_client.post(
        "/admin/auth/user/add/",
        {"username": "weakling", "password1": "password", "password2": "password", "usable_password": "true"},
    )

    assert response.status_code == 200  # the form again, with the error
    assert b"This password is too common" in response.content
    assert not User.objects.filter(username="weakling").exists()


@pytest.mark.django_db
def test_a_session_idle_longer_than_the_timeout_is_signed_out(reviewer: User, settings: Any) -> None:
    settings.SESSION_IDLE_TIMEOUT_SECONDS = 3600
    client = Client()
    client.force_login(reviewer)
    assert client.get("/").status_code == 200
    session = client.session
    session[LAST_SEEN] = int(time.time()) - 3599
    session.save()
    assert client.get("/").status_code == 200  # active within the window

    session = client.session
    session[LAST_SEEN] = int(time.time()) - 3601
    session.save()
    response = client.get("/")

    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]
    assert client.get("/").status_code == 302  # signed out for good


# --- a newcomer's first minutes --------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/v1/requests", "/api/v1/review/queues"])
@pytest.mark.parametrize("key", ["wrong", "rh_deadbeef_nope", "rhr_deadbeef_nope"])
def test_a_wrong_bearer_key_is_called_invalid_not_missing(path: str, key: str) -> None:
    response = agent_client(key).get(path)

    assert response.status_code == 401
    assert response.json()["code"] == "unauthenticated"
    assert "invalid" in response.json()["detail"].lower()
    assert "not provided" not in response.json()["detail"]


@pytest.mark.django_db
def test_no_key_at_all_is_still_called_missing() -> None:
    response = APIClient().get("/api/v1/requests")

    assert response.status_code == 401
    assert "not provided" in response.json()["detail"]


@pytest.mark.django_db
def test_seed_demo_fills_the_queue_with_every_kind_of_request_and_prints_an_admin_login(
    tmp_path: Path,
) -> None:
    credentials = str(tmp_path / "demo-credentials.json")
    first = io.StringIO()
    call_command("seed_demo", "--credentials-file", credentials, stdout=first)
    second = io.StringIO()
    call_command("seed_demo", "--credentials-file", credentials, stdout=second)

    requests = ElicitationRequest.objects.filter(queue__slug="default")
    assert requests.count() == 4  # still idempotent
    assert sorted(requests.values_list("mode", flat=True)) == ["form", "form", "url", "url"]
    assert HostedFlow.objects.count() == 1
    every_kind = requests.get(idempotency_key="demo-every-field")
    kinds = {question["kind"] for question in every_kind.questions}
    assert kinds == {"boolean", "single-select", "multi-select", "integer", "number", "text"}
    [admin_line] = [
        line for line in second.getvalue().splitlines() if line.startswith("Admin login: admin / ")
    ]
    password = admin_line.split(" / ")[1].split()[0]
    assert Client().login(username="admin", password=password)
    assert User.objects.get(username="admin").is_superuser
