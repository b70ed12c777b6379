"""The rule file's shape is a JSON Schema (queue/rules/rule_file_schema.py) checked by jsonschema; its refusals keep
the field paths and reasons the rule pages, the API and `import_rules` have always given."""

from typing import Any

import pytest
from jsonschema import Draft202012Validator

from elicitation.models import Queue
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules import rule_file_schema
from elicitation.queue.rules.validation import FINITE, parse_policy, parse_rule

pytestmark = pytest.mark.django_db


def refusal(queue: Queue, data: Any) -> dict[str, str]:
    with pytest.raises(InvalidInput) as refused:
        parse_policy(data, queue=queue)
    return refused.value.fields


def test_the_schema_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(rule_file_schema.POLICY)
    Draft202012Validator.check_schema(rule_file_schema.RULE)


def test_a_well_shaped_file_becomes_specs(queue: Queue) -> None:
    policy = parse_policy(
        {
            "mode": "scripted",
            "quorum": {"approvals": 2, "groups": {"sre": 1}},
            "rules": [
                {
                    "name": " small refunds ",
                    "match": {"arguments": {"amount": {"lte": 100}}},
                    "action": "accept",
                    "content": {"approve": True},
                },
                {"name": "urgent", "match": {"tool": ["page", "wake"]}, "action": "set", "priority": 50},
            ],
        },
        queue=queue,
    )
    assert (policy.mode, policy.unmatched, policy.round_cap) == ("scripted", "decline", 5)
    assert policy.quorum == {"approvals": 2, "groups": {"sre": 1}, "exclude_owner": False, "veto": "any"}
    assert [(rule.name, rule.action, rule.priority) for rule in policy.rules] == [
        ("small refunds", "accept", None),
        ("urgent", "set", 50),
    ]


def test_a_whole_number_is_an_int_not_a_float_without_a_fraction(queue: Queue) -> None:
    fields = refusal(queue, {"round_cap": 5.0, "rules": [{"name": "x", "action": "set", "priority": 5.0}]})
    assert fields == {
        "round_cap": "must be a whole number from 1 to 100",
        "rules[0].priority": "must be a whole number from -1000 to 1000",
    }


def test_a_refusal_inside_a_field_is_named_at_the_field_that_says_what_it_wants(queue: Queue) -> None:
    fields = refusal(
        queue,
        {
            "quorum": {"groups": {"sre": 0}},
            "rules": [
                {"name": "x", "action": "decline", "match": {"tool": ["a", {"b": 1}], "agent": {"in": [[1]]}}}
            ],
        },
    )
    assert fields == {
        "quorum.groups": "must map group names to whole numbers of at least 1",
        "rules[0].match.tool": "a list condition holds only scalars",
        "rules[0].match.agent.in": "must be a list of strings, numbers or booleans",
    }


def test_missing_members_are_named_each_in_their_own_words(queue: Queue) -> None:
    fields = refusal(queue, {"rules": [{}, {"name": "q", "action": "require_quorum"}]})
    assert fields == {
        "rules[0].name": "is required: a name of at most 200 characters",
        "rules[0].action": "must be one of accept, decline, cancel, route, require_quorum, set",
        "rules[1].quorum": "is required with require_quorum",
    }


def test_the_checks_in_code_run_only_where_the_shape_is_right(queue: Queue) -> None:
    rule = {
        "name": "x",
        "action": "decline",
        "match": {"tool": {"lte": float("nan"), "between": [float("nan")]}},
    }
    spec, fields = parse_rule(rule, "rule", queue=queue)
    assert spec is None
    assert fields == {
        "rule.match.tool.lte": FINITE,
        "rule.match.tool.between": "unknown operator; use one of eq, in, lt, lte, gt, gte, regex",
    }


def test_a_key_yaml_reads_as_a_number_is_named_after_a_dot(queue: Queue) -> None:
    spec, fields = parse_rule(
        {"name": "x", "action": "decline", "match": {"arguments": {1: {"lte": "1"}}}}, "rule", queue=queue
    )
    assert spec is None
    assert fields == {
        "rule.match.arguments": "argument names must be non-empty strings",
        "rule.match.arguments.1.lte": "must be a number",
    }


def test_more_rules_than_a_queue_holds_is_one_refusal_at_rules(queue: Queue) -> None:
    too_many = [{"name": "x"}] * (rule_file_schema.MAX_RULES + 1)
    assert refusal(queue, {"rules": too_many}) == {
        "rules": f"at most {rule_file_schema.MAX_RULES} rules per queue"
    }
    assert refusal(queue, {"rules": "all"}) == {"rules": "must be a list"}
    assert refusal(queue, ["rules"]) == {
        "$": "must be a mapping with mode, unmatched, round_cap, quorum, rules"
    }
