"""What intake costs, pinned: the statements one create runs (an honest guard against N+1), the queue a key may
post to read with what intake needs of it in one query, and the hand-built SQL on the hot path (the agent of a
key, the request and audit INSERTs) reading and writing exactly what the ORM would, the two rows stored together
or not at all. Validation errors keep their field and reason, and serializers bind fields of their own."""

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, connection, transaction
from django.forms.models import model_to_dict
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework import serializers
from rest_framework.test import APIClient

from elicitation.api import serializers as s
from elicitation.delivery import reach_receivers
from elicitation.models import (
    Agent,
    Channel,
    ElicitationRequest,
    Queue,
    QueuePolicy,
    ReachRule,
    RequestEvent,
)
from elicitation.queue import accounts, audit, keys, prebuilt_sql, rules, transitions
from tests.conftest import FORM_SCHEMA

pytestmark = pytest.mark.django_db

BODY = {"message": "Approve transfer of 100 EUR?", "mode": "form", "requestedSchema": FORM_SCHEMA}


def post(client: APIClient, **body: Any) -> Any:
    return client.post("/api/v1/requests", {**BODY, "queue": "payments", **body}, format="json")


def concrete_values(instance: Any) -> dict[str, Any]:
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


# --- statements per create ------------------------------------------------------------------------------------


def test_a_create_runs_five_statements_inside_a_transaction_and_reads_no_audit_head(
    agent_client: APIClient, django_assert_num_queries: Any
) -> None:
    """The agent (by key prefix), the queue the body names with its policy and its arrival reach, the request and
    audit INSERTs (one statement on PostgreSQL, two elsewhere; a create chains to nothing, so no head read), inside
    a savepoint, since the caller (here the test) holds a transaction."""
    one_statement = prebuilt_sql.inserts_in_one_statement()
    with django_assert_num_queries(5 if one_statement else 6) as captured:
        response = post(agent_client)
    assert response.status_code == 201, response.json()
    statements = [query["sql"].upper() for query in captured.captured_queries]
    writes = [sql for sql in statements if sql.startswith(("INSERT", "WITH"))]
    assert len(writes) == (1 if one_statement else 2)
    assert any('"ELICITATION_ELICITATIONREQUEST"' in sql for sql in writes)
    assert any('"ELICITATION_REQUESTEVENT"' in sql for sql in writes)
    selects = [sql for sql in statements if sql.startswith("SELECT")]
    assert len(selects) == 2
    assert any('FROM "ELICITATION_AGENT"' in sql for sql in selects)
    assert any('FROM "ELICITATION_QUEUE"' in sql and '"ELICITATION_QUEUEPOLICY"' in sql for sql in selects)
    assert not any('FROM "ELICITATION_REQUESTEVENT"' in sql for sql in selects)
    event = RequestEvent.objects.get(request_id=response.json()["id"])
    assert (event.kind, event.prev_hash, event.to_status) == ("created", "", "pending")
    assert list(audit.verify_chains([event.request_id])) == []


@pytest.mark.django_db(transaction=True)
def test_a_create_on_its_own_needs_no_begin_or_commit_on_postgresql(
    agent_client: APIClient, django_assert_num_queries: Any
) -> None:
    """Outside any transaction, PostgreSQL writes both rows in one statement, atomic on its own: three round trips
    in all, the key's read, the queue's read and the write. Elsewhere the two INSERTs run between BEGIN and COMMIT."""
    one_statement = prebuilt_sql.inserts_in_one_statement()
    with django_assert_num_queries(3 if one_statement else 6) as captured:
        response = post(agent_client)
    assert response.status_code == 201, response.json()
    statements = [query["sql"].upper() for query in captured.captured_queries]
    opened_a_transaction = any(sql.startswith(("BEGIN", "SAVEPOINT")) for sql in statements)
    assert opened_a_transaction is not one_statement
    request = ElicitationRequest.objects.get(pk=response.json()["id"])
    event = RequestEvent.objects.get(request=request)
    assert (event.kind, event.actor_agent_id, event.to_status) == ("created", request.agent_id, "pending")
    assert list(audit.verify_chains([request.pk])) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("rule", "transaction_opened"), [("another tool", False), ("this tool", True)])
