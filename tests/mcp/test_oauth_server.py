"""ReviewHub's OAuth 2.1 authorization server for /mcp/, through Django's test client (the same views and
django-oauth-toolkit machinery production runs): metadata, registration, consent, PKCE, resource binding, and
the refusals the MCP authorization spec asks for."""

import base64
import hashlib
import json
import secrets
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from oauth2_provider.models import get_access_token_model, get_application_model

from elicitation.admin.mcp_grants import revoke_grants
from elicitation.mcp.oauth import principal_for_token
from elicitation.models import McpGrant, Queue
from elicitation.queue import accounts, clock

pytestmark = pytest.mark.django_db

REDIRECT = "http://127.0.0.1:53682/callback"
RESOURCE = settings.MCP_RESOURCE_URL


def mcp_tokens() -> Any:
    """Access tokens issued for /mcp/ (registration leaves an RFC 7592 management token beside them)."""
    return get_access_token_model().objects.filter(scope__contains="grant:")


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


@pytest.fixture
def world() -> dict[str, Any]:
    triage = Queue.objects.create(slug="triage", name="Triage")
    other = Queue.objects.create(slug="other", name="Other")
    agent, _ = accounts.create_agent("deploy-bot", queue_slugs=["triage", "other"])
    alice = User.objects.create_user("alice")
    triage.supervisors.add(alice)
    browser = Client()
    browser.force_login(alice)
    return {"agent": agent, "alice": alice, "browser": browser, "triage": triage, "other": other}


def register(client: Client, **overrides: Any) -> dict[str, Any]:
    body = {
        "client_name": "Test host",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **overrides,
    }
    response = client.post("/oauth/register/", json.dumps(body), content_type="application/json")
    assert response.status_code == 201, response.content
    return dict(response.json())


def authorize_params(client_id: str, challenge: str, **overrides: str) -> dict[str, str]:
    return {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT,
        "state": "st4te",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": RESOURCE,
        "scope": "mcp",
        **overrides,
    }


def consent(world: dict[str, Any], client_id: str, challenge: str, queues: list[str] | None = None) -> Any:
    browser: Client = world["browser"]
    page = browser.get("/oauth/authorize/", authorize_params(client_id, challenge))
    assert page.status_code == 200, page.content
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    form.update({"allow": "Authorize", "agent": world["agent"].pk, "queues": queues or ["triage"]})
    return browser.post("/oauth/authorize/", form)


def code_from(response: Any) -> str:
    assert response.status_code == 302, response.content
    query = parse_qs(urlsplit(response["Location"]).query)
    assert "code" in query, response["Location"]
    return query["code"][0]


def exchange(client_id: str, code: str, verifier: str, **overrides: str) -> Any:
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
        "resource": RESOURCE,
        **overrides,
    }
    return Client().post("/oauth/token/", body)


def test_protected_resource_metadata_names_the_mcp_resource_at_both_well_known_paths() -> None:
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp"):
        body = Client().get(path).json()
        assert body["resource"] == RESOURCE
        assert body["authorization_servers"] == [settings.PUBLIC_URL]
        assert body["scopes_supported"] == ["mcp"]


def test_authorization_server_metadata_offers_only_code_with_s256() -> None:
    body = Client().get("/.well-known/oauth-authorization-server").json()
    assert body["issuer"] == settings.PUBLIC_URL
    assert body["response_types_supported"] == ["code"]
    assert body["code_challenge_methods_supported"] == ["S256"]
    assert body["authorization_endpoint"] == settings.PUBLIC_URL + "/oauth/authorize/"
    assert body["registration_endpoint"] == settings.PUBLIC_URL + "/oauth/register/"
    assert body["client_id_metadata_document_supported"] is True
    assert "implicit" not in body["grant_types_supported"]


def test_a_consented_code_and_its_verifier_get_a_token_bound_to_mcp_and_the_chosen_queues(
    world: dict[str, Any],
) -> None:
    client_id = register(Client())["client_id"]
    verifier, challenge = pkce()
    code = code_from(consent(world, client_id, challenge))

    response = exchange(client_id, code, verifier)

    assert response.status_code == 200, response.content
    token = response.json()
    grant = McpGrant.objects.get()
    assert (grant.user, grant.agent, grant.client_id) == (world["alice"], world["agent"], client_id)
    assert list(grant.queues.values_list("slug", flat=True)) == ["triage"]
    assert token["scope"] == f"mcp grant:{grant.pk}"
    principal = principal_for_token(token["access_token"])
    assert principal is not None
    assert (principal.agent_id, principal.queues) == (world["agent"].pk, frozenset({"triage"}))
    row = mcp_tokens().get()
    assert row.resource == [RESOURCE]
    assert row.token == ""  # stored as a checksum only


