"""The authorization server's answers to abuse (RFC 9700), through Django's test client and the views production runs:

- errors for a client anyone could have registered stay on ReviewHub's page instead of redirecting (no open
  redirect, §4.11.2); a client an operator created keeps RFC 6749's error redirects;
- a replayed authorization code is refused and revokes every token issued from it (RFC 6749 §4.1.2);
- registration is counted per client address, and one registration costs a bounded amount of hashing.

`principal_for_token` is the check the MCP door runs on every request (elicitation/mcp/callers.py): None there is
a 401 at /mcp/.
"""

import base64
import hashlib
import json
import secrets
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from django.conf import global_settings, settings
from django.contrib.auth import hashers
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone
from oauth2_provider.models import get_access_token_model, get_application_model, get_grant_model

from elicitation.mcp.oauth import ReviewHubOAuth2Validator, principal_for_token
from elicitation.mcp.oauth_registration import ClientSecretHasher
from elicitation.models import McpGrant, Queue
from elicitation.queue import accounts
from reviewhub.rates import parse_rate
from tests.conftest import Clock

pytestmark = pytest.mark.django_db

REDIRECT = "http://127.0.0.1:53682/callback"
RESOURCE = settings.MCP_RESOURCE_URL
FOREIGN_RESOURCE = "https://elsewhere.example/mcp"


@pytest.fixture
def world() -> dict[str, Any]:
    triage = Queue.objects.create(slug="triage", name="Triage")
    agent, _ = accounts.create_agent("deploy-bot", queue_slugs=["triage"])
    alice = User.objects.create_user("alice")
    triage.supervisors.add(alice)
    browser = Client()
    browser.force_login(alice)
    return {"agent": agent, "alice": alice, "browser": browser}


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(64)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def register(address: str = "127.0.0.1", **overrides: Any) -> Any:
    body = {
        "client_name": "Test host",
        "redirect_uris": [REDIRECT],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
        **overrides,
    }
    return Client().post(
        "/oauth/register/", json.dumps(body), content_type="application/json", REMOTE_ADDR=address
    )


def registered_client_id() -> str:
    response = register()
    assert response.status_code == 201, response.content
    return str(response.json()["client_id"])


def admin_created_client_id() -> str:
    """A client an operator made (the admin writes the same row; `registration_source` stays "manual")."""
    application = get_application_model().objects.create(
        name="Ops host",
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris=REDIRECT,
    )
    return str(application.client_id)


def authorize_params(client_id: str, challenge: str, **overrides: str) -> dict[str, str]:
    params = {
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
    return {key: value for key, value in params.items() if value != "(absent)"}


def consent(world: dict[str, Any], client_id: str, challenge: str, *, allow: bool = True) -> Any:
    browser: Client = world["browser"]
    page = browser.get("/oauth/authorize/", authorize_params(client_id, challenge))
    assert page.status_code == 200, page.content
    form = {k: v for k, v in page.context["form"].initial.items() if v is not None}
    if allow:
        form.update({"allow": "Authorize", "agent": world["agent"].pk, "queues": ["triage"]})
    else:
        form["deny"] = "1"
    return browser.post("/oauth/authorize/", form)


def code_from(response: Any) -> str:
    assert response.status_code == 302, response.content
    query = parse_qs(urlsplit(response["Location"]).query)
    assert "code" in query, response["Location"]
    return query["code"][0]


def exchange(client_id: str, code: str, verifier: str) -> Any:
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    return Client().post("/oauth/token/", body)


def refresh(client_id: str, refresh_token: str) -> Any:
    body = {"grant_type": "refresh_token", "refresh_token": refresh_token, "client_id": client_id}
    return Client().post("/oauth/token/", body)


def consented_code(world: dict[str, Any]) -> tuple[str, str, str]:
    client_id = registered_client_id()
    verifier, challenge = pkce()
    return client_id, verifier, code_from(consent(world, client_id, challenge))


# --- 1. No open redirect for clients anyone can register ----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "error", "reason"),
    [
        (
            {"resource": FOREIGN_RESOURCE},
            b"invalid_target",
            f"resource parameter must be {RESOURCE}".encode(),
        ),
        ({"scope": "mcp admin"}, b"invalid_scope", b"The scope parameter may only be"),
        (
            {"code_challenge": "(absent)", "code_challenge_method": "(absent)"},
            b"invalid_request",
            b"challenge",
        ),
    ],
)
def test_a_registered_clients_bad_request_is_shown_on_reviewhubs_page_not_redirected(
    world: dict[str, Any], overrides: dict[str, str], error: bytes, reason: bytes
) -> None:
    client_id = registered_client_id()
    _, challenge = pkce()

    response = world["browser"].get("/oauth/authorize/", authorize_params(client_id, challenge, **overrides))

    assert response.status_code == 400
    assert not response.has_header("Location")
    assert error in response.content and reason in response.content
    assert REDIRECT.encode() not in response.content  # not even as a link
    assert not McpGrant.objects.exists()


