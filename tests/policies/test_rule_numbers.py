"""Only finite numbers reach a rule: NaN and the infinities (JSON's `1e999`, the `NaN`/`Infinity` literals
Python's json reads, YAML's `.inf`, a remembered bound typed as `inf`) are refused with 400 naming the field,
where they used to be stored and fail as a 500 on SQLite and PostgreSQL alike."""

import json
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from elicitation.models import AnswerRule, ElicitationRequest, Queue
from elicitation.queue import rules, transitions
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.validation import FINITE

pytestmark = pytest.mark.django_db

NON_FINITE_TEXT = ["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e999", "-1e999"]
# As JSON numbers: `1e999` is valid JSON that Python reads as inf; the literals are what Python's json also takes.
NON_FINITE_JSON = ["1e999", "-1e999", "NaN", "Infinity", "-Infinity"]


@pytest.fixture
def sue(make_reviewer: Callable[..., User], queue: Queue) -> User:
    return make_reviewer("sue", queue, supervisor=True)


@pytest.fixture
def supervisor(sue: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(sue)
    return client


def rule_json(condition: str) -> str:
    return '{"name": "cap", "action": "decline", "match": {"arguments": {"amount": ' + condition + "}}}"


# --- remembered decisions (the reviewer's page) -----------------------------------------------------------------


@pytest.fixture
def answered(make_request: Callable[..., ElicitationRequest], sue: User) -> ElicitationRequest:
    request = make_request(context={"mcp": {"tool": "pay", "arguments": {"amount": 80}}})
    transitions.claim_request(request.pk, user=sue)
    return transitions.respond(request.pk, user=sue, action="accept", content={"approve": True})


@pytest.mark.parametrize("bound", NON_FINITE_TEXT)
@pytest.mark.parametrize("op", ["lte", "gte"])
def test_a_remembered_bound_must_be_finite(
    answered: ElicitationRequest, sue: User, bound: str, op: str
) -> None:
    client = Client()
    client.force_login(sue)
    url = f"/requests/{answered.pk}/remember"
    form = {"op-amount": op, "value-amount": bound, "days": "7"}

    preview = client.get(url, form)
    saved = client.post(url, {**form, "confirm": "yes"})

    assert preview.status_code == saved.status_code == 400
    assert b"The bound for amount must be a finite number." in saved.content
    assert not AnswerRule.objects.exists()


def test_a_finite_bound_is_still_remembered(answered: ElicitationRequest, sue: User) -> None:
    client = Client()
    client.force_login(sue)
    form = {"op-amount": "lte", "value-amount": "1e3", "days": "7", "confirm": "yes"}
    assert client.post(f"/requests/{answered.pk}/remember", form).status_code == 302
    assert AnswerRule.objects.get().match["arguments"] == {"amount": {"lte": 1000}}


# --- rules over REST, as JSON numbers and as strings ------------------------------------------------------------


@pytest.mark.parametrize("number", NON_FINITE_JSON)
@pytest.mark.parametrize("op", ["lt", "lte", "gt", "gte"])
def test_a_comparison_with_a_non_finite_json_number_is_a_400_naming_the_field(
    supervisor: APIClient, number: str, op: str
) -> None:
    refused = supervisor.post(
        "/api/v1/queues/payments/rules", rule_json(f'{{"{op}": {number}}}'), content_type="application/json"
    )
    assert refused.status_code == 400, refused.content
    assert refused.json()["fields"] == {f"rule.match.arguments.amount.{op}": FINITE}
    assert not AnswerRule.objects.exists()


@pytest.mark.parametrize("number", ["nan", "inf", "-inf", "1e999"])
def test_a_comparison_with_a_string_is_a_400_naming_the_field(supervisor: APIClient, number: str) -> None:
    refused = supervisor.post(
        "/api/v1/queues/payments/rules", rule_json(f'{{"lte": "{number}"}}'), content_type="application/json"
    )
    assert refused.status_code == 400
    assert refused.json()["fields"] == {"rule.match.arguments.amount.lte": "must be a number"}


@pytest.mark.parametrize("number", NON_FINITE_JSON)
@pytest.mark.parametrize(
    ("condition", "path"),
    [
        ("{number}", "rule.match.arguments.amount"),
        ('{{"eq": {number}}}', "rule.match.arguments.amount.eq"),
        ("[1, {number}]", "rule.match.arguments.amount[1]"),
        ('{{"in": [{number}]}}', "rule.match.arguments.amount.in[0]"),
    ],
)
def test_equality_with_a_non_finite_number_is_refused_too(
    supervisor: APIClient, number: str, condition: str, path: str
) -> None:
    body = rule_json(condition.format(number=number))
    refused = supervisor.post("/api/v1/queues/payments/rules", body, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["fields"] == {path: FINITE}


@pytest.mark.parametrize("number", NON_FINITE_JSON)
def test_accept_content_with_a_non_finite_number_is_refused(supervisor: APIClient, number: str) -> None:
    body = (
        '{"rules": [{"name": "yes", "action": "accept", "content": {"approve": true, "limit": '
        + number
        + "}}]}"
    )
    refused = supervisor.put("/api/v1/queues/payments/rules", body, content_type="application/json")
    assert refused.status_code == 400
    assert refused.json()["fields"] == {"rules[0].content.limit": FINITE}
    assert not AnswerRule.objects.exists()


@pytest.mark.parametrize("number", [".inf", "-.inf", ".nan", "1.0e+999"])
def test_yaml_non_finite_numbers_are_refused(supervisor: APIClient, number: str) -> None:
    body = f"rules:\n- name: cap\n  action: decline\n  match: {{arguments: {{amount: {{gte: {number}}}}}}}\n"
    refused = supervisor.put("/api/v1/queues/payments/rules", body, content_type="application/yaml")
    assert refused.status_code == 400
    assert refused.json()["fields"] == {"rules[0].match.arguments.amount.gte": FINITE}


def test_finite_numbers_still_compare(
    supervisor: APIClient, make_request: Callable[..., ElicitationRequest]
) -> None:
    posted = supervisor.post(
        "/api/v1/queues/payments/rules", rule_json('{"gt": 1e3}'), content_type="application/json"
    )
    assert posted.status_code == 201, posted.content
    assert make_request(context={"mcp": {"tool": "pay", "arguments": {"amount": 1001}}}).status == "completed"
    assert make_request(context={"mcp": {"tool": "pay", "arguments": {"amount": 999}}}).status == "pending"


def test_the_storage_functions_refuse_them_whatever_the_door(queue: Queue) -> None:
    with pytest.raises(InvalidInput) as refused:
        rules.add_rule(queue, json.loads(rule_json('{"lte": 1e999}')))
    assert refused.value.fields == {"rule.match.arguments.amount.lte": FINITE}
    assert not AnswerRule.objects.exists()