def test_a_policy_opens_a_transaction_only_when_a_rule_writes_more(
    agent_client: APIClient, queue: Queue, rule: str, transaction_opened: bool
) -> None:
    """A request the queue's rules leave for a person, as it came, is stored like any other (one statement on
    PostgreSQL); a rule that decides writes its decision in the same transaction as the request."""
    tool = "deploy" if rule == "this tool" else "rollback"
    rules.replace_policy(queue, {"rules": [{"name": rule, "match": {"tool": tool}, "action": "decline"}]})
    context = {"mcp": {"server": "ci", "tool": "deploy", "arguments": {}}}
    response = post(agent_client, context=context)
    assert response.status_code == 201, response.json()
    with CaptureQueriesContext(connection) as captured:
        response = post(agent_client, context=context)
    assert response.status_code == 201, response.json()
    assert response.json()["status"] == ("completed" if transaction_opened else "pending")
    statements = [query["sql"].upper() for query in captured.captured_queries]
    opened = any(sql.startswith(("BEGIN", "SAVEPOINT")) for sql in statements)
    assert opened is (transaction_opened or not prebuilt_sql.inserts_in_one_statement())
    if not opened:  # the key's read, the queue's read (its policy with it) and the write
        assert len(statements) == 3, statements


@pytest.mark.django_db(transaction=True)
def test_a_request_and_its_audit_row_are_stored_together_or_not_at_all(agent: Agent, queue: Queue) -> None:
    """The audit row points at an agent that does not exist: the request row must not be stored without it."""
    request = ElicitationRequest(
        queue=queue, agent=agent, message="m", mode="form", deadline=timezone.now() + timedelta(hours=1)
    )
    orphan = audit.new_event(request, "created", prev_hash="", to_status="pending")
    orphan.actor_agent_id = agent.pk + 1000
    with pytest.raises(IntegrityError):
        if prebuilt_sql.inserts_in_one_statement():
            prebuilt_sql.insert_together(request, orphan)
        else:
            with transaction.atomic():
                prebuilt_sql.insert_together(request, orphan)
    assert not ElicitationRequest.objects.filter(pk=request.pk).exists()
    assert not RequestEvent.objects.exists()
    assert transitions.create_request(
        agent=agent, queue_slug=queue.slug, message="m", mode="url", url="https://a.example/x"
    )[1]


def test_inserted_rows_read_back_as_the_orm_would_have_saved_them(agent: Agent, queue: Queue) -> None:
    context = {"note": "ünïcode ✓", "nested": [1, 2.5, None, True], "quote": 'it\'s "x"'}
    request = ElicitationRequest(
        queue=queue,
        agent=agent,
        message="m",
        mode="form",
        requested_schema=FORM_SCHEMA,
        context=context,
        priority=-7,
        deadline=timezone.now() + timedelta(hours=1),
    )
    event = audit.new_event(request, "created", actor_agent=agent, prev_hash="", to_status="pending")
    prebuilt_sql.insert_together(request, event)
    assert not request._state.adding and event.pk is not None
    assert request.created_at is not None  # auto_now_add filled, as save() fills it
    stored = ElicitationRequest.objects.get(pk=request.pk)
    assert concrete_values(stored) == concrete_values(request)
    assert stored.context == context and stored.requested_schema == FORM_SCHEMA
    assert model_to_dict(RequestEvent.objects.get(pk=event.pk)) == model_to_dict(event)