def test_a_client_registered_by_metadata_document_is_not_trusted_with_redirects_either(
    world: dict[str, Any],
) -> None:
    # Stored as a metadata-document client still fresh, so nothing is fetched (and a loopback URL never would be).
    client_id = "https://127.0.0.1:9/mcp-client.json"
    get_application_model().objects.create(
        client_id=client_id,
        client_type="public",
        authorization_grant_type="authorization-code",
        redirect_uris=REDIRECT,
        registration_source="cimd",
        cimd_expires_at=timezone.now() + timedelta(days=1),
    )
    _, challenge = pkce()

    response = world["browser"].get(
        "/oauth/authorize/", authorize_params(client_id, challenge, resource=FOREIGN_RESOURCE)
    )

    assert response.status_code == 400
    assert not response.has_header("Location")


def test_an_admin_created_client_still_gets_its_errors_redirected(world: dict[str, Any]) -> None:
    client_id = admin_created_client_id()
    _, challenge = pkce()

    foreign = world["browser"].get(
        "/oauth/authorize/", authorize_params(client_id, challenge, resource=FOREIGN_RESOURCE)
    )
    # Found by oauthlib's own validation, where DOT names no application: the error still finds its client.
    no_pkce = world["browser"].get(
        "/oauth/authorize/",
        authorize_params(client_id, challenge, code_challenge="(absent)", code_challenge_method="(absent)"),
    )

    for response, error in ((foreign, "invalid_target"), (no_pkce, "invalid_request")):
        assert response.status_code == 302
        query = parse_qs(urlsplit(response["Location"]).query)
        assert response["Location"].startswith(REDIRECT)
        assert (query["error"], query["state"]) == ([error], ["st4te"])


def test_declining_a_registered_client_shows_a_page_and_leaves_the_way_back_to_the_person(
    world: dict[str, Any],
) -> None:
    client_id = registered_client_id()
    _, challenge = pkce()

    response = consent(world, client_id, challenge, allow=False)

    assert response.status_code == 200
    assert not response.has_header("Location")
    assert b"Nothing was granted" in response.content
    link = parse_qs(urlsplit(response.context["return_url"]).query)
    assert response.context["return_url"].startswith(REDIRECT)
    assert (link["error"], link["state"]) == (["access_denied"], ["st4te"])
    assert not McpGrant.objects.exists()


def test_declining_an_admin_created_client_redirects_as_rfc_6749_says(world: dict[str, Any]) -> None:
    _, challenge = pkce()
    response = consent(world, admin_created_client_id(), challenge, allow=False)
    assert response.status_code == 302
    assert "error=access_denied" in response["Location"]


