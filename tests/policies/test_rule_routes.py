"""A `route` rule cannot be turned against another team: saved, it targets only a queue its writer supervises (the
same refusal for a queue that does not exist, at every door: REST, admin, import_rules); at intake, a route into a
queue the request's agent may not post to is refused, audited, and the request stays where it is, for a person."""

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from elicitation.models import Agent, AnswerRule, ElicitationRequest, Queue, QueuePolicy, RequestEvent
from elicitation.queue import rules
from elicitation.queue.errors import InvalidInput
from elicitation.queue.rules.validation import ROUTE_TARGET
from tests.conftest import FORM_SCHEMA

pytestmark = pytest.mark.django_db

# Team A owns `payments` (the `queue` fixture); team B owns `other` (the `other_queue` fixture).
ROUTE_TO_PAYMENTS = {"name": "to A", "match": {}, "action": "route", "queue": "payments"}
ROUTE_NOWHERE = {"name": "to A", "match": {}, "action": "route", "queue": "nowhere"}


@pytest.fixture
def bob(make_reviewer: Callable[..., User], other_queue: Queue) -> User:
    """Supervisor of team B's queue only."""
    return make_reviewer("bob", other_queue, supervisor=True)


@pytest.fixture
def bob_api(bob: User) -> APIClient:
    client = APIClient()
    client.force_authenticate(bob)
    return client


def file_with(*rule_list: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "human", "rules": list(rule_list)}


# --- REST -------------------------------------------------------------------------------------------------------


def test_rest_refuses_a_route_into_another_teams_queue_exactly_as_into_a_missing_one(
    bob_api: APIClient, queue: Queue, other_queue: Queue
) -> None:
    keep = {"name": "keep", "match": {"tool": "refund"}, "action": "decline"}
    rules.replace_policy(other_queue, file_with(keep))
    version = QueuePolicy.objects.get(queue=other_queue).rules_version

    theirs = bob_api.put("/api/v1/queues/other/rules", file_with(keep, ROUTE_TO_PAYMENTS), format="json")
    missing = bob_api.put("/api/v1/queues/other/rules", file_with(keep, ROUTE_NOWHERE), format="json")

    assert theirs.status_code == missing.status_code == 400
    assert theirs.json()["fields"] == {"rules[1].queue": ROUTE_TARGET}
    assert theirs.json() == missing.json()  # nothing tells an existing queue from a missing one
    assert list(AnswerRule.objects.values_list("name", flat=True)) == ["keep"]
    assert QueuePolicy.objects.get(queue=other_queue).rules_version == version


def test_rest_refuses_it_when_one_rule_is_added_or_rewritten(bob_api: APIClient, other_queue: Queue) -> None:
    added = bob_api.post("/api/v1/queues/other/rules", ROUTE_TO_PAYMENTS, format="json")
    assert added.status_code == 400
    assert added.json()["fields"] == {"rule.queue": ROUTE_TARGET}

    rule = rules.add_rule(other_queue, {"name": "plain", "match": {}, "action": "decline"})
    rewritten = bob_api.put(f"/api/v1/queues/other/rules/{rule.pk}", ROUTE_TO_PAYMENTS, format="json")
    assert rewritten.status_code == 400
    assert rewritten.json()["fields"] == {"rule.queue": ROUTE_TARGET}
    rule.refresh_from_db()
    assert (rule.action, rule.route_to) == ("decline", None)


def test_rest_accepts_a_route_into_a_queue_the_writer_supervises_and_staff_route_anywhere(
    bob: User, bob_api: APIClient, queue: Queue, other_queue: Queue
) -> None:
    triage = Queue.objects.create(slug="triage", name="Triage")
    triage.supervisors.add(bob)
    to_triage = {**ROUTE_TO_PAYMENTS, "queue": "triage"}
    assert bob_api.put("/api/v1/queues/other/rules", file_with(to_triage), format="json").status_code == 200
    assert AnswerRule.objects.get(queue=other_queue).route_to == triage

    staff = APIClient()
    staff.force_authenticate(User.objects.create(username="root", is_staff=True))
    put = staff.put("/api/v1/queues/other/rules", file_with(ROUTE_TO_PAYMENTS), format="json")
    assert put.status_code == 200, put.json()
    assert AnswerRule.objects.get(queue=other_queue).route_to == queue


# --- admin ------------------------------------------------------------------------------------------------------


def test_the_admin_checks_routes_as_its_user_and_refuses_a_missing_queue_with_the_path(
    queue: Queue, other_queue: Queue
) -> None:
    root = User.objects.create(username="root", is_staff=True, is_superuser=True)
    admin = Client()
    admin.force_login(root)
    missing_file = "rules:\n- name: to A\n  match: {}\n  action: route\n  queue: nowhere\n"

    refused = admin.post(
        "/admin/elicitation/queuepolicy/add/", {"queue": other_queue.pk, "rule_file": missing_file}
    )

    assert refused.status_code == 200
    assert f"rules[0].queue: {ROUTE_TARGET}" in refused.content.decode()
    assert not AnswerRule.objects.exists()
    # Staff supervise every queue (access.can_supervise), so the same file naming team A's queue is theirs to save.
    saved = admin.post(
        "/admin/elicitation/queuepolicy/add/",
        {"queue": other_queue.pk, "rule_file": missing_file.replace("nowhere", "payments")},
    )
    assert saved.status_code == 302, saved.content[:2000]
    rule = AnswerRule.objects.get(queue=other_queue)
    assert (rule.route_to, rule.created_by) == (queue, root)


