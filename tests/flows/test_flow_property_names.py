"""A hosted flow whose properties carry names in any script, with spaces or quotes: the flow page renders them
with safe ids and escaped labels, and the agent retrieves the values under exactly those names."""

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.test import APIClient

from tests.flows.conftest import claim, flow_path, new_secret

pytestmark = pytest.mark.django_db

SECRET_NAME = "clé API"
CITY = "città"
QUOTED = '"><b>bold</b>'
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        SECRET_NAME: {"type": "string", "sensitive": True, "minLength": 8},
        CITY: {"type": "string"},
        QUOTED: {"type": "string", "enum": ["x", "y"]},
    },
    "required": [SECRET_NAME],
}
SAFE_HTML_ID = re.compile(r"[A-Za-z0-9_-]+")


def test_odd_names_render_safely_on_the_flow_page_and_come_back_exactly_to_the_agent(
    open_flow: Callable[..., dict[str, Any]],
    reviewer: User,
    browser_for: Callable[[User], Client],
    flows_client: APIClient,
) -> None:
    flow = open_flow(requestedSchema=SCHEMA)
    client = browser_for(reviewer)
    claim(client, flow)

    html = client.get(flow_path(flow)).content.decode()

    form = html.split('class="flow-form"')[1]
    ids = re.findall(r'\sid="([^"]*)"', form)
    assert ids and all(SAFE_HTML_ID.fullmatch(value) for value in ids), ids
    assert "<b>bold</b>" not in html and "&quot;&gt;&lt;b&gt;bold&lt;/b&gt;" in html
    assert 'name="answer-clé API"' in html and 'type="password"' in html

    secret = new_secret()
    data = {
        f"answer-{SECRET_NAME}": secret,
        f"answer-{CITY}": "Roma",
        f"answer-{QUOTED}": "y",
        "action": "accept",
    }
    response = client.post(flow_path(flow), urlencode(data), content_type="application/x-www-form-urlencoded")
    assert response.status_code == 303, response.content.decode()[:2000]

    retrieved = flows_client.post(f"/api/v1/flows/{flow['id']}/retrieve")
    assert retrieved.status_code == 200, retrieved.json()
    assert retrieved.json()["content"] == {SECRET_NAME: secret, CITY: "Roma", QUOTED: "y"}
