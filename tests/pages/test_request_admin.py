"""The admin's request list and detail read as a person would: message excerpt, queue, agent, status, age; the
questions and the result as tables, agent text escaped."""

import pytest
from django.test import Client

from elicitation.queue import transitions

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff_client(make_reviewer, queue) -> Client:
    user = make_reviewer("root", queue)
    user.is_staff = True
    user.is_superuser = True
    user.save()
    client = Client()
    client.force_login(user)
    return client


def test_the_request_list_shows_excerpt_queue_agent_status_and_age(
    staff_client, make_request, queue, agent
) -> None:
    make_request(
        message="Approve the <b>transfer</b> of 100 EUR to ACME GmbH for invoice 2024-117, please " * 3
    )
    html = staff_client.get("/admin/elicitation/elicitationrequest/").content.decode()
    assert "Approve the &lt;b&gt;transfer&lt;/b&gt; of 100 EUR" in html and "…" in html
    for heading in ("Message", "Queue", "Agent", "Status", "Age"):
        assert f">{heading}<" in html or f">{heading}</a>" in html
    assert queue.slug in html and agent.name in html and "pending" in html


def test_the_request_detail_shows_questions_and_result_as_tables(
    staff_client, make_request, reviewer
) -> None:
    request = make_request()
    transitions.claim_request(request.pk, user=reviewer)
    transitions.respond(
        request.pk, user=reviewer, action="accept", content={"approve": True, "note": "<i>ok</i>"}
    )
    html = staff_client.get(f"/admin/elicitation/elicitationrequest/{request.pk}/change/").content.decode()
    assert "<th>Title</th><th>Kind</th><th>Required</th>" in html
    assert "<td>Approve the transfer?</td><td>boolean</td><td>yes</td>" in html
    assert "<th>Question</th><th>Id</th><th>Answer</th>" in html
    assert "<td>Approve the transfer?</td><td><code>approve</code></td><td>true</td>" in html
    assert "&quot;&lt;i&gt;ok&lt;/i&gt;&quot;" in html