def test_a_silent_request_while_signed_out_is_not_bounced_to_a_registered_client(
    world: dict[str, Any],
) -> None:
    _, challenge = pkce()
    untrusted = Client().get(
        "/oauth/authorize/", authorize_params(registered_client_id(), challenge, prompt="none")
    )
    trusted = Client().get(
        "/oauth/authorize/", authorize_params(admin_created_client_id(), challenge, prompt="none")
    )

    assert untrusted.status_code == 400
    assert not untrusted.has_header("Location")
    assert b"login_required" in untrusted.content
    assert trusted.status_code == 302
    assert trusted["Location"].startswith(REDIRECT) and "error=login_required" in trusted["Location"]


def test_a_registered_clients_allowed_consent_still_redirects_with_its_code(world: dict[str, Any]) -> None:
    _, _, code = consented_code(world)  # code_from: a 302 to the registered URI, carrying the code
    assert code


# --- 2. A replayed authorization code revokes what its first use got ---------------------------------------------


def test_a_replayed_code_is_refused_and_the_tokens_from_its_first_use_stop_working(
    world: dict[str, Any],
) -> None:
    client_id, verifier, code = consented_code(world)
    first = exchange(client_id, code, verifier)
    assert first.status_code == 200, first.content
    tokens = first.json()
    assert principal_for_token(tokens["access_token"]) is not None  # works before the replay

    replay = exchange(client_id, code, verifier)

    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
    assert principal_for_token(tokens["access_token"]) is None
    refused = refresh(client_id, tokens["refresh_token"])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_grant"
    assert McpGrant.objects.get().revoked_at is not None
    assert not get_access_token_model().objects.filter(scope__contains="grant:").exists()


def test_a_replay_also_revokes_tokens_refreshed_since_and_spares_other_consents(
    world: dict[str, Any],
) -> None:
    client_id, verifier, code = consented_code(world)
    first = exchange(client_id, code, verifier).json()
    rotated = refresh(client_id, first["refresh_token"])
    assert rotated.status_code == 200, rotated.content
    rotated_tokens = rotated.json()
    # A second authorization of the same host by the same person: another code, another consent.
    other_verifier, other_challenge = pkce()
    other = exchange(client_id, code_from(consent(world, client_id, other_challenge)), other_verifier).json()

    assert exchange(client_id, code, verifier).status_code == 400

    assert principal_for_token(rotated_tokens["access_token"]) is None
    assert refresh(client_id, rotated_tokens["refresh_token"]).status_code == 400
    assert principal_for_token(other["access_token"]) is not None
    assert refresh(client_id, other["refresh_token"]).status_code == 200


def test_a_replay_without_the_verifier_still_revokes(world: dict[str, Any]) -> None:
    # Whoever replays a code has seen it: RFC 6749 §4.1.2 revokes on the replay itself, before PKCE is checked.
    client_id, verifier, code = consented_code(world)
    tokens = exchange(client_id, code, verifier).json()

    replay = exchange(client_id, code, pkce()[0])

    assert replay.status_code == 400
    assert principal_for_token(tokens["access_token"]) is None


def test_a_redeemed_code_is_kept_only_as_its_checksum(world: dict[str, Any]) -> None:
    client_id, verifier, code = consented_code(world)
    assert exchange(client_id, code, verifier).status_code == 200

    codes = list(get_grant_model().objects.values_list("code", flat=True))

    assert codes == ["redeemed:" + hashlib.sha256(code.encode()).hexdigest()]


