"""`manage.py export_fixture`: the answers people gave become a rules file; a scripted queue loaded with it gives
the same results to the same requests, and declines the ones nobody answered."""

import io
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import accounts, rules, transitions

pytestmark = pytest.mark.django_db

SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve"],
}


def ask(agent: Any, queue: str, version: str, env: dict[str, Any] | None = None) -> ElicitationRequest:
    request, _ = transitions.create_request(
        agent=agent,
        queue_slug=queue,
        message=f"Deploy {version} to production?",
        mode="form",
        requested_schema=SCHEMA,
        context={
            "mcp": {"server": "deploys", "tool": "deploy", "arguments": {"version": version, **(env or {})}}
        },
    )
    return request


def answer(request: ElicitationRequest, user: User, action: str, content: Any = None) -> ElicitationRequest:
    transitions.claim_request(request.pk, user=user)
    return transitions.respond(request.pk, user=user, action=action, content=content)


def test_an_exported_fixture_replays_the_same_results_in_a_scripted_queue(
    queue: Queue, reviewer: User, tmp_path: Path, clock: Any
) -> None:
    agent, _ = accounts.create_agent("recorder", queue_slugs=["payments", "ci"])
    human = [
        answer(ask(agent, "payments", "1.0"), reviewer, "accept", {"approve": True, "note": "go"}),
        answer(ask(agent, "payments", "1.1"), reviewer, "decline"),
        answer(ask(agent, "payments", "1.2", {"region": {"name": "eu"}}), reviewer, "cancel"),
    ]
    ask(agent, "payments", "9.9")  # never answered: not in the fixture
    fixture = tmp_path / "fixture.yaml"
    call_command("export_fixture", "payments", "--output", str(fixture))
    out = io.StringIO()
    call_command("import_rules", "ci", str(fixture), stdout=out)
    assert "scripted mode, 3 rules" in out.getvalue()

    replay = [
        ask(agent, "ci", "1.0"),
        ask(agent, "ci", "1.1"),
        ask(agent, "ci", "1.2", {"region": {"name": "eu"}}),
    ]

    def outcome(request: ElicitationRequest) -> Any:
        result = request.result() or {}
        return result["action"], result.get("content")

    assert [outcome(r) for r in replay] == [outcome(r) for r in human]
    unknown = ask(agent, "ci", "9.9")
    assert unknown.action == "decline"
    assert "no rule" in unknown.result_meta["reviewhub/decision"]["reason"]
    assert (
        ask(agent, "ci", "1.2", {"region": {"name": "us"}}).action == "decline"
    )  # another argument: no match


def test_since_limits_the_export_and_a_bad_value_is_refused(
    queue: Queue, reviewer: User, agent: Any, clock: Any
) -> None:
    answer(ask(agent, "payments", "1.0"), reviewer, "decline")
    clock.advance(days=3)
    answer(ask(agent, "payments", "2.0"), reviewer, "decline")
    out = io.StringIO()
    call_command("export_fixture", "payments", "--since", "1d", stdout=out)
    data = rules.load_yaml(out.getvalue())
    assert [rule["match"]["arguments"]["version"] for rule in data["rules"]] == [{"eq": "2.0"}]
    with pytest.raises(CommandError, match="--since"):
        call_command("export_fixture", "payments", "--since", "last week")
    with pytest.raises(CommandError, match="No queue"):
        call_command("export_fixture", "nope")


def test_importing_a_malformed_file_names_the_field(queue: Queue, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("rules:\n- name: x\n  action: explode\n")
    with pytest.raises(CommandError, match=r"rules\[0\]\.action"):
        call_command("import_rules", "payments", str(bad))


def test_the_same_request_answered_twice_is_exported_once(queue: Queue, reviewer: User, agent: Any) -> None:
    answer(ask(agent, "payments", "1.0"), reviewer, "accept", {"approve": False})
    answer(ask(agent, "payments", "1.0"), reviewer, "accept", {"approve": True})
    data = rules.fixture_from_answers(queue)
    assert len(data["rules"]) == 1
    assert data["rules"][0]["content"] == {"approve": False}
    rules.replace_policy(queue, data)  # valid as it stands
