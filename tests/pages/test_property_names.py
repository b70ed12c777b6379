"""Property names as MCP allows them (any non-empty string: `città`, spaces, quotes, any script) survive the trip:
accepted by the API, rendered safely by the request page, answered under exactly the same key by the page and by
the reviewer API, and read back so by the agent."""

import re
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from rest_framework.test import APIClient

from elicitation.models import Draft, ElicitationRequest, Status
from tests.answers import answer_of

pytestmark = pytest.mark.django_db

CITY = "città"
SPACED = " date of birth "
QUOTED = "\"><img src=x onerror=alert('name')>"
KANJI = "名前"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        CITY: {"type": "string", "title": "Città di nascita"},
        SPACED: {"type": "string", "format": "date"},
        QUOTED: {"type": "string", "enum": ["yes", "no"]},
        KANJI: {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
    "required": [CITY, QUOTED],
}
ANSWERS = {CITY: "Roma", SPACED: "1990-05-01", QUOTED: "yes", KANJI: ["b"]}
SAFE_HTML_ID = re.compile(r"[A-Za-z0-9_-]+")


def create(agent_client: APIClient) -> dict[str, Any]:
    body = {"message": "Where were you born?", "requestedSchema": SCHEMA, "queue": "payments"}
    response = agent_client.post("/api/v1/requests", body, format="json")
    assert response.status_code == 201, response.json()
    data: dict[str, Any] = response.json()
    return data


def post_as_browser(client: Any, path: str, data: dict[str, Any]) -> Any:
    """A form without enctype, as the request page's: urlencoded, field names byte for byte (multipart parsing
    would strip their outer spaces)."""
    return client.post(path, urlencode(data, doseq=True), content_type="application/x-www-form-urlencoded")


def agent_result(agent_client: APIClient, request_id: str) -> Any:
    return agent_client.get(f"/api/v1/requests/{request_id}").json()["result"]


def test_the_api_keeps_the_schema_and_its_names_exactly(agent_client: APIClient) -> None:
    created = create(agent_client)

    assert created["requestedSchema"] == SCHEMA
    stored = ElicitationRequest.objects.get(pk=created["id"])
    assert [question["id"] for question in stored.questions] == [CITY, SPACED, QUOTED, KANJI]


def test_the_page_renders_odd_names_safely_and_the_answer_comes_back_under_the_same_keys(
    agent_client: APIClient, login: Any, reviewer: User
) -> None:
    created = create(agent_client)
    client = login(reviewer)
    page = f"/requests/{created['id']}/"
    client.post(page, {"action": "claim"})

    html = client.get(page).content.decode()

    assert "<img src=x" not in html
    assert "&quot;&gt;&lt;img src=x onerror=alert(&#x27;name&#x27;)&gt;" in html
    question_ids = re.findall(r'<div class="question[^"]*" id="([^"]*)"', html)
    assert question_ids == ["q-citta", "q-date-of-birth", "q-img-src-x-onerror-alert-name", "q-question"]
    form = html.split('id="answer-form"')[1]
    assert all(SAFE_HTML_ID.fullmatch(value) for value in re.findall(r'\sid="([^"]*)"', form))
    assert 'name="answer-città"' in html and 'name="answer- date of birth "' in html
    assert 'data-question="città"' in html and 'data-question=" date of birth "' in html

    response = post_as_browser(
        client,
        page,
        {
            "action": "accept",
            f"answer-{CITY}": "Roma",
            f"answer-{SPACED}": "1990-05-01",
            f"answer-{QUOTED}": "yes",
            f"answer-{KANJI}": ["b"],
        },
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    assert answer_of(agent_result(agent_client, created["id"])) == {"action": "accept", "content": ANSWERS}


def test_the_page_shows_errors_next_to_an_odd_named_field(
    agent_client: APIClient, login: Any, reviewer: User
) -> None:
    created = create(agent_client)
    client = login(reviewer)
    page = f"/requests/{created['id']}/"
    client.post(page, {"action": "claim"})

    response = post_as_browser(
        client, page, {"action": "accept", f"answer-{QUOTED}": "yes", f"answer-{SPACED}": "soon"}
    )

    assert response.status_code == 400
    html = response.content.decode()
    assert 'id="id_answer-citta_error"' in html and 'href="#id_answer-citta"' in html
    assert ElicitationRequest.objects.get(pk=created["id"]).status == Status.CLAIMED


def test_the_reviewer_api_saves_drafts_and_answers_under_the_exact_keys(
    agent_client: APIClient, reviewer_client: APIClient
) -> None:
    created = create(agent_client)
    base = f"/api/v1/review/requests/{created['id']}"
    assert reviewer_client.post(f"{base}/claim").status_code == 200

    draft = reviewer_client.post(f"{base}/drafts", {"question": SPACED, "value": "1990-05-01"}, format="json")
    assert draft.status_code == 200, draft.json()
    assert Draft.objects.get().question_id == SPACED  # leading and trailing spaces are part of the name
    unknown = reviewer_client.post(
        f"{base}/drafts", {"question": SPACED.strip(), "value": "x"}, format="json"
    )
    assert unknown.status_code == 400

    bad = reviewer_client.post(
        f"{base}/respond", {"action": "accept", "content": {**ANSWERS, CITY: 3}}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["fields"] == {f"content.{CITY}": "must be a string"}

    answered = reviewer_client.post(
        f"{base}/respond", {"action": "accept", "content": ANSWERS}, format="json"
    )
    assert answered.status_code == 200, answered.json()
    assert answer_of(agent_result(agent_client, created["id"])) == {"action": "accept", "content": ANSWERS}
