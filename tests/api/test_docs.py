"""The API docs page works under our CSP: no inline style or script, assets served locally."""

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_the_docs_page_has_no_inline_style_or_script(client: Client) -> None:
    response = client.get("/api/docs/")
    html = response.content.decode()
    assert response.status_code == 200
    assert "<style" not in html
    assert "<script>" not in html
    assert "reviewhub/swagger.css" in html
    assert "script-src 'self'" in response["Content-Security-Policy"]


def test_the_schema_is_served_as_json(client: Client) -> None:
    response = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    assert response.json()["info"]["title"] == "ReviewHub API"