def test_a_request_already_taken_is_an_integrity_error_and_the_first_row_stays(
    make_request: Any, agent: Agent
) -> None:
    first = make_request(message="first")
    again = ElicitationRequest(
        pk=first.pk, queue=first.queue, agent=agent, message="second", deadline=first.deadline
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        prebuilt_sql.insert_together(again, audit.new_event(again, "created", prev_hash=""))
    assert ElicitationRequest.objects.get(pk=first.pk).message == "first"


# --- the queue a key may post to ----------------------------------------------------------------------------------


def test_postable_queue_loads_its_policy_in_its_one_query_with_and_without_one(
    agent: Agent, queue: Queue, other_queue: Queue, django_assert_num_queries: Any
) -> None:
    agent.queues.add(other_queue)
    policy = QueuePolicy.objects.create(queue=queue, quorum={"approvals": 2, "note": "ünï"}, round_cap=3)
    with django_assert_num_queries(1):
        loaded = transitions.postable_queue(agent.pk, "payments")
    assert loaded is not None and loaded.pk == queue.pk
    with django_assert_num_queries(0):
        loaded_policy = rules.queue_policy(loaded)
        assert loaded_policy is not None
        assert loaded_policy.queue is loaded
    assert concrete_values(loaded_policy) == concrete_values(policy)
    assert loaded_policy.quorum == {"approvals": 2, "note": "ünï"}

    with django_assert_num_queries(1):
        without = transitions.postable_queue(agent.pk, "other")
    assert without is not None
    with django_assert_num_queries(0):
        assert rules.queue_policy(without) is None
    assert concrete_values(without) == concrete_values(Queue.objects.get(slug="other"))


def test_postable_queue_refuses_queues_the_agent_may_not_post_to(
    agent: Agent, other_queue: Queue, make_agent: Any
) -> None:
    assert transitions.postable_queue(agent.pk, "other") is None
    assert transitions.postable_queue(agent.pk, "no-such-queue") is None
    stranger, _ = make_agent("stranger", other_queue)
    assert transitions.postable_queue(stranger.pk, "payments") is None


def test_posting_to_a_queue_of_another_agent_is_a_400_naming_queue(
    agent_client: APIClient, other_queue: Queue
) -> None:
    response = post(agent_client, queue="other")
    assert response.status_code == 400
    assert response.json()["fields"] == {"queue": "unknown queue, or not one this key may post to"}
    assert ElicitationRequest.objects.count() == 0


# --- the agent of a key ---------------------------------------------------------------------------------------


def test_the_agent_of_a_key_is_the_row_the_orm_reads(agent_with_key: tuple[Agent, str]) -> None:
    agent, key = agent_with_key
    Agent.objects.filter(pk=agent.pk).update(scopes=["requests", "flows"], callback_url="https://a.example/h")
    found = keys.agent_for_key(key)
    assert found is not None
    assert concrete_values(found) == concrete_values(Agent.objects.get(pk=agent.pk))
    assert found.scopes == ["requests", "flows"]


def test_no_agent_for_a_wrong_revoked_or_unknown_key(agent_with_key: tuple[Agent, str]) -> None:
    agent, key = agent_with_key
    prefix = keys.split_prefix(key, "rh")
    assert keys.agent_for_key(f"rh_{prefix}_not-the-secret") is None
    assert keys.agent_for_key("rh_00000000_whatever") is None
    accounts.revoke_agent(agent)
    assert keys.agent_for_key(key) is None


@pytest.mark.parametrize(
    ("body", "content_type", "status", "field"),
    [
        (b'{"queue": "payments", "message": ', "application/json", 400, None),  # not JSON: the parser says so
        (b'{"queue": "pay\\ud800", "message": "m"}', "application/json", 400, None),  # a lone surrogate
        (
            b'{"queue": "other", "message": "m", "mode": "url", "url": "https://a.example/"}',
            "application/json",
            400,
            "queue",
        ),
        (b'["payments"]', "application/json", 400, None),
        (b"queue=payments", "application/x-www-form-urlencoded", 415, None),
    ],
)
def test_a_good_key_with_a_bad_body_gets_the_body_error_and_stores_nothing(
    agent_client: APIClient, body: bytes, content_type: str, status: int, field: str | None
) -> None:
    response = agent_client.generic("POST", "/api/v1/requests", body, content_type=content_type)
    assert response.status_code == status, response.content
    if field is not None:
        assert field in response.json()["fields"]
    assert ElicitationRequest.objects.count() == 0


def test_a_bad_key_is_a_401_before_its_body_is_judged(agent: Agent) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer rh_00000000_nobody")
    assert (
        client.generic("POST", "/api/v1/requests", b"{not json", content_type="application/json").status_code
        == 401
    )
    response = post(client)
    assert response.status_code == 401
    assert response.json()["detail"] == "Invalid or revoked agent key."


# --- the audit INSERT -----------------------------------------------------------------------------------------


def test_an_audit_row_is_stored_as_the_orm_would_and_its_chain_verifies(
    make_request: Any, agent: Agent, reviewer: Any
) -> None:
    request = make_request()
    detail = {"note": "ünïcode ✓", "nested": {"list": [1, 2.5, None, True]}, "quote": 'it\'s "x"'}
    event = audit.record_event(request, "noted", actor_user=reviewer, from_status="pending", detail=detail)
    assert event.pk is not None
    assert not event._state.adding
    stored = RequestEvent.objects.get(pk=event.pk)
    assert model_to_dict(stored) == model_to_dict(event)
    assert stored.at == event.at
    assert stored.detail == detail
    assert stored.prev_hash == RequestEvent.objects.filter(request=request).order_by("id").first().hash  # type: ignore[union-attr]
    assert list(audit.verify_chains([request.pk])) == []


def test_an_edited_audit_row_is_still_caught(make_request: Any) -> None:
    request = make_request()
    event = audit.record_event(request, "noted", detail={"n": 1})
    RequestEvent.objects.filter(pk=event.pk).update(detail={"n": 2})
    assert [problem.problem for problem in audit.verify_chains([request.pk])] == ["edited"]


# --- who is reached on arrival ----------------------------------------------------------------------------------


def test_the_arrival_check_counts_only_tier_0_rules_off_the_browser(queue: Queue, other_queue: Queue) -> None:
    assert not reach_receivers._has_rules(queue.pk, 0)
    ReachRule.objects.create(queue=queue, tier=0, channel=Channel.BROWSER)
    ReachRule.objects.create(queue=queue, tier=1, channel=Channel.EMAIL)
    ReachRule.objects.create(queue=other_queue, tier=0, channel=Channel.EMAIL)
    assert not reach_receivers._has_rules(queue.pk, 0)
    assert reach_receivers._has_rules(queue.pk, 1)
    ReachRule.objects.create(queue=queue, tier=0, channel=Channel.EMAIL)
    assert reach_receivers._has_rules(queue.pk, 0)


def test_a_queue_read_for_a_create_says_whether_an_arrival_reaches_anyone(
    agent: Agent, queue: Queue, other_queue: Queue
) -> None:
    ReachRule.objects.create(queue=queue, tier=0, channel=Channel.BROWSER)
    ReachRule.objects.create(queue=queue, tier=1, channel=Channel.EMAIL)
    ReachRule.objects.create(queue=other_queue, tier=0, channel=Channel.EMAIL)
    assert transitions.postable_queue(agent.pk, queue.slug).arrival_reach is False  # type: ignore[union-attr]
    ReachRule.objects.create(queue=queue, tier=0, channel=Channel.SLACK)
    loaded = transitions.postable_queue(agent.pk, queue.slug)
    assert loaded is not None and loaded.arrival_reach is True  # type: ignore[attr-defined]


# --- validation keeps its field and reason --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"message": ""}, {"message": "This field may not be blank."}),
        ({"mode": "telepathy"}, {"mode": '"telepathy" is not a valid choice.'}),
        ({"priority": 5000}, {"priority": "Ensure this value is less than or equal to 1000."}),
        ({"expiresIn": 0}, {"expiresIn": "Ensure this value is greater than or equal to 1."}),
        ({"surprise": 1}, {"surprise": "unknown field"}),
        ({"url": "https://example.com"}, {"url": "only allowed in url mode"}),
        (
            {"queue": "not a slug!"},
            {"queue": 'Enter a valid "slug" consisting of letters, numbers, underscores or hyphens.'},
        ),
    ],
)
def test_envelope_errors_name_the_field_and_the_reason(
    agent_client: APIClient, body: dict[str, Any], fields: dict[str, str]
) -> None:
    response = post(agent_client, **body)
    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == fields
    assert ElicitationRequest.objects.count() == 0