# --- import_rules -----------------------------------------------------------------------------------------------


@pytest.fixture
def route_file(tmp_path: Path) -> Callable[[str], Path]:
    def write(target: str) -> Path:
        path = tmp_path / f"route-{target}.yaml"
        path.write_text(f"rules:\n- name: to {target}\n  match: {{}}\n  action: route\n  queue: {target}\n")
        return path

    return write


def test_import_rules_as_a_user_refuses_their_neighbours_queue_as_it_refuses_a_missing_one(
    bob: User, queue: Queue, other_queue: Queue, route_file: Callable[[str], Path]
) -> None:
    messages = []
    for target in ("payments", "nowhere"):
        path = route_file(target)
        with pytest.raises(CommandError) as refused:
            call_command("import_rules", "other", str(path), "--as", "bob")
        message = str(refused.value)
        assert message.startswith(f"{path}: ")  # the file is named; the rest must not tell the two apart
        messages.append(message.removeprefix(f"{path}: "))
    assert messages[0] == messages[1]
    assert f"rules[0].queue: {ROUTE_TARGET}" in messages[0]
    assert not AnswerRule.objects.exists()
    with pytest.raises(CommandError, match="no queue of that name that bob supervises"):
        call_command("import_rules", "payments", str(route_file("other")), "--as", "bob")
    assert not AnswerRule.objects.exists()


def test_import_rules_as_the_operator_routes_anywhere_that_exists(
    queue: Queue, other_queue: Queue, route_file: Callable[[str], Path]
) -> None:
    with pytest.raises(CommandError) as refused:
        call_command("import_rules", "other", str(route_file("nowhere")))
    assert f"rules[0].queue: {ROUTE_TARGET}" in str(refused.value)
    call_command("import_rules", "other", str(route_file("payments")))
    assert AnswerRule.objects.get(queue=other_queue).route_to == queue


def test_the_storage_functions_check_the_user_they_are_given(
    bob: User, queue: Queue, other_queue: Queue
) -> None:
    with pytest.raises(InvalidInput) as refused:
        rules.replace_policy(other_queue, file_with(ROUTE_TO_PAYMENTS), user=bob)
    assert refused.value.fields == {"rules[0].queue": ROUTE_TARGET}
    rule = rules.add_rule(other_queue, {"name": "plain", "match": {}, "action": "decline"}, user=bob)
    with pytest.raises(InvalidInput):
        rules.update_rule(rule, ROUTE_TO_PAYMENTS, user=bob)


# --- at intake --------------------------------------------------------------------------------------------------


@pytest.fixture
def agent_b(make_agent: Callable[..., tuple[Agent, str]], other_queue: Queue) -> tuple[Agent, str]:
    """Team B's agent: its key posts to `other` only."""
    return make_agent("agent-b", other_queue)


def post_as(key: str, **body: Any) -> Any:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client.post(
        "/api/v1/requests",
        json.dumps({"queue": "other", "message": "Refund 40 EUR?", "requestedSchema": FORM_SCHEMA, **body}),
        content_type="application/json",
    )


def test_a_stored_route_into_a_queue_the_agent_may_not_post_to_leaves_the_request_with_a_person(
    agent_b: tuple[Agent, str], queue: Queue, other_queue: Queue
) -> None:
    # Saved by the operator (or before writers were checked): the rule exists; intake must still refuse it.
    rules.replace_policy(
        other_queue,
        file_with(ROUTE_TO_PAYMENTS, {"name": "everything else", "match": {}, "action": "decline"}),
    )

    created = post_as(agent_b[1])

    assert created.status_code == 201, created.json()
    request = ElicitationRequest.objects.get(pk=created.json()["id"])
    assert (request.queue, request.status) == (other_queue, "pending")  # the decline after it never ran
    assert not ElicitationRequest.objects.filter(queue=queue).exists()
    skipped = RequestEvent.objects.get(request=request, kind="rule_skipped")
    assert skipped.detail["rule"]["name"] == "to A"
    assert skipped.detail["reason"].startswith("route refused: this agent may not post to queue 'payments'")
    assert not RequestEvent.objects.filter(request=request, kind="routed").exists()


def test_the_route_applies_when_the_agent_may_post_to_the_target(
    agent_b: tuple[Agent, str], queue: Queue, other_queue: Queue
) -> None:
    agent_b[0].queues.add(queue)
    rules.replace_policy(other_queue, file_with(ROUTE_TO_PAYMENTS))
    request = ElicitationRequest.objects.get(pk=post_as(agent_b[1]).json()["id"])
    assert request.queue == queue
    assert RequestEvent.objects.filter(request=request, kind="routed").exists()


def test_a_scripted_queue_declines_with_the_refusal_as_its_reason(
    agent_b: tuple[Agent, str], queue: Queue, other_queue: Queue
) -> None:
    rules.replace_policy(
        other_queue, {"mode": "scripted", "unmatched": "decline", "rules": [ROUTE_TO_PAYMENTS]}
    )
    request = ElicitationRequest.objects.get(pk=post_as(agent_b[1]).json()["id"])
    assert (request.queue, request.status, request.action) == (other_queue, "completed", "decline")
    reason = request.result_meta["reviewhub/decision"]["reason"]
    assert reason.startswith("route refused")
