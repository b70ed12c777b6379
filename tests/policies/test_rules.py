"""Answer rules at intake: every operator and action, order, schema-invalid content falling through to a person,
audit rows naming the rule, YAML round trip, malformed rules refused with their path, scripted queues."""

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User

from elicitation.models import (
    Agent,
    AgentEvent,
    AnswerRule,
    ElicitationRequest,
    Queue,
    QueuePolicy,
    RequestEvent,
)
from elicitation.queue import rules, transitions
from elicitation.queue.errors import InvalidInput
from tests.answers import answer_of
from tests.conftest import FORM_SCHEMA

pytestmark = pytest.mark.django_db

PAY = {
    "mcp": {
        "server": "bank",
        "tool": "pay",
        "arguments": {"amount": 50, "currency": "EUR", "to": {"iban": "DE1"}},
    }
}


def pay(amount: Any = 50, currency: str = "EUR", tool: str = "pay", server: str = "bank") -> dict[str, Any]:
    return {"mcp": {"server": server, "tool": tool, "arguments": {"amount": amount, "currency": currency}}}


def load(queue: Queue, *rule_list: dict[str, Any], **policy: Any) -> None:
    rules.replace_policy(queue, {**policy, "rules": list(rule_list)})


def accept_rule(match: dict[str, Any], name: str = "auto", content: Any = None) -> dict[str, Any]:
    return {"name": name, "match": match, "action": "accept", "content": content or {"approve": True}}


def decided(request: ElicitationRequest) -> bool:
    return ElicitationRequest.objects.get(pk=request.pk).status == "completed"


# --- operators ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("condition", "amount", "expected"),
    [
        (50, 50, True),
        (50, 51, False),
        ({"eq": 50}, 50, True),
        ([10, 50], 50, True),
        ({"in": [10, 20]}, 50, False),
        ({"lt": 51}, 50, True),
        ({"lt": 50}, 50, False),
        ({"lte": 50}, 50, True),
        ({"lte": 49.5}, 50, False),
        ({"gt": 49}, 50, True),
        ({"gt": 50}, 50, False),
        ({"gte": 50}, 50, True),
        ({"gte": 50.1}, 50, False),
        ({"gt": 10, "lte": 100}, 50, True),
        ({"lte": 100}, "50", False),  # a string is not a number, whatever it spells
        ({"lte": 100}, True, False),  # nor is a boolean
        (1, True, False),
    ],
)
def test_argument_conditions_compare_as_declared(
    make_request: Callable[..., ElicitationRequest], queue: Queue, condition: Any, amount: Any, expected: bool
) -> None:
    load(queue, accept_rule({"arguments": {"amount": condition}}))
    assert decided(make_request(context=pay(amount))) is expected


@pytest.mark.parametrize(
    ("match", "expected"),
    [
        ({"agent": "agent-a"}, True),
        ({"agent": "someone-else"}, False),
        ({"server": "bank"}, True),
        ({"server": {"in": ["shop", "mail"]}}, False),
        ({"tool": "pay"}, True),
        ({"tool": {"regex": "^pa"}}, True),
        ({"tool": {"regex": "^refund"}}, False),
        ({"message": {"regex": "(?i)transfer of \\d+ eur"}}, True),
        ({"message": "something else"}, False),
        ({"arguments": {"currency": {"regex": "^EU"}}}, True),
        ({"arguments": {"missing": {"regex": ".*"}}}, False),
        ({"arguments": {"amount": {"regex": "5"}}}, False),  # regex only ever matches strings
        ({"tool": "pay", "arguments": {"amount": {"lte": 100}}}, True),
        ({"tool": "pay", "arguments": {"amount": {"lte": 10}}}, False),
    ],
)
def test_match_fields_agent_server_tool_message(
    make_request: Callable[..., ElicitationRequest], queue: Queue, match: dict[str, Any], expected: bool
) -> None:
    load(queue, accept_rule(match))
    assert decided(make_request(context=pay())) is expected


