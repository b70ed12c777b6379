"""Rule regexes run on RE2: a pattern that backtracks catastrophically in Python's `re` completes at once with the
right answer; what RE2 cannot run (lookarounds, backreferences) is refused when saved, with the field path; the
search semantics of ordinary patterns stay; a value longer than the regex cap is not guessed at."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.models import AnswerRule, ElicitationRequest, Queue, RequestEvent
from elicitation.queue import rules
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.engine import MAX_MATCHED_CHARS

pytestmark = pytest.mark.django_db

PATHOLOGICAL = "^(a+)+$"


def load(queue: Queue, *rule_list: dict[str, Any], **policy: Any) -> None:
    rules.replace_policy(queue, {**policy, "rules": list(rule_list)})


def decline_when(match: dict[str, Any], name: str = "regex") -> dict[str, Any]:
    return {"name": name, "match": match, "action": "decline"}


def with_argument(value: Any) -> dict[str, Any]:
    return {"mcp": {"server": "bank", "tool": "pay", "arguments": {"note": value}}}


@pytest.mark.parametrize(
    ("message", "matched"),
    [
        ("a" * 27 + "b", False),  # 2^27 paths for a backtracking engine before it gives up
        ("a" * 3000 + "!", False),
        ("a" * 27, True),
    ],
)
def test_a_catastrophic_pattern_completes_with_the_right_answer(
    make_request: Callable[..., ElicitationRequest], queue: Queue, message: str, matched: bool
) -> None:
    load(queue, decline_when({"message": {"regex": PATHOLOGICAL}}))
    request = make_request(message=message)
    assert (request.status == "completed") is matched


def test_the_same_pattern_over_an_argument_completes_too(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, decline_when({"arguments": {"note": {"regex": "(x+x+)+y"}}}))
    assert make_request(context=with_argument("x" * 4000)).status == "pending"
    assert make_request(context=with_argument("x" * 40 + "y")).status == "completed"


@pytest.mark.parametrize(
    ("pattern", "construct"),
    [
        ("^(?=pay)", "lookaround"),
        ("(?<!re)fund", "lookaround"),
        ("(?!x)y", "lookaround"),
        (r"(a)\1", "backreference"),
        (r"end\Z", r"\Z"),
    ],
)
def test_what_re2_cannot_run_is_refused_when_saved_with_the_path(
    queue: Queue, pattern: str, construct: str
) -> None:
    load(queue, decline_when({"tool": "refund"}, name="keep"))
    with pytest.raises(InvalidInput) as refused:
        load(queue, decline_when({"message": {"regex": pattern}}))
    reason = refused.value.fields["rules[0].match.message.regex"]
    assert "RE2" in reason
    assert construct in reason
    assert list(AnswerRule.objects.values_list("name", flat=True)) == ["keep"]


def test_a_typo_is_still_called_an_invalid_regular_expression(queue: Queue) -> None:
    with pytest.raises(InvalidInput) as refused:
        load(queue, decline_when({"tool": {"regex": "(unclosed"}}))
    assert "not a valid regular expression" in refused.value.fields["rules[0].match.tool.regex"]


def test_the_api_answers_a_lookahead_with_400_and_the_path(
    make_reviewer: Callable[..., User], queue: Queue
) -> None:
    client = APIClient()
    client.force_authenticate(make_reviewer("sue", queue, supervisor=True))
    body = {"rules": [decline_when({"arguments": {"iban": {"regex": "^(?=DE)"}}})]}
    refused = client.put("/api/v1/queues/payments/rules", body, format="json")
    assert refused.status_code == 400
    assert list(refused.json()["fields"]) == ["rules[0].match.arguments.iban.regex"]
    assert "lookaround" in refused.json()["fields"]["rules[0].match.arguments.iban.regex"]
    assert not AnswerRule.objects.exists()


@pytest.mark.parametrize(
    ("pattern", "message", "matched"),
    [
        ("transfer", "Approve transfer of 100 EUR?", True),  # searched, not anchored at the start
        ("^transfer", "Approve transfer of 100 EUR?", False),
        ("^Approve", "Approve transfer of 100 EUR?", True),
        (r"EUR\?$", "Approve transfer of 100 EUR?", True),
        (r"(?i)TRANSFER OF \d+ eur", "Approve transfer of 100 EUR?", True),
        (r"\btransfer\b", "Approve transferral", False),
        ("(?P<amount>[0-9]+) EUR", "Approve transfer of 100 EUR?", True),
        ("of.100", "Approve transfer of\n100 EUR?", False),  # `.` does not cross a line, as in `re`
        ("(?s)of.100", "Approve transfer of\n100 EUR?", True),
        ("é+", "Zahlung für Café éé", True),
    ],
)
def test_ordinary_patterns_keep_their_meaning(
    make_request: Callable[..., ElicitationRequest], queue: Queue, pattern: str, message: str, matched: bool
) -> None:
    load(queue, decline_when({"message": {"regex": pattern}}))
    assert (make_request(message=message).status == "completed") is matched


def test_a_value_over_the_cap_is_not_guessed_at_and_nothing_after_the_rule_decides(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue,
        decline_when({"arguments": {"note": {"regex": "rm -rf"}}}, name="no deletes"),
        {"name": "the rest", "match": {}, "action": "accept", "content": {"approve": True}},
    )
    at_cap = make_request(context=with_argument("x" * (MAX_MATCHED_CHARS - 6) + "rm -rf"))
    assert (at_cap.status, at_cap.action) == ("completed", "decline")

    # Padding past the cap must not hide the `rm -rf` from the decline and let the catch-all accept it.
    padded = make_request(context=with_argument("x" * MAX_MATCHED_CHARS + "rm -rf"))

    assert padded.status == "pending"
    skipped = RequestEvent.objects.get(request=padded, kind="rule_skipped")
    assert skipped.detail["rule"]["name"] == "no deletes"
    assert str(MAX_MATCHED_CHARS) in skipped.detail["reason"]
    assert not RequestEvent.objects.filter(request=padded, kind="completed").exists()


def test_a_long_value_holds_nothing_when_the_rule_is_ruled_out_by_its_other_conditions(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue,
        decline_when({"arguments": {"note": {"regex": "rm -rf"}, "env": "production"}}, name="prod deletes"),
        {"name": "the rest", "match": {}, "action": "accept", "content": {"approve": True}},
    )
    request = make_request(context=with_argument("x" * (MAX_MATCHED_CHARS + 1)))  # no `env`: ruled out first
    assert (request.status, request.action) == ("completed", "accept")


def test_an_argument_condition_rules_a_message_regex_out_first(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    """Regex conditions come last across the request's facts and its arguments alike: an over-long message is not
    even read by a rule whose argument condition already fails, so it holds nothing."""
    load(
        queue,
        decline_when(
            {"message": {"regex": "rm -rf"}, "arguments": {"env": "production"}}, name="prod deletes"
        ),
        {"name": "the rest", "match": {}, "action": "accept", "content": {"approve": True}},
    )
    request = make_request(message="x" * (MAX_MATCHED_CHARS + 1), context=with_argument("ok"))  # no `env`
    assert (request.status, request.action) == ("completed", "accept")
    assert not RequestEvent.objects.filter(request=request, kind="rule_skipped").exists()


def test_a_stored_pattern_re2_cannot_compile_holds_requests_instead_of_failing_intake(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, {"name": "the rest", "match": {}, "action": "accept", "content": {"approve": True}})
    # A row saved before rules ran on RE2 (validation then took any `re` pattern).
    AnswerRule.objects.create(
        queue=queue, position=1, name="legacy", match={"message": {"regex": "^(?!refund)"}}, action="decline"
    )
    rules.rules_changed(queue)

    request = make_request()

    assert request.status == "pending"
    skipped = RequestEvent.objects.get(request=request, kind="rule_skipped")
    assert skipped.detail["rule"]["name"] == "legacy"
    assert "RE2" in skipped.detail["reason"]