def test_a_wrong_code_verifier_is_refused(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    _, challenge = pkce()
    code = code_from(consent(world, client_id, challenge))

    response = exchange(client_id, code, pkce()[0])

    assert response.status_code == 400
    assert json.loads(response.content)["error"] == "invalid_grant"
    assert not mcp_tokens().exists()


def test_an_authorization_without_pkce_or_with_plain_pkce_is_refused(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    verifier, _ = pkce()
    plain = world["browser"].get(
        "/oauth/authorize/", authorize_params(client_id, verifier, code_challenge_method="plain")
    )
    params = authorize_params(client_id, "x")
    del params["code_challenge"], params["code_challenge_method"]
    missing = world["browser"].get("/oauth/authorize/", params)

    # On ReviewHub's page: a registered client is not redirected to (RFC 9700 §4.11.2).
    for response in (plain, missing):
        assert response.status_code == 400
        assert not response.has_header("Location")
        assert b"invalid_request" in response.content


def test_an_authorization_for_another_resource_is_refused(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    _, challenge = pkce()
    for resource in ("https://elsewhere.example/mcp", ""):
        response = world["browser"].get(
            "/oauth/authorize/", authorize_params(client_id, challenge, resource=resource)
        )
        # ReviewHub's page, not a redirect (tests/mcp/test_oauth_hardening.py).
        assert response.status_code == 400
        assert not response.has_header("Location")
        assert b"invalid_target" in response.content
    assert not McpGrant.objects.exists()


def test_a_token_request_for_another_resource_is_refused(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    verifier, challenge = pkce()
    code = code_from(consent(world, client_id, challenge))

    response = exchange(client_id, code, verifier, resource="https://elsewhere.example/mcp")

    assert response.status_code == 400
    assert json.loads(response.content)["error"] == "invalid_target"


def test_an_unregistered_redirect_uri_is_refused_without_redirecting(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    _, challenge = pkce()
    response = world["browser"].get(
        "/oauth/authorize/",
        authorize_params(client_id, challenge, redirect_uri="https://attacker.example/cb"),
    )
    assert response.status_code == 400
    assert "attacker" not in response.get("Location", "")


@pytest.mark.parametrize(
    "client_id",
    [
        "https://127.0.0.1/client.json",
        "https://10.0.0.8/client.json",
        "https://169.254.169.254/latest/meta-data",
        "https://localhost/client.json",
    ],
)
def test_a_client_metadata_document_on_a_private_address_is_never_fetched(
    world: dict[str, Any], client_id: str
) -> None:
    _, challenge = pkce()
    response = world["browser"].get("/oauth/authorize/", authorize_params(client_id, challenge))
    assert response.status_code == 400
    assert not get_application_model().objects.filter(client_id=client_id).exists()


def test_a_user_may_not_grant_a_queue_they_do_not_supervise(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    _, challenge = pkce()
    response = consent(world, client_id, challenge, queues=["other"])
    assert response.status_code == 200  # the consent page again, with the error
    assert "queues" in response.context["form"].errors
    assert not McpGrant.objects.exists()


def test_the_consent_page_offers_only_agents_on_supervised_queues(world: dict[str, Any]) -> None:
    accounts.create_agent("stranger", queue_slugs=["other"])
    client_id = register(Client())["client_id"]
    _, challenge = pkce()
    page = world["browser"].get("/oauth/authorize/", authorize_params(client_id, challenge))
    assert [a.name for a in page.context["form"].fields["agent"].queryset] == ["deploy-bot"]
    assert b"deploy-bot" in page.content
    assert b"stranger" not in page.content


def test_denying_consent_records_nothing_and_leaves_the_way_back_to_the_person(world: dict[str, Any]) -> None:
    client_id = register(Client())["client_id"]
    _, challenge = pkce()
    page = world["browser"].get("/oauth/authorize/", authorize_params(client_id, challenge))
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    response = world["browser"].post("/oauth/authorize/", {**form, "deny": "1"})
    assert response.status_code == 200  # a registered client is not redirected to unasked (RFC 9700 §4.11.2)
    assert "error=access_denied" in response.context["return_url"]
    assert not McpGrant.objects.exists()


def _issued_token(world: dict[str, Any]) -> str:
    client_id = register(Client())["client_id"]
    verifier, challenge = pkce()
    code = code_from(consent(world, client_id, challenge))
    return str(exchange(client_id, code, verifier).json()["access_token"])


def test_an_expired_token_speaks_for_nobody(world: dict[str, Any]) -> None:
    token = _issued_token(world)
    mcp_tokens().update(expires=clock.now() - timedelta(seconds=1))
    assert principal_for_token(token) is None


def test_a_token_of_a_revoked_grant_or_agent_speaks_for_nobody(world: dict[str, Any]) -> None:
    token = _issued_token(world)
    assert principal_for_token(token) is not None
    accounts.revoke_agent(world["agent"])
    assert principal_for_token(token) is None

    world["agent"].revoked_at = None
    world["agent"].save(update_fields=["revoked_at"])
    assert principal_for_token(token) is not None
    assert revoke_grants(McpGrant.objects.all(), world["alice"]) == 1
    assert revoke_grants(McpGrant.objects.all(), world["alice"]) == 0  # the losing revoker counts nothing
    assert principal_for_token(token) is None
    assert not mcp_tokens().exists()
    assert McpGrant.objects.get().revoked_by == world["alice"]


def test_a_token_bound_to_another_resource_speaks_for_nobody(world: dict[str, Any]) -> None:
    token = _issued_token(world)
    mcp_tokens().update(resource=["https://elsewhere.example/mcp"])
    assert principal_for_token(token) is None
    mcp_tokens().update(resource=[])
    assert principal_for_token(token) is None


def test_an_admin_revokes_a_grant_from_the_admin_and_its_token_stops_working(world: dict[str, Any]) -> None:
    token = _issued_token(world)
    grant = McpGrant.objects.get()
    admin_user = User.objects.create_superuser("root", "root@example.com", "pw")
    admin = Client()
    admin.force_login(admin_user)

    listing = admin.get("/admin/elicitation/mcpgrant/")
    revoked = admin.post(
        "/admin/elicitation/mcpgrant/", {"action": "revoke", "_selected_action": [str(grant.pk)]}
    )

    assert listing.status_code == 200 and b"deploy-bot" in listing.content
    assert revoked.status_code == 302
    grant.refresh_from_db()
    assert (grant.revoked_by, grant.revoked_at is not None) == (admin_user, True)
    assert principal_for_token(token) is None
