"""`/api/v1/queues/{slug}/rules`: reviewers read, supervisors change; JSON and YAML; malformed rules are a 400 with
the field path; another team's queue is a 403."""

from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.models import AnswerRule, Queue
from elicitation.queue import accounts, rules

pytestmark = pytest.mark.django_db

RULES_URL = "/api/v1/queues/payments/rules"
RULE_FILE = """mode: human
unmatched: decline
round_cap: 5
rules:
- name: read-only
  match:
    tool:
      in:
      - list_files
      - read_file
  action: accept
  content:
    approve: true
- name: refunds
  match:
    tool: refund
  action: decline
"""


@pytest.fixture
def supervisor(make_reviewer: Callable[..., User], queue: Queue) -> APIClient:
    client = APIClient()
    client.force_authenticate(make_reviewer("sue", queue, supervisor=True))
    return client


def test_a_supervisor_puts_yaml_and_reads_it_back_identically(supervisor: APIClient) -> None:
    put = supervisor.put(RULES_URL, RULE_FILE, content_type="application/yaml")
    assert put.status_code == 200, put.content
    back = supervisor.get(RULES_URL + "?format=yaml")
    assert back.status_code == 200
    assert back["Content-Type"].startswith("application/yaml")
    assert back.content.decode() == RULE_FILE
    as_json = supervisor.get(RULES_URL).json()
    assert [rule["name"] for rule in as_json["rules"]] == ["read-only", "refunds"]


def test_json_works_too_and_one_rule_can_be_added_read_changed_and_deleted(supervisor: APIClient) -> None:
    assert supervisor.put(RULES_URL, {"rules": []}, format="json").status_code == 200
    added = supervisor.post(
        RULES_URL, {"name": "no", "match": {"tool": "pay"}, "action": "decline"}, format="json"
    )
    assert added.status_code == 201, added.json()
    rule_url = f"{RULES_URL}/{added.json()['id']}"
    assert supervisor.get(rule_url).json()["action"] == "decline"
    changed = supervisor.put(
        rule_url, {"name": "no", "match": {"tool": "pay"}, "action": "cancel"}, format="json"
    )
    assert changed.json()["action"] == "cancel"
    assert supervisor.delete(rule_url).status_code == 204
    assert supervisor.get(rule_url).status_code == 404


def test_malformed_rules_are_a_400_naming_each_field(supervisor: APIClient) -> None:
    body = {"rules": [{"name": "x", "action": "decline", "match": {"arguments": {"amount": {"lte": "ten"}}}}]}
    refused = supervisor.put(RULES_URL, body, format="json")
    assert refused.status_code == 400
    assert refused.json()["fields"] == {"rules[0].match.arguments.amount.lte": "must be a number"}
    bad_yaml = supervisor.put(RULES_URL, "rules: [", content_type="application/yaml")
    assert bad_yaml.status_code == 400
    assert "YAML error" in bad_yaml.json()["fields"]["$"]
    one = supervisor.post(RULES_URL, {"name": "x", "action": "accept"}, format="json")
    assert one.status_code == 400
    assert "rule.content" in one.json()["fields"]


def test_reviewers_read_but_only_supervisors_change(reviewer_client: APIClient, queue: Queue) -> None:
    rules.replace_policy(queue, rules.load_yaml(RULE_FILE))
    assert reviewer_client.get(RULES_URL).status_code == 200
    assert reviewer_client.put(RULES_URL, {"rules": []}, format="json").status_code == 403
    assert (
        reviewer_client.post(RULES_URL, {"name": "x", "action": "decline"}, format="json").status_code == 403
    )
    rule = AnswerRule.objects.filter(queue=queue).first()
    assert rule is not None
    assert reviewer_client.delete(f"{RULES_URL}/{rule.pk}").status_code == 403
    assert AnswerRule.objects.filter(queue=queue).count() == 2


def test_another_teams_queue_is_forbidden_and_a_reviewer_token_works(
    make_reviewer: Callable[..., User], queue: Queue, other_queue: Queue
) -> None:
    outsider = make_reviewer("otto", other_queue, supervisor=True)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {accounts.create_reviewer_token(outsider, 'ci')}")
    assert client.get(RULES_URL).status_code == 403
    assert client.get("/api/v1/queues/other/rules").status_code == 200
    assert APIClient().get(RULES_URL).status_code == 401


def test_a_remembered_decision_is_revoked_not_deleted(
    supervisor: APIClient, queue: Queue, make_request: Callable[..., object], reviewer: User
) -> None:
    rule = rules.add_rule(queue, {"name": "mem", "match": {}, "action": "decline"})
    rule.remembered_from = make_request()  # type: ignore[assignment]
    rule.save()
    listed = supervisor.get("/api/v1/queues/payments/remembered").json()
    assert [row["name"] for row in listed] == ["mem"]
    assert supervisor.delete(f"{RULES_URL}/{rule.pk}").status_code == 204
    rule.refresh_from_db()
    assert rule.revoked_at is not None
