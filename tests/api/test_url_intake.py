"""URLs an agent sends are refused at the door when a browser would open somewhere else than they read, or when
they hold control or bidirectional-override characters: 400 naming the field, and nothing stored."""

from typing import Any

import pytest
from rest_framework.test import APIClient

from elicitation.models import ElicitationRequest, HostedFlow, Queue, Scope
from elicitation.queue import accounts, browser_urls

pytestmark = pytest.mark.django_db

# (url as sent, what the reason says). The first is the case that made this check: shown as accounts.google.com,
# opened by the browser at evil.example.
MISLEADING_URLS = [
    (
        "https://evil.example\\@accounts.google.com/",
        "is read differently by browsers: it opens evil.example, not accounts.google.com",
    ),
    (
        "https://evil.example\\accounts.google.com/",
        "it opens evil.example, not evil.example\\accounts.google.com",
    ),
    ("http://2130706433/", "it opens 127.0.0.1, not 2130706433"),
    ("http://0x7f.0.0.1/", "it opens 127.0.0.1, not 0x7f.0.0.1"),
    ("http://127.1/", "it opens 127.0.0.1, not 127.1"),
    ("http://0177.0.0.1/", "it opens 127.0.0.1, not 0177.0.0.1"),
    ("https://%65vil.example/", "it opens evil.example, not %65vil.example"),
    ("https:accounts.example.com/", "it opens accounts.example.com, not what it appears to"),
    ("https:///accounts.example.com/", "it opens accounts.example.com, not what it appears to"),
    ("https://\u2603.example/", "only a browser makes sense of"),
    ("https://acc\tounts.example.com/", "must not contain control characters"),
    ("https://accounts.example.com/\nx", "must not contain control characters"),
    ("https://accounts.example.com/\x00", "must not contain control characters"),
    ("https://accounts.example.com/\x7f", "must not contain control characters"),
    ("https://accounts.example.com/\u202egpj.exe", "must not contain bidirectional-override characters"),
    ("https://\u2067evil.example\u2069.accounts.example.com/", "bidirectional-override"),
    ("https://accounts.example.com:99999/", "is not a URL a browser can open"),
    ("https://exa mple.com/", "is not a URL a browser can open"),
    ("javascript:alert(1)", "must be an http or https URL"),
    ("ftp://files.example.com/", "must be an http or https URL"),
]


def url_body(url: str, **overrides: Any) -> dict[str, Any]:
    return {"message": "Connect your account", "mode": "url", "url": url, "queue": "payments", **overrides}


def post(client: APIClient, body: dict[str, Any]) -> Any:
    return client.post("/api/v1/requests", body, format="json")


@pytest.mark.parametrize(("url", "reason"), MISLEADING_URLS)
def test_a_url_read_differently_by_browsers_or_with_hidden_characters_is_a_400_and_nothing_is_stored(
    agent_client: APIClient, url: str, reason: str
) -> None:
    response = post(agent_client, url_body(url))

    assert response.status_code == 400, response.json()
    body = response.json()
    assert body["code"] == "invalid"
    assert list(body["fields"]) == ["url"]
    assert reason in body["fields"]["url"]
    assert ElicitationRequest.objects.count() == 0


def test_the_exact_backslash_case_names_both_hosts(agent_client: APIClient) -> None:
    response = post(agent_client, url_body("https://evil.example\\@accounts.google.com/"))

    assert response.status_code == 400
    assert response.json()["fields"] == {
        "url": "is read differently by browsers: it opens evil.example, not accounts.google.com; "
        "send the URL as a browser would write it"
    }
    assert not ElicitationRequest.objects.exists()


@pytest.mark.parametrize(
    "url",
    [
        "https://accounts.example.com/connect?x=1#top",
        "https://ACCOUNTS.example.com:443/a/../connect",
        "https://accounts.example.com:8443/connect",
        "http://localhost:8000/flows/1/",
        "https://wiki.m\u00fcnchen.example/",
        "https://xn--pple-43d.com/login",
        "https://bank.example@evil.example/",  # both readings agree: accepted, and the page warns about the "@"
        "https://[2001:db8::1]/",
    ],
)
def test_a_url_that_reads_the_same_to_browsers_is_accepted_as_sent(agent_client: APIClient, url: str) -> None:
    response = post(agent_client, url_body(url))

    assert response.status_code == 201, response.json()
    assert response.json()["url"] == url
    assert ElicitationRequest.objects.get().url == url


@pytest.mark.parametrize(("url", "reason"), MISLEADING_URLS[:3] + MISLEADING_URLS[10:11])
def test_a_misleading_callback_url_is_refused_too(agent_client: APIClient, url: str, reason: str) -> None:
    body = url_body("https://accounts.example.com/", callbackUrl=url)

    response = post(agent_client, body)

    assert response.status_code == 400
    assert list(response.json()["fields"]) == ["callbackUrl"]
    assert reason in response.json()["fields"]["callbackUrl"]
    assert ElicitationRequest.objects.count() == 0


def test_a_hosted_flow_with_a_misleading_callback_url_is_refused_and_nothing_is_stored(queue: Queue) -> None:
    _, key = accounts.create_agent(
        "vault", queue_slugs=[queue.slug], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
    )
    flows_client = APIClient()
    flows_client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    body = {
        "message": "The deploy tool needs your registry token.",
        "requestedSchema": {"type": "object", "properties": {"token": {"type": "string", "sensitive": True}}},
        "queue": "payments",
        "callbackUrl": "https://hooks.example\\@partner.example/",
    }

    response = flows_client.post("/api/v1/flows", body, format="json")

    assert response.status_code == 400, response.json()
    assert response.json()["fields"] == {
        "callbackUrl": "is read differently by browsers: it opens hooks.example, not partner.example; "
        "send the URL as a browser would write it"
    }
    assert HostedFlow.objects.count() == 0
    assert ElicitationRequest.objects.count() == 0


def test_the_browser_reading_is_what_the_page_links_to() -> None:
    browser = browser_urls.read_as_browser("https://evil.example\\@accounts.google.com/")

    assert browser is not None
    assert (browser.host, browser.href) == ("evil.example", "https://evil.example/@accounts.google.com/")
    assert browser.prefix + browser.host + browser.suffix == browser.href
