"""The decision in the reviewer's words (presenters.outcome) and the folded "Viewed" rows of the audit list."""

from typing import Any

from django.test import Client
from django.urls import reverse

from elicitation.models import RequestEvent
from elicitation.queue import audit, transitions
from elicitation.reviewer import presenters

SURVEY: dict[str, Any] = {
    "type": "object",
    "properties": {
        "env": {"type": "string", "title": "Environment", "enum": ["prod", "staging"]},
        "rows": {"type": "integer", "title": "Rows"},
    },
    "required": ["env", "rows"],
}


def _answer(make_request: Any, reviewer: Any, action: str, content: Any = None, **fields: Any) -> Any:
    request = make_request(**fields)
    transitions.claim_request(request.pk, user=reviewer)
    return transitions.respond(request.pk, user=reviewer, action=action, content=content)


def test_no_to_an_approval_is_rejected_although_the_agent_received_accept(make_request, reviewer) -> None:
    rejected = _answer(make_request, reviewer, "accept", {"approve": False})
    assert rejected.action == "accept"
    assert presenters.outcome(rejected) == presenters.Outcome("Rejected", "rejected")
    approved = _answer(make_request, reviewer, "accept", {"approve": True, "note": "ok"})
    assert presenters.outcome(approved) == presenters.Outcome("Approved", "approved")


def test_declined_cancelled_and_open_requests_keep_their_words(make_request, reviewer) -> None:
    assert presenters.outcome(_answer(make_request, reviewer, "decline")).label == "Declined"
    assert presenters.outcome(_answer(make_request, reviewer, "cancel")).label == "Cancelled"
    assert presenters.outcome(make_request()) is None


def test_other_forms_show_their_answers_short(make_request, reviewer) -> None:
    answered = _answer(make_request, reviewer, "accept", {"env": "prod", "rows": 3}, requested_schema=SURVEY)
    assert presenters.outcome(answered) == presenters.Outcome("prod · 3", "answered")


def test_only_a_form_whose_one_required_question_is_a_boolean_is_an_approval() -> None:
    boolean = {"id": "ok", "kind": "boolean", "title": "", "description": "", "required": True}
    note = {"id": "note", "kind": "text", "title": "", "description": "", "required": False}
    assert presenters.approval_question([boolean, note]) is not None
    assert presenters.approval_question([boolean, {**note, "required": True}]) is None
    assert presenters.approval_question([{**boolean, "required": False}]) is None


def test_history_shows_the_answer_column(make_request, reviewer) -> None:
    _answer(make_request, reviewer, "accept", {"approve": False}, message="Drop the production orders table?")
    client = Client()
    client.force_login(reviewer)
    page = client.get(reverse("history")).content.decode()
    assert 'data-outcome="rejected">Rejected<' in page
    assert "completed: accept" not in page


def test_repeated_views_by_one_person_fold_into_one_row_and_the_trail_is_untouched(
    make_request, reviewer, make_reviewer, queue, clock
) -> None:
    bob = make_reviewer("bob", queue)
    request = make_request()
    for _ in range(4):
        audit.record_view(request, user=reviewer)
        clock.advance(minutes=1)
    audit.record_view(request, user=bob)
    audit.record_view(request, user=reviewer)
    events = list(request.events.select_related("actor_user", "actor_agent").order_by("id"))
    rows = presenters.trail_rows(events)
    whats = [(row.what.split(",")[0], row.who) for row in rows]
    assert whats == [
        ("Created by the agent", f"agent {request.agent.name}"),
        (f"Viewed {presenters.TIMES}4", "alice"),
        ("Viewed", "bob"),
        ("Viewed", "alice"),
    ]
    assert rows[1].what.endswith(f"last {events[4].at:%H:%M} UTC")
    assert RequestEvent.objects.filter(request=request, kind="viewed").count() == 6