def test_schema_fingerprint_matches_the_same_form_whatever_its_key_order(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    fingerprint = rules.schema_fingerprint(FORM_SCHEMA)
    load(queue, accept_rule({"schema_fingerprint": fingerprint}))
    reordered = dict(reversed(list(FORM_SCHEMA.items())))
    assert decided(make_request(requested_schema=reordered))
    other = {"type": "object", "properties": {"approve": {"type": "boolean"}}}
    assert not decided(make_request(requested_schema=other))


def test_nested_arguments_are_reached_with_a_dotted_name(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, accept_rule({"arguments": {"to.iban": {"regex": "^DE"}}}))
    assert decided(make_request(context=PAY))


def test_context_at_the_top_level_and_from_the_input_required_runner_match_too(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, accept_rule({"tool": "pay", "arguments": {"amount": 5}}))
    assert decided(make_request(context={"tool": "pay", "arguments": {"amount": 5}}))
    runner = {"mcp": {"server": "bank", "params": {"name": "pay", "arguments": {"amount": 5}}, "round": 1}}
    assert decided(make_request(context=runner))


# --- actions -----------------------------------------------------------------------------------------------------


def test_accept_answers_at_once_with_the_rule_and_digest_in_meta_and_an_audit_row_naming_the_rule(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue, accept_rule({"tool": "pay"}, name="small payments", content={"approve": True, "note": "auto"})
    )
    request = make_request(context=pay())

    assert request.status == "completed"  # create_request hands back the decided row
    result = request.result()
    assert result is not None
    assert result["action"] == "accept"
    assert result["content"] == {"approve": True, "note": "auto"}
    decision = result["_meta"]["reviewhub/decision"]
    assert decision["rule"]["name"] == "small payments"
    assert decision["digest"] == rules.request_digest(request.message, FORM_SCHEMA, pay())
    completed = RequestEvent.objects.get(request=request, kind="completed")
    assert completed.detail["rule"]["name"] == "small payments"
    assert completed.actor_type == "system"
    assert AgentEvent.objects.filter(request=request, kind="completed").count() == 1


@pytest.mark.parametrize("action", ["decline", "cancel"])
def test_decline_and_cancel_answer_without_content(
    make_request: Callable[..., ElicitationRequest], queue: Queue, action: str
) -> None:
    load(queue, {"name": "no refunds", "match": {"tool": "refund"}, "action": action})
    request = make_request(context=pay(tool="refund"))
    assert request.status == "completed"
    assert request.action == action
    assert request.content is None
    assert "content" not in (request.result() or {})


def test_route_moves_the_request_and_the_target_queues_rules_apply(
    make_request: Callable[..., ElicitationRequest], queue: Queue, other_queue: Queue, agent: Agent
) -> None:
    agent.queues.add(other_queue)  # a route only moves work where the request's agent may post
    load(
        queue,
        {
            "name": "risky",
            "match": {"arguments": {"amount": {"gt": 1000}}},
            "action": "route",
            "queue": "other",
        },
    )
    load(other_queue, {"name": "urgent", "match": {}, "action": "set", "priority": 50})

    request = make_request(context=pay(5000))

    assert request.queue == other_queue
    assert request.priority == 50
    assert request.deadline > request.created_at
    kinds = list(RequestEvent.objects.filter(request=request).values_list("kind", "detail"))
    assert kinds[0][0] == "created"
    assert kinds[1] == (
        "routed",
        {"rule": kinds[1][1]["rule"], "from_queue": "payments", "to_queue": "other"},
    )
    assert kinds[2][0] == "rule_applied" and kinds[2][1]["rule"]["name"] == "urgent"
    assert make_request(context=pay(10)).queue == queue


def test_routes_in_a_loop_stop_where_they_started(
    make_request: Callable[..., ElicitationRequest], queue: Queue, other_queue: Queue, agent: Agent
) -> None:
    agent.queues.add(other_queue)
    load(queue, {"name": "there", "match": {}, "action": "route", "queue": "other"})
    load(other_queue, {"name": "back", "match": {}, "action": "route", "queue": "payments"})
    request = make_request()
    assert request.queue == other_queue
    assert RequestEvent.objects.filter(
        request=request, kind="rule_skipped", detail__reason="route loop"
    ).exists()


def test_set_changes_priority_and_deadline_and_the_walk_goes_on(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue,
        {
            "name": "urgent",
            "match": {"message": {"regex": "transfer"}},
            "action": "set",
            "priority": 90,
            "deadline": 120,
        },
        {"name": "later", "match": {"tool": "nothing-matches"}, "action": "decline"},
    )
    request = make_request(priority=1, expires_in=3600)
    assert request.status == "pending"
    assert request.priority == 90
    assert round((request.deadline - request.created_at).total_seconds()) == 120


def test_require_quorum_puts_the_requirement_and_digest_on_the_request(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue,
        {
            "name": "big",
            "match": {"arguments": {"amount": {"gte": 1000}}},
            "action": "require_quorum",
            "quorum": {"approvals": 2},
        },
    )
    big = make_request(context=pay(1000))
    small = make_request(context=pay(10))
    assert big.policy["quorum"]["approvals"] == 2
    assert big.policy["quorum"]["source"]["rule"]["name"] == "big"
    assert big.policy["digest"].startswith("sha256:")
    assert small.policy is None


def test_the_first_deciding_rule_wins_in_order(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue,
        {"name": "first", "match": {"tool": "pay"}, "action": "decline"},
        accept_rule({"tool": "pay"}, name="second"),
    )
    request = make_request(context=pay())
    assert request.action == "decline"
    assert request.result_meta["reviewhub/decision"]["rule"]["name"] == "first"


def test_disabled_expired_and_revoked_rules_decide_nothing(
    make_request: Callable[..., ElicitationRequest], queue: Queue, clock: Any
) -> None:
    load(
        queue,
        {**accept_rule({"tool": "pay"}, name="off"), "enabled": False},
        {**accept_rule({"tool": "pay"}, name="old"), "expires_at": clock.now().isoformat()},
    )
    assert not decided(make_request(context=pay()))
    rule = rules.add_rule(queue, accept_rule({"tool": "pay"}, name="live"))
    assert decided(make_request(context=pay()))
    rules.revoke_rule(rule)
    assert not decided(make_request(context=pay()))


def test_content_that_does_not_satisfy_the_schema_never_auto_accepts(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(
        queue,
        accept_rule({"tool": "pay"}, name="wrong type", content={"approve": "yes"}),
        accept_rule({"tool": "pay"}, name="unknown field", content={"approve": True, "extra": 1}),
    )
    request = make_request(context=pay())
    assert request.status == "pending"  # falls through to a person
    skipped = RequestEvent.objects.filter(request=request, kind="rule_skipped").order_by("id")
    assert [row.detail["rule"]["name"] for row in skipped] == ["wrong type", "unknown field"]
    assert "does not satisfy the request's schema" in skipped[0].detail["reason"]


def test_a_queue_without_a_policy_is_untouched(
    make_request: Callable[..., ElicitationRequest], reviewer: User
) -> None:
    request = make_request(context=pay())
    assert request.policy is None
    assert list(RequestEvent.objects.filter(request=request).values_list("kind", flat=True)) == ["created"]
    transitions.claim_request(request.pk, user=reviewer)
    done = transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    assert answer_of(done.result()) == {"action": "accept", "content": {"approve": True}}


def test_rule_changes_reach_the_compiled_cache(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, {"name": "no", "match": {"tool": "pay"}, "action": "decline"})
    assert make_request(context=pay()).action == "decline"
    rule = AnswerRule.objects.get(queue=queue)
    rules.update_rule(rule, accept_rule({"tool": "pay"}, name="yes"))
    assert make_request(context=pay()).action == "accept"


# --- scripted queues ----------------------------------------------------------------------------------------------


def test_a_scripted_queue_declines_what_no_rule_answers_with_the_reason_in_meta(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, accept_rule({"tool": "pay"}), mode="scripted")
    request = make_request(context=pay(tool="refund"))
    assert request.action == "decline"
    assert "no rule" in request.result()["_meta"]["reviewhub/decision"]["reason"]  # type: ignore[index]


def test_a_scripted_queue_can_leave_unmatched_requests_pending(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, accept_rule({"tool": "pay"}), mode="scripted", unmatched="pending")
    assert make_request(context=pay(tool="refund")).status == "pending"


def test_a_scripted_queue_declines_rounds_past_its_cap(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, accept_rule({}), mode="scripted")
    assert QueuePolicy.objects.get(queue=queue).round_cap == 5
    fifth = make_request(context={"mcp": {"tool": "endless", "round": 5}})
    sixth = make_request(context={"mcp": {"tool": "endless", "round": 6}})
    assert fifth.action == "accept"
    assert sixth.action == "decline"
    assert "cap of 5" in sixth.result_meta["reviewhub/decision"]["reason"]


# --- the rule file --------------------------------------------------------------------------------------------------

RULE_FILE = """
mode: human
unmatched: decline
round_cap: 5
quorum: {approvals: 2, groups: {sre: 1}, exclude_owner: true, veto: any}
rules:
  - name: read-only tools need nobody
    match: {tool: {in: [list_files, read_file]}}
    action: accept
    content: {approve: true}
  - name: large payments need three
    match: {tool: pay, arguments: {amount: {gt: 1000}, currency: EUR}}
    action: require_quorum
    quorum: {approvals: 3}
  - name: risky goes to the other queue
    match: {arguments: {risk: [high, critical]}}
    action: route
    queue: other
    priority: 10
  - name: urgent
    enabled: false
    match: {message: {regex: "(?i)urgent"}}
    action: set
    deadline: 300
"""


def test_yaml_export_import_export_gives_identical_rules(queue: Queue, other_queue: Queue) -> None:
    rules.replace_policy(queue, rules.load_yaml(RULE_FILE))
    exported = rules.dump_yaml(rules.policy_data(queue))
    rules.replace_policy(other_queue, rules.load_yaml(exported.replace("queue: other", "queue: payments")))
    rules.replace_policy(queue, rules.load_yaml(exported))
    assert rules.dump_yaml(rules.policy_data(queue)) == exported
    assert rules.policy_data(queue) == {
        **rules.load_yaml(RULE_FILE),
        "quorum": {"approvals": 2, "groups": {"sre": 1}, "exclude_owner": True, "veto": "any"},
    } | {"rules": rules.policy_data(queue)["rules"]}
    first = rules.policy_data(queue)["rules"][1]
    assert first["quorum"] == {"approvals": 3, "groups": {}, "exclude_owner": False, "veto": "any"}


@pytest.mark.parametrize(
    ("rule", "path", "reason"),
    [
        ({"match": {}, "action": "decline"}, "rules[0].name", "is required"),
        ({"name": "x", "action": "approve"}, "rules[0].action", "must be one of"),
        (
            {"name": "x", "action": "decline", "match": {"tool": {"regex": "("}}},
            "rules[0].match.tool.regex",
            "not a valid regular expression",
        ),
        (
            {"name": "x", "action": "decline", "match": {"arguments": {"amount": {"lte": "100"}}}},
            "rules[0].match.arguments.amount.lte",
            "must be a number",
        ),
        (
            {"name": "x", "action": "decline", "match": {"arguments": {"amount": {"between": [1, 2]}}}},
            "rules[0].match.arguments.amount.between",
            "unknown operator",
        ),
        (
            {"name": "x", "action": "decline", "match": {"colour": "red"}},
            "rules[0].match.colour",
            "unknown field",
        ),
        ({"name": "x", "action": "accept"}, "rules[0].content", "is required with accept"),
        (
            {"name": "x", "action": "decline", "content": {}},
            "rules[0].content",
            "only allowed with action accept",
        ),
        ({"name": "x", "action": "route", "queue": "nowhere"}, "rules[0].queue", "existing queue"),
        ({"name": "x", "action": "route", "queue": "payments"}, "rules[0].queue", "another queue"),
        (
            {"name": "x", "action": "require_quorum", "quorum": {"approvals": 1, "groups": {"sre": 2}}},
            "rules[0].quorum.approvals",
            "sum of the group counts",
        ),
        (
            {"name": "x", "action": "require_quorum", "quorum": {"approvals": 0}},
            "rules[0].quorum.approvals",
            "from 1 to 20",
        ),
        (
            {"name": "x", "action": "require_quorum", "quorum": {"veto": "maybe"}},
            "rules[0].quorum.veto",
            "must be any",
        ),
        ({"name": "x", "action": "set"}, "rules[0].action", "needs a priority"),
        ({"name": "x", "action": "set", "priority": 5000}, "rules[0].priority", "-1000 to 1000"),
        ({"name": "x", "action": "decline", "priority": 5}, "rules[0].priority", "only allowed"),
        ({"name": "x", "action": "decline", "expires_at": "tomorrow"}, "rules[0].expires_at", "ISO 8601"),
        ({"name": "x", "action": "decline", "colour": "red"}, "rules[0].colour", "unknown field"),
        ("decline everything", "rules[0]", "must be a mapping"),
    ],
)
def test_malformed_rules_are_refused_with_the_field_path_and_reason(
    queue: Queue, other_queue: Queue, rule: Any, path: str, reason: str
) -> None:
    load(queue, {"name": "keep", "match": {}, "action": "decline"})
    with pytest.raises(InvalidInput) as refused:
        load(queue, rule)
    assert path in refused.value.fields, refused.value.fields
    assert reason in refused.value.fields[path]
    assert list(AnswerRule.objects.filter(queue=queue).values_list("name", flat=True)) == [
        "keep"
    ]  # unchanged


def test_a_malformed_policy_and_bad_yaml_are_refused_with_the_path(queue: Queue) -> None:
    with pytest.raises(InvalidInput) as refused:
        rules.replace_policy(queue, {"mode": "robot", "round_cap": 0, "rules": {}, "extra": 1})
    assert set(refused.value.fields) == {"mode", "round_cap", "rules", "extra"}
    with pytest.raises(InvalidInput) as bad_yaml:
        rules.load_yaml("rules: [\n  - name: x\n    match: {tool: pay\n")
    assert "line" in bad_yaml.value.fields["$"]


def test_no_rule_accepts_a_url_mode_request_but_one_may_decline_it(
    make_request: Callable[..., ElicitationRequest], queue: Queue
) -> None:
    load(queue, {"name": "yes to links", "match": {}, "action": "accept", "content": {}})
    link = make_request(mode="url", url="https://example.com/connect", requested_schema=None)
    assert link.status == "pending"
    skipped = RequestEvent.objects.get(request=link, kind="rule_skipped")
    assert "URL-mode" in skipped.detail["reason"]
    load(queue, {"name": "no links", "match": {}, "action": "decline"})
    assert (
        make_request(mode="url", url="https://example.com/connect", requested_schema=None).action == "decline"
    )


def test_yaml_aliases_and_absurd_nesting_are_refused_not_expanded() -> None:
    bomb = 'a: &a ["x", "x"]\nb: &b [*a, *a]\nc: &c [*b, *b]\nrules: [*c, *c]\n'
    with pytest.raises(InvalidInput) as aliases:
        rules.load_yaml(bomb)
    assert "aliases" in aliases.value.fields["$"]
    with pytest.raises(InvalidInput):
        rules.load_yaml("rules: " + "[" * 5000 + "]" * 5000)