def test_schema_errors_name_the_json_path_and_the_reason(agent_client: APIClient) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "string"}, "bad": {"type": "object"}}}
    response = post(agent_client, requestedSchema=schema)
    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == {
        "requestedSchema.properties.bad.type": "nested objects are not supported"
    }
    assert ElicitationRequest.objects.count() == 0


def test_the_key_lookup_runs_before_anything_is_stored(django_assert_num_queries: Any, agent: Agent) -> None:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer rh_00000000_nobody")
    with django_assert_num_queries(1):
        assert post(client).status_code == 401
    assert ElicitationRequest.objects.count() == 0


# --- serializers copy their declared fields shallowly ---------------------------------------------------------


class DeepCopiedRequest(s.RequestSerializer):
    def get_fields(self) -> dict[str, Any]:
        return serializers.Serializer.get_fields(self)  # DRF's own: a deep copy of every declared field


class DeepCopiedCreate(s.CreateRequestSerializer):
    def get_fields(self) -> dict[str, Any]:
        return serializers.Serializer.get_fields(self)


def test_each_serializer_binds_fields_of_its_own_and_says_what_drf_would(make_request: Any) -> None:
    request = make_request()
    first, second = s.RequestSerializer(request), s.RequestSerializer(request)
    for name, field in first.fields.items():
        assert field is not second.fields[name]
        assert field is not s.RequestSerializer._declared_fields[name]
        assert field.parent is first and second.fields[name].parent is second
    assert first.data == DeepCopiedRequest(request).data
    assert s.RequestSerializer._declared_fields["overdue"].parent is None  # declared fields stay unbound


@pytest.mark.parametrize(
    "body",
    [
        {**BODY, "queue": "payments", "priority": 3, "context": {"k": "v"}},
        {**BODY, "queue": "not a slug!", "message": "", "priority": 5000, "surprise": 1},
        {"queue": "payments", "message": "m", "mode": "url", "url": "javascript:alert(1)"},
    ],
)
def test_validation_with_shallow_copies_matches_drf(body: dict[str, Any]) -> None:
    ours, drfs = s.CreateRequestSerializer(data=body), DeepCopiedCreate(data=body)
    assert ours.is_valid() == drfs.is_valid()
    assert ours.errors == drfs.errors
    assert (ours.validated_data if not ours.errors else None) == (
        drfs.validated_data if not drfs.errors else None
    )
