"""Decision policies in the admin: the rule file edited as YAML (import by saving, export by reading), single rules
validated as the API validates them, approvals read-only."""

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import AnswerRule, Queue, QueuePolicy
from elicitation.queue import rules

pytestmark = pytest.mark.django_db

RULE_FILE = "mode: scripted\nrules:\n- name: no refunds\n  match:\n    tool: refund\n  action: decline\n"


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create(username="root", is_staff=True, is_superuser=True))
    return client


def test_saving_the_yaml_imports_it_and_the_form_shows_it_back(staff: Client, queue: Queue) -> None:
    added = staff.post("/admin/elicitation/queuepolicy/add/", {"queue": queue.pk, "rule_file": RULE_FILE})
    assert added.status_code == 302, added.content[:2000]
    policy = QueuePolicy.objects.get(queue=queue)
    assert policy.mode == "scripted"
    assert list(AnswerRule.objects.filter(queue=queue).values_list("name", flat=True)) == ["no refunds"]
    page = staff.get(f"/admin/elicitation/queuepolicy/{policy.pk}/change/")
    assert "tool: refund" in page.content.decode()
    assert staff.get("/admin/elicitation/queuepolicy/").status_code == 200


def test_a_malformed_file_is_refused_with_the_path(staff: Client, queue: Queue) -> None:
    bad = RULE_FILE.replace("decline", "explode")
    refused = staff.post("/admin/elicitation/queuepolicy/add/", {"queue": queue.pk, "rule_file": bad})
    assert refused.status_code == 200
    assert "rules[0].action: must be one of" in refused.content.decode()
    assert not AnswerRule.objects.exists()


def test_one_rule_is_validated_and_saving_it_reaches_intake(staff: Client, queue: Queue) -> None:
    form = {
        "queue": queue.pk,
        "position": 10,
        "name": "regex",
        "enabled": "on",
        "match": '{"tool": {"regex": "("}}',
        "action": "decline",
        "content": "null",
        "quorum": "null",
    }
    refused = staff.post("/admin/elicitation/answerrule/add/", form)
    assert refused.status_code == 200
    assert "rule.match.tool.regex" in refused.content.decode()
    saved = staff.post("/admin/elicitation/answerrule/add/", {**form, "match": '{"tool": "refund"}'})
    assert saved.status_code == 302, saved.content[:2000]
    rule = AnswerRule.objects.get()
    assert rule.created_by is not None
    assert rules.policy_data(queue)["rules"][0]["match"] == {"tool": "refund"}
    assert staff.get("/admin/elicitation/approval/").status_code == 200
