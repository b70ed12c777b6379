"""What answering costs, pinned: the request a transition locks (and a reviewer action reads) comes from SQL built
once per process, and must read exactly what `select_related` read, holder or none; an answer asks nothing about
Slack when no Slack bot is configured."""

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from elicitation.models import Channel, ElicitationRequest, Notice, RequestEvent
from elicitation.queue import prebuilt_sql, transitions
from elicitation.queue.transitions.path import reload_request

pytestmark = pytest.mark.django_db

RELATED = ("queue", "agent", "claimed_by")


def concrete_values(instance: Any) -> dict[str, Any]:
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


def orm_read(request_id: Any) -> ElicitationRequest:
    return ElicitationRequest.objects.select_related(*RELATED).get(pk=request_id)


def assert_reads_as_the_orm(loaded: ElicitationRequest, django_assert_num_queries: Any) -> None:
    orm = orm_read(loaded.pk)
    assert concrete_values(loaded) == concrete_values(orm)
    with django_assert_num_queries(0):  # the related rows came with it
        assert concrete_values(loaded.queue) == concrete_values(orm.queue)
        assert concrete_values(loaded.agent) == concrete_values(orm.agent)
        holder = loaded.claimed_by
    assert (holder and concrete_values(holder)) == (orm.claimed_by and concrete_values(orm.claimed_by))


def test_a_claimed_request_is_locked_with_its_queue_agent_holder_and_audit_head(
    make_request: Any, reviewer: Any, django_assert_num_queries: Any
) -> None:
    request = transitions.claim_request(make_request().pk, user=reviewer)
    with django_assert_num_queries(1):
        locked = transitions.lock_request(request.pk)
    assert locked is not None
    assert locked.claimed_by_id == reviewer.pk
    assert_reads_as_the_orm(locked, django_assert_num_queries)
    latest = RequestEvent.objects.filter(request_id=request.pk).latest("id")
    assert latest.kind == "claimed"
    assert locked.audit_head == latest.hash != ""


def test_an_unclaimed_request_reads_no_holder_and_one_without_audit_rows_chains_to_nothing(
    make_request: Any, django_assert_num_queries: Any
) -> None:
    request = make_request()
    RequestEvent.objects.filter(request_id=request.pk).delete()
    with django_assert_num_queries(2):
        locked = transitions.lock_request(request.pk)
        reloaded = reload_request(request.pk)
    assert locked is not None
    with django_assert_num_queries(0):
        assert locked.claimed_by is None
        assert reloaded.claimed_by is None
    assert locked.audit_head == ""
    assert_reads_as_the_orm(locked, django_assert_num_queries)
    assert_reads_as_the_orm(reloaded, django_assert_num_queries)


def test_no_such_request_is_none_locked_and_does_not_exist_when_read(make_request: Any) -> None:
    missing = "00000000-0000-4000-8000-000000000000"
    assert transitions.lock_request(missing) is None  # type: ignore[arg-type]
    with pytest.raises(ElicitationRequest.DoesNotExist):
        reload_request(missing)  # type: ignore[arg-type]


def test_the_lock_is_taken_on_the_request_row_only() -> None:
    sql = prebuilt_sql._with_related_sql(ElicitationRequest, RELATED, (), True, connection.vendor)
    if connection.features.has_select_for_update_of:
        assert sql.endswith(f"FOR UPDATE OF {connection.ops.quote_name(ElicitationRequest._meta.db_table)}")
    else:  # SQLite: writers are serialised by the database itself, as select_for_update leaves it
        assert "FOR UPDATE" not in sql


@pytest.mark.parametrize("token", ["", "xoxb-configured"])
def test_an_answer_asks_about_slack_messages_only_when_slack_is_configured(
    token: str, settings: Any, make_request: Any, reviewer: Any
) -> None:
    settings.SLACK_BOT_TOKEN = token
    request = transitions.claim_request(make_request().pk, user=reviewer)
    Notice.objects.create(
        request=request,
        channel=Channel.SLACK,
        recipient="slack:C1",
        slack_channel="C1",
        created_at=timezone.now(),
    )
    loaded = reload_request(request.pk)
    with CaptureQueriesContext(connection) as captured:
        transitions.respond(request.pk, user=reviewer, action="decline", loaded=loaded)
    asked = [query["sql"] for query in captured.captured_queries if Notice._meta.db_table in query["sql"]]
    assert len(asked) == (1 if token else 0)
    assert ElicitationRequest.objects.get(pk=request.pk).status == "completed"
