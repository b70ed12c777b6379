"""An accepted answer that leaves out a question with a default gets the default, whichever surface sent it; a
question the reviewer explicitly skipped stays out."""

from typing import Any

import pytest
from django.contrib.auth.models import User

from elicitation.models import Agent, Draft, DraftState, Queue
from elicitation.queue import transitions

pytestmark = pytest.mark.django_db

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve?"},
        "note": {"type": "string", "title": "Note", "default": "none"},
        "env": {"type": "string", "enum": ["staging", "production"], "default": "staging"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}, "default": ["a"]},
        "count": {"type": "integer", "minimum": 1, "default": 2},
    },
    "required": ["approve"],
}


def claimed(agent: Agent, queue: Queue, reviewer: User) -> Any:
    request, _ = transitions.create_request(
        agent=agent, queue_slug=queue.slug, message="Go?", mode="form", requested_schema=SCHEMA
    )
    transitions.claim_request(request.pk, user=reviewer)
    return request


def test_an_answer_without_the_defaulted_fields_gets_their_defaults(
    agent: Agent, queue: Queue, reviewer: User
) -> None:
    request = claimed(agent, queue, reviewer)
    done = transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    assert done.content == {"approve": True, "note": "none", "env": "staging", "tags": ["a"], "count": 2}


def test_an_answer_that_sets_a_defaulted_field_keeps_its_own_value(
    agent: Agent, queue: Queue, reviewer: User
) -> None:
    request = claimed(agent, queue, reviewer)
    done = transitions.respond(
        request.pk, user=reviewer, action="accept", content={"approve": False, "env": "production"}
    )
    assert done.content["env"] == "production"
    assert done.content["note"] == "none"


def test_a_question_the_reviewer_skipped_stays_omitted(agent: Agent, queue: Queue, reviewer: User) -> None:
    request = claimed(agent, queue, reviewer)
    Draft.objects.create(request=request, question_id="note", value=None, state=DraftState.SKIPPED)
    done = transitions.respond(request.pk, user=reviewer, action="accept", content={"approve": True})
    assert "note" not in done.content
    assert done.content["env"] == "staging"


def test_decline_carries_no_defaults(agent: Agent, queue: Queue, reviewer: User) -> None:
    request = claimed(agent, queue, reviewer)
    done = transitions.respond(request.pk, user=reviewer, action="decline")
    assert done.content is None
