"""Management commands: seed_demo is idempotent, create_agent prints a working key last, create_reviewer."""

from io import StringIO
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from rest_framework.test import APIClient

from elicitation.models import Agent, Queue

pytestmark = pytest.mark.django_db


def run(*args: str) -> list[str]:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip().splitlines()


def works(key: str, path: str = "/api/v1/events") -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.get(path).status_code == 200


def test_seed_demo_twice_leaves_one_of_each_and_the_latest_keys_work() -> None:
    first = run("seed_demo")
    second = run("seed_demo")
    assert (Queue.objects.count(), User.objects.count(), Agent.objects.count()) == (
        1,
        2,
        1,
    )  # reviewer, admin
    old_key = first[-1].removeprefix("AGENT_KEY=")
    new_key = second[-1].removeprefix("AGENT_KEY=")
    new_token = second[-2].removeprefix("REVIEWER_TOKEN=")
    assert second[-1].startswith("AGENT_KEY=rh_") and works(new_key)
    assert not works(old_key)
    assert works(new_token, "/api/v1/review/queues")
    assert not works(first[-2].removeprefix("REVIEWER_TOKEN="), "/api/v1/review/queues")
    assert APIClient().login(username="reviewer", password="reviewer")


def test_create_agent_prints_the_key_last_and_creates_missing_queues() -> None:
    lines = run("create_agent", "billing-bot", "--queues", "payments,refunds")
    assert works(lines[-1])
    agent = Agent.objects.get(name="billing-bot")
    assert sorted(agent.queues.values_list("slug", flat=True)) == ["payments", "refunds"]
    assert lines[-1] not in agent.key_hash and agent.key_prefix in lines[-1]


def test_create_agent_refuses_unknown_scopes_and_duplicates() -> None:
    with pytest.raises(CommandError, match="Unknown scope"):
        run("create_agent", "x", "--queues", "q", "--scopes", "root")
    run("create_agent", "x", "--queues", "q")
    with pytest.raises(CommandError, match="exists"):
        run("create_agent", "x", "--queues", "q")


def test_create_reviewer_reads_the_password_file_and_joins_queues(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret-pass\n")
    run("create_reviewer", "bob", "--queues", "payments", "--password-file", str(secret))
    assert APIClient().login(username="bob", password="s3cret-pass")
    assert list(Queue.objects.get(slug="payments").members.values_list("username", flat=True)) == ["bob"]


def test_create_reviewer_with_token_prints_a_working_token() -> None:
    lines = run("create_reviewer", "carol", "--queues", "payments", "--token")
    assert works(lines[-1], "/api/v1/review/queues")


def test_create_reviewer_with_a_missing_password_file_fails_clearly() -> None:
    with pytest.raises(CommandError, match="Cannot read the password file"):
        run("create_reviewer", "bob", "--queues", "q", "--password-file", "/nonexistent/pw")