def test_of_two_exchanges_of_one_code_racing_neither_keeps_its_tokens(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    client_id, verifier, code = consented_code(world)
    save_bearer_token = ReviewHubOAuth2Validator.save_bearer_token
    started: list[bool] = []
    second: list[Any] = []

    def save_then_let_the_other_exchange_run(
        self: Any, token: Any, request: Any, *args: Any, **kwargs: Any
    ) -> Any:
        saved = save_bearer_token(self, token, request, *args, **kwargs)
        if not started:
            # The first exchange has passed validation and saved its tokens, and has not yet spent the code: the
            # second exchange of the same code runs to the end now.
            started.append(True)
            second.append(exchange(client_id, code, verifier))
        return saved

    monkeypatch.setattr(ReviewHubOAuth2Validator, "save_bearer_token", save_then_let_the_other_exchange_run)

    first = exchange(client_id, code, verifier)

    winner = second[0]
    assert winner.status_code == 200, winner.content
    assert first.status_code == 400 and first.json()["error"] == "invalid_grant"
    assert "used twice" in first.json()["error_description"]
    assert principal_for_token(winner.json()["access_token"]) is None
    assert refresh(client_id, winner.json()["refresh_token"]).status_code == 400
    assert not get_access_token_model().objects.filter(scope__contains="grant:").exists()


# --- 3. Registration: counted per address, bounded in cost --------------------------------------------------------


@pytest.fixture
def ten_an_hour(settings: Any) -> None:
    settings.OAUTH_REGISTRATION_RATE = parse_rate("10/hour")


def test_the_eleventh_registration_from_one_address_is_refused_and_not_stored(
    ten_an_hour: None, clock: Clock
) -> None:
    for _ in range(10):
        assert register("198.51.100.7").status_code == 201

    refused = register("198.51.100.7", client_name="Eleventh host")
    elsewhere = register("198.51.100.8")

    assert refused.status_code == 429
    assert 1 <= int(refused["Retry-After"]) <= 3600
    assert refused.json()["error"] == "temporarily_unavailable"
    assert "Too many client registrations" in refused.json()["error_description"]
    assert not get_application_model().objects.filter(name="Eleventh host").exists()
    assert elsewhere.status_code == 201
    assert get_application_model().objects.count() == 11


def test_registration_opens_again_when_the_window_ends(ten_an_hour: None, clock: Clock) -> None:
    for _ in range(10):
        register("198.51.100.7")
    assert register("198.51.100.7").status_code == 429

    clock.advance(hours=1)

    assert register("198.51.100.7").status_code == 201


def test_an_ipv6_client_is_counted_by_its_slash_64(settings: Any, clock: Clock) -> None:
    settings.OAUTH_REGISTRATION_RATE = parse_rate("1/hour")

    assert register("2001:db8:0:7::1").status_code == 201
    assert register("2001:db8:0:7::2").status_code == 429  # same /64
    assert register("2001:db8:0:8::1").status_code == 201  # another /64


def test_a_registration_hashes_its_secret_with_a_thousand_rounds_not_a_million(
    settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Production's hashers: Django's defaults (PBKDF2 at 1,000,000 rounds first), then the client-secret one.
    settings.PASSWORD_HASHERS = [
        *global_settings.PASSWORD_HASHERS,
        "elicitation.mcp.oauth_registration.ClientSecretHasher",
    ]
    rounds: list[int] = []
    real_pbkdf2 = hashers.pbkdf2

    def counted_pbkdf2(password: Any, salt: Any, iterations: int, *args: Any, **kwargs: Any) -> bytes:
        rounds.append(iterations)
        return bytes(real_pbkdf2(password, salt, iterations, *args, **kwargs))

    monkeypatch.setattr(hashers, "pbkdf2", counted_pbkdf2)

    public = register()
    confidential = register(token_endpoint_auth_method="client_secret_basic")
    client_id, secret = confidential.json()["client_id"], confidential.json()["client_secret"]
    token_request = {"grant_type": "authorization_code", "code": "unknown", "redirect_uri": REDIRECT}
    right = Client().post("/oauth/token/", {**token_request, "client_id": client_id, "client_secret": secret})
    wrong = Client().post(
        "/oauth/token/", {**token_request, "client_id": client_id, "client_secret": "guess"}
    )

    assert (public.status_code, confidential.status_code) == (201, 201)
    stored = get_application_model().objects.get(client_id=client_id).client_secret
    assert hashers.identify_hasher(stored).algorithm == ClientSecretHasher.algorithm
    assert (
        right.json()["error"] == "invalid_grant"
    )  # the secret was accepted; only the made-up code is refused
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    assert rounds and set(rounds) == {
        1_000
    }  # hashing at registration and both checks, never a million rounds
