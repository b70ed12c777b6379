"""`manage.py export_fixture`: the answers people gave become a rules file; a scripted queue loaded with it gives
the same results to the same calls (tool and arguments, less the ignored ones; not the message), and declines the
ones nobody answered."""

import io
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command

from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import accounts, rules, transitions
from elicitation.queue.errors import InvalidInput

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
    assert "no rule" in (unknown.result_meta or {})["reviewhub/decision"]["reason"]
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


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("rules:\n- name: x\n  action: explode\n", r"rules\[0\]\.action: must be one of"),
        ("rules:\n- name: x\n  action: decline\n  match: {arguments: {'': 1}}\n", "argument names must be"),
        ("- just\n- a list\n", r"\$: must be a mapping"),
        ("rules: [\n", r"\$: YAML error at line 2"),
        ("mode: scripted\nignore_arguments: [timestamp]\n", "ignore_arguments: unknown field"),
    ],
)
def test_importing_a_malformed_file_names_the_file_and_the_field(
    queue: Queue, tmp_path: Path, text: str, where: str
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(CommandError, match=rf"^{bad}: .*{where}"):
        call_command("import_rules", "payments", str(bad))


def test_the_same_request_answered_twice_is_exported_once(queue: Queue, reviewer: User, agent: Any) -> None:
    answer(ask(agent, "payments", "1.0"), reviewer, "accept", {"approve": False})
    answer(ask(agent, "payments", "1.0"), reviewer, "accept", {"approve": True})
    data = rules.fixture_from_answers(queue)
    assert len(data["rules"]) == 1
    assert data["rules"][0]["content"] == {"approve": False}
    rules.replace_policy(queue, data)  # valid as it stands


def ask_with_noise(agent: Any, queue: str, version: str, stamp: str, request_id: str) -> ElicitationRequest:
    """A tool whose question embeds what changes from run to run: the time and a request id."""
    request, _ = transitions.create_request(
        agent=agent,
        queue_slug=queue,
        message=f"Deploy {version} to production? (asked {stamp}, request {request_id})",
        mode="form",
        requested_schema=SCHEMA,
        context={
            "mcp": {
                "server": "deploys",
                "tool": "deploy",
                "arguments": {
                    "version": version,
                    "timestamp": stamp,
                    "meta": {"request_id": request_id, "region": "eu"},
                },
            }
        },
    )
    return request


def outcome(request: ElicitationRequest) -> Any:
    result = request.result() or {}
    return result["action"], result.get("content")


def test_a_call_whose_question_embeds_a_timestamp_replays_with_the_changing_arguments_ignored(
    queue: Queue, reviewer: User, tmp_path: Path
) -> None:
    agent, _ = accounts.create_agent("recorder", queue_slugs=["payments", "ci"])
    answer(ask_with_noise(agent, "payments", "1.0", "09:00", "r-1"), reviewer, "accept", {"approve": True})
    answer(ask_with_noise(agent, "payments", "1.1", "09:05", "r-2"), reviewer, "decline")
    fixture = tmp_path / "fixture.yaml"
    call_command(
        "export_fixture",
        "payments",
        "--ignore-arguments",
        "timestamp,meta.request_id",
        "--output",
        str(fixture),
    )
    data = rules.load_yaml(fixture.read_text())
    assert data["rules"][0]["match"] == {
        "server": "deploys",
        "tool": "deploy",
        "schema_fingerprint": data["rules"][0]["match"]["schema_fingerprint"],
        "arguments": {"version": {"eq": "1.0"}, "meta.region": {"eq": "eu"}},
    }
    call_command("import_rules", "ci", str(fixture), stdout=io.StringIO())

    # Another run: other times, other ids, so other messages; the same calls get the same answers.
    assert outcome(ask_with_noise(agent, "ci", "1.0", "23:59", "r-77")) == ("accept", {"approve": True})
    assert outcome(ask_with_noise(agent, "ci", "1.1", "00:01", "r-78")) == ("decline", None)
    # An argument that is not ignored still tells calls apart.
    assert ask_with_noise(agent, "ci", "1.2", "00:02", "r-79").action == "decline"
    unmatched = ask_with_noise(agent, "ci", "1.2", "00:02", "r-80")
    assert "no rule" in (unmatched.result_meta or {})["reviewhub/decision"]["reason"]


def test_without_ignoring_them_the_changing_arguments_do_not_replay(
    queue: Queue, reviewer: User, tmp_path: Path
) -> None:
    agent, _ = accounts.create_agent("recorder", queue_slugs=["payments", "ci"])
    answer(ask_with_noise(agent, "payments", "1.0", "09:00", "r-1"), reviewer, "accept", {"approve": True})
    rules.replace_policy(Queue.objects.get(slug="ci"), rules.fixture_from_answers(queue))
    assert outcome(ask_with_noise(agent, "ci", "1.0", "09:00", "r-1")) == ("accept", {"approve": True})
    assert ask_with_noise(agent, "ci", "1.0", "10:00", "r-2").action == "decline"


def test_calls_differing_only_in_ignored_arguments_are_exported_once(
    queue: Queue, reviewer: User, agent: Any
) -> None:
    answer(ask_with_noise(agent, "payments", "1.0", "09:00", "r-1"), reviewer, "accept", {"approve": False})
    answer(ask_with_noise(agent, "payments", "1.0", "09:30", "r-2"), reviewer, "accept", {"approve": True})
    data = rules.fixture_from_answers(queue, ignore_arguments=["timestamp", "meta"])
    assert len(data["rules"]) == 1
    assert data["rules"][0]["content"] == {"approve": False}  # the first answer
    assert data["rules"][0]["match"]["arguments"] == {"version": {"eq": "1.0"}}  # "meta" ignores all under it


def ask_raw(agent: Any, message: str, context: dict[str, Any]) -> ElicitationRequest:
    request, _ = transitions.create_request(
        agent=agent,
        queue_slug="payments",
        message=message,
        mode="form",
        requested_schema=SCHEMA,
        context=context,
    )
    return request


@pytest.mark.parametrize(
    ("context", "ignored", "keeps_message"),
    [
        ({"mcp": {"tool": "deploy", "arguments": {"v": "1"}}}, [], False),
        ({"note": "no tool named"}, [], True),
        (
            {"mcp": {"tool": "deploy", "arguments": {"hosts": ["a", "b"]}}},
            [],
            True,
        ),  # no condition names a list
        ({"mcp": {"tool": "deploy", "arguments": {"hosts": ["a", "b"]}}}, ["hosts"], False),
        ({"mcp": {"tool": "deploy", "arguments": {"a.b": 1, "": 2}}}, [], True),  # names no path can reach
    ],
)
def test_the_message_is_matched_only_when_the_call_cannot_tell_requests_apart(
    queue: Queue, reviewer: User, agent: Any, context: dict[str, Any], ignored: list[str], keeps_message: bool
) -> None:
    answer(ask_raw(agent, "Deploy?", context), reviewer, "decline")
    data = rules.fixture_from_answers(queue, ignore_arguments=ignored)
    assert ("message" in data["rules"][0]["match"]) is keeps_message
    rules.replace_policy(queue, data)  # what it writes, the rules' own validation takes


def test_bad_ignored_argument_names_are_refused_by_path_as_rule_files_are(queue: Queue) -> None:
    with pytest.raises(InvalidInput) as refused:
        rules.fixture_from_answers(queue, ignore_arguments=["timestamp", "", "meta..id", 7])  # type: ignore[list-item]
    assert refused.value.fields == {
        "ignore_arguments[1]": "argument names must be non-empty strings",
        "ignore_arguments[2]": "argument names must be non-empty strings",
        "ignore_arguments[3]": "argument names must be non-empty strings",
    }
    # The same reason the rules' validation gives an empty argument name in a rule file.
    with pytest.raises(InvalidInput) as rule_file:
        rules.replace_policy(
            queue, {"rules": [{"name": "x", "action": "decline", "match": {"arguments": {"": 1}}}]}
        )
    assert set(rule_file.value.fields.values()) == {"argument names must be non-empty strings"}
    with pytest.raises(
        CommandError, match=r"--ignore-arguments: ignore_arguments\[0\]: argument names must be"
    ):
        call_command("export_fixture", "payments", "--ignore-arguments", "meta..id")
