"""Audit trail: tamper detection by `verify_audit`, and exports that read back to the same rows."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db.models import ProtectedError

from elicitation.models import ElicitationRequest, RequestEvent
from elicitation.queue import audit, transitions
from tests.ops.audit_exports import read_csv, read_jsonl


@pytest.fixture
def history(make_request, reviewer, clock) -> ElicitationRequest:
    """A request with a six-row chain (created, claimed, viewed, released, claimed, completed), and another."""
    request = make_request(message='Approve "=HYPERLINK(evil)", café?')
    transitions.claim_request(request.pk, user=reviewer)
    audit.record_view(request, user=reviewer)
    clock.advance(seconds=5)
    transitions.release_claim(request.pk, user=reviewer)
    transitions.claim_request(request.pk, user=reviewer)
    transitions.respond(request.pk, user=reviewer, action="decline")
    make_request()  # a second, untouched chain
    return request


def _verify() -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("verify_audit", stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue()
    return 0, out.getvalue()


def test_an_untouched_audit_verifies(history) -> None:
    code, out = _verify()
    assert code == 0
    assert "intact" in out


def test_a_reviewer_or_agent_in_the_audit_cannot_be_deleted_so_the_chain_stays_verifiable(
    history, reviewer, agent
) -> None:
    with pytest.raises(ProtectedError):
        reviewer.delete()
    with pytest.raises(ProtectedError):
        agent.delete()

    reviewer.is_active = False  # what an operator does instead
    reviewer.save()
    assert _verify()[0] == 0


def test_an_edited_row_is_reported_with_its_id(history) -> None:
    row = history.events.get(kind="completed")
    RequestEvent.objects.filter(pk=row.pk).update(detail={"action": "accept"})

    code, out = _verify()

    assert code == 1
    assert f"row {row.pk}: edited" in out
    assert out.count("edited") == 1


def test_an_edit_with_a_recomputed_hash_is_caught_by_the_next_row(history) -> None:
    row = history.events.get(kind="viewed")
    row.actor_user = None
    row.hash = audit.audit_row_hash(row)
    row.save()
    following = history.events.filter(pk__gt=row.pk).order_by("id").first()

    code, out = _verify()

    assert code == 1
    assert f"row {following.pk}: missing-or-reordered" in out


def test_a_deleted_middle_row_is_reported_at_the_row_after_it(history) -> None:
    rows = list(history.events.order_by("id"))
    RequestEvent.objects.filter(pk=rows[2].pk).delete()

    code, out = _verify()

    assert code == 1
    assert f"row {rows[3].pk}: missing-or-reordered" in out
    assert str(history.pk) in out


def test_reordered_rows_are_reported(history) -> None:
    first, second = list(history.events.order_by("id"))[1:3]
    # Swap the two rows' contents (ids stay): the chain no longer runs in id order.
    for field in ("kind", "actor_type", "actor_user_id", "from_status", "to_status", "detail", "at"):
        a, b = getattr(first, field), getattr(second, field)
        setattr(first, field, b)
        setattr(second, field, a)
    first.prev_hash, second.prev_hash = second.prev_hash, first.prev_hash
    first.hash, second.hash = second.hash, first.hash
    first.save()
    second.save()

    code, out = _verify()
    assert code == 1
    assert f"row {first.pk}: missing-or-reordered" in out


def test_a_deleted_first_row_is_reported(history) -> None:
    first = history.events.order_by("id").first()
    first.delete()
    code, out = _verify()
    assert code == 1
    assert "missing-or-reordered" in out


def test_a_truncated_chain_end_is_reported(history) -> None:
    history.events.order_by("-id").first().delete()
    code, out = _verify()
    assert code == 1
    assert f"request {history.pk} end of chain: truncated" in out


def test_verify_can_check_one_request(history) -> None:
    other = ElicitationRequest.objects.exclude(pk=history.pk).get()
    RequestEvent.objects.filter(request=history).update(kind="tampered")
    problems = list(audit.verify_chains([other.pk]))
    assert problems == []


def _export(fmt: str, *extra: str) -> str:
    out = StringIO()
    call_command("export_audit", "--format", fmt, *extra, stdout=out)
    return out.getvalue()


def test_csv_and_jsonl_exports_read_back_to_the_database_rows(history) -> None:
    expected = list(audit.export_rows(audit.audit_events()))

    from_jsonl = read_jsonl(_export("jsonl"))
    from_csv = read_csv(_export("csv"))

    assert len(expected) == RequestEvent.objects.count() == 7
    assert from_jsonl == expected
    assert from_csv == expected
    assert from_jsonl[1]["actor_user"] == "alice"
    assert from_jsonl[0]["actor_agent"] == "agent-a"


def test_the_csv_export_cannot_smuggle_spreadsheet_formulas(make_request, agent) -> None:
    request = make_request()
    audit.record_event(request, "=cmd|' /C calc'!A0", actor_agent=agent)
    text = _export("csv")
    assert "\n=cmd" not in text and ",=cmd" not in text
    assert read_csv(text)[-1]["kind"] == "=cmd|' /C calc'!A0"


def test_export_since_keeps_only_later_events(history, make_request, clock) -> None:
    clock.advance(days=1)
    cutoff = clock.current
    late = make_request(message="late")
    rows = read_jsonl(_export("jsonl", "--since", cutoff.isoformat()))
    assert [row["request_id"] for row in rows] == [str(late.pk)]
    assert rows[0]["kind"] == "created"


def test_export_writes_a_file(history, tmp_path) -> None:
    target = tmp_path / "audit.jsonl"
    call_command("export_audit", "--format", "jsonl", "--output", str(target), stderr=StringIO())
    lines = target.read_text().splitlines()
    assert len(lines) == 7
    assert json.loads(lines[0])["kind"] == "created"


def test_export_rejects_a_bad_since(db) -> None:
    with pytest.raises(CommandError, match="not an ISO date"):
        _export("csv", "--since", "yesterday")
