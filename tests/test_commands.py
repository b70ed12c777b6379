"""Management commands: seed_demo is idempotent and keeps its credentials, create_agent prints a working key last,
create_reviewer; both refuse queues that do not exist or cannot exist."""

import json
from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from elicitation.models import Agent, Queue
from elicitation.queue import accounts

pytestmark = pytest.mark.django_db


def run(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip().splitlines()


def works(key: str, path: str = "/api/v1/events") -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get(path).status_code == 200


def seed_demo(credentials: Path, *args: str) -> dict[str, str]:
    """seed_demo's printed credentials, by name."""
    lines = run("seed_demo", "--credentials-file", str(credentials), *args)
    admin = next(line for line in lines if line.startswith("Admin login: admin / "))
    return {
        "agent_key": lines[-1].removeprefix("AGENT_KEY="),
        "reviewer_token": lines[-2].removeprefix("REVIEWER_TOKEN="),
        "admin_password": admin.removeprefix("Admin login: admin / ").split()[0],
    }


def test_seed_demo_twice_leaves_one_of_each_and_prints_the_same_working_credentials(tmp_path: Path) -> None:
    credentials = tmp_path / "demo.json"
    first = seed_demo(credentials)
    second = seed_demo(credentials)

    assert (Queue.objects.count(), User.objects.count(), Agent.objects.count()) == (
        1,
        2,
        1,
    )  # reviewer, admin
    assert second == first
    assert first["agent_key"].startswith("rh_") and works(first["agent_key"])
    assert works(first["reviewer_token"], "/api/v1/review/queues")
    assert APIClient().login(username="admin", password=first["admin_password"])
    assert APIClient().login(username="reviewer", password="reviewer")


def test_seed_demo_keeps_its_credentials_in_a_file_only_its_owner_reads(tmp_path: Path) -> None:
    credentials = tmp_path / "data" / "demo.json"
    printed = seed_demo(credentials)

    assert credentials.stat().st_mode & 0o777 == 0o600
    assert json.loads(credentials.read_text()) == printed
    assert list(credentials.parent.iterdir()) == [credentials]  # no temporary file left behind


def test_seed_demo_rotate_issues_new_credentials_and_the_old_ones_stop_working(tmp_path: Path) -> None:
    credentials = tmp_path / "demo.json"
    old = seed_demo(credentials)
    new = seed_demo(credentials, "--rotate")

    assert all(new[name] != old[name] for name in old)
    assert works(new["agent_key"]) and not works(old["agent_key"])
    assert works(new["reviewer_token"], "/api/v1/review/queues")
    assert not works(old["reviewer_token"], "/api/v1/review/queues")
    assert APIClient().login(username="admin", password=new["admin_password"])
    assert not APIClient().login(username="admin", password=old["admin_password"])
    assert seed_demo(credentials) == new  # and the next plain run keeps the rotated ones


def test_seed_demo_replaces_kept_credentials_that_no_longer_sign_in(tmp_path: Path) -> None:
    """A key rotated or revoked elsewhere (the admin, another database) is not printed as if it worked."""
    credentials = tmp_path / "demo.json"
    kept = seed_demo(credentials)
    accounts.rotate_agent_key(Agent.objects.get(name="demo-agent"))
    User.objects.filter(username="admin").update(password="!")  # an unusable password, as the admin sets one

    again = seed_demo(credentials)

    assert again["agent_key"] != kept["agent_key"] and works(again["agent_key"])
    assert again["admin_password"] != kept["admin_password"]
    assert APIClient().login(username="admin", password=again["admin_password"])
    assert again["reviewer_token"] == kept["reviewer_token"]  # still valid, so kept


def test_seed_demo_ignores_an_unreadable_credentials_file(tmp_path: Path) -> None:
    credentials = tmp_path / "demo.json"
    credentials.write_text("not json")

    printed = seed_demo(credentials)

    assert works(printed["agent_key"])
    assert json.loads(credentials.read_text()) == printed


def test_create_agent_prints_the_key_last_and_creates_missing_queues_when_asked() -> None:
    lines = run("create_agent", "billing-bot", "--queues", "payments,refunds", "--create-queues")
    assert works(lines[-1])
    agent = Agent.objects.get(name="billing-bot")
    assert sorted(agent.queues.values_list("slug", flat=True)) == ["payments", "refunds"]
    assert lines[-1] not in agent.key_hash and agent.key_prefix in lines[-1]


def test_create_agent_joins_existing_queues_without_creating_any() -> None:
    accounts.ensure_queues(["default", "payments"])
    lines = run("create_agent", "billing-bot", "--queues", "payments")
    assert works(lines[-1])
    assert list(Agent.objects.get(name="billing-bot").queues.values_list("slug", flat=True)) == ["payments"]
    assert Queue.objects.count() == 2


def test_create_agent_refuses_a_misspelt_queue_naming_it_and_the_existing_ones() -> None:
    accounts.ensure_queues(["default", "payments"])
    with pytest.raises(CommandError) as refused:
        run("create_agent", "billing-bot", "--queues", "payments,defualt")
    message = str(refused.value)
    assert "defualt" in message and "Existing queues: default, payments" in message
    assert "--create-queues" in message
    assert not Agent.objects.exists()
    assert sorted(Queue.objects.values_list("slug", flat=True)) == ["default", "payments"]


@pytest.mark.parametrize("create", [[], ["--create-queues"]])
def test_create_agent_refuses_an_invalid_slug_even_with_create_queues(create: list[str]) -> None:
    with pytest.raises(CommandError, match="Invalid queue slug: 'no such!'"):
        run("create_agent", "billing-bot", "--queues", "payments,no such!", *create)
    assert not Agent.objects.exists() and not Queue.objects.exists()


def test_create_agent_refuses_a_slug_longer_than_the_model_allows() -> None:
    with pytest.raises(CommandError, match="at most 64 characters"):
        run("create_agent", "billing-bot", "--queues", "q" * 65, "--create-queues")
    assert not Queue.objects.exists()


def test_create_agent_refuses_an_empty_queue_list() -> None:
    with pytest.raises(CommandError, match="names no queue"):
        run("create_agent", "billing-bot", "--queues", " , ")
    assert not Agent.objects.exists()


def test_create_agent_refuses_unknown_scopes_and_duplicates() -> None:
    with pytest.raises(CommandError, match="Unknown scope"):
        run("create_agent", "x", "--queues", "q", "--create-queues", "--scopes", "root")
    run("create_agent", "x", "--queues", "q", "--create-queues")
    with pytest.raises(CommandError, match="exists"):
        run("create_agent", "x", "--queues", "q")


def test_create_reviewer_refuses_an_unknown_queue_and_creates_no_user() -> None:
    accounts.ensure_queues(["support"])
    with pytest.raises(CommandError, match=r"No such queue: suport\. Existing queues: support\."):
        run("create_reviewer", "bob", "--queues", "suport")
    assert not User.objects.filter(username="bob").exists()
    assert list(Queue.objects.values_list("slug", flat=True)) == ["support"]


@pytest.mark.parametrize("create", [[], ["--create-queues"]])
def test_create_reviewer_refuses_an_invalid_slug_and_creates_no_user(create: list[str]) -> None:
    with pytest.raises(CommandError, match="Invalid queue slug: 'no such!'"):
        run("create_reviewer", "bob", "--queues", "no such!", *create)
    assert not User.objects.filter(username="bob").exists() and not Queue.objects.exists()


def test_create_reviewer_reads_the_password_file_and_joins_queues(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret-pass\n")
    run("create_reviewer", "bob", "--queues", "payments", "--create-queues", "--password-file", str(secret))
    assert APIClient().login(username="bob", password="s3cret-pass")
    assert list(Queue.objects.get(slug="payments").members.values_list("username", flat=True)) == ["bob"]


def test_create_reviewer_with_token_prints_a_working_token() -> None:
    accounts.ensure_queues(["payments"])
    lines = run("create_reviewer", "carol", "--queues", "payments", "--token")
    assert works(lines[-1], "/api/v1/review/queues")


def test_create_reviewer_with_a_missing_password_file_fails_clearly() -> None:
    with pytest.raises(CommandError, match="Cannot read the password file"):
        run("create_reviewer", "bob", "--queues", "q", "--password-file", "/nonexistent/pw")
