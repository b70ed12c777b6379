"""Company sign-in accepts an ID token only when the provider's key signed it, for this client, from this issuer,
unexpired, with this browser's nonce; anything else ends on the sign-in page with no session and no account."""

import base64
import hashlib
import time
from collections.abc import Iterator
from typing import Any

import jwt
import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.reviewer.company_sign_in.models import CompanyIdentity
from tests.security.oidc_stub import (
    CLIENT_ID,
    CLIENT_SECRET,
    StubProvider,
    begin,
    configured_for_stub,
    finish,
    new_key,
    sign_in,
    signed_in_user_id,
    with_payload,
)

REFUSED = "Signing in with Acme SSO did not work"


@pytest.fixture
def stub(settings: Any, db: None) -> Iterator[StubProvider]:
    with configured_for_stub(settings) as provider:
        yield provider


def assert_refused(
    client: Client, response: Any, caplog: pytest.LogCaptureFixture | None, reason: str
) -> None:
    if caplog is not None:
        assert reason in caplog.text  # refused for this reason, not for another one on the way
    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/"
    assert signed_in_user_id(client) is None
    assert REFUSED in client.get(response["Location"]).content.decode()
    assert not User.objects.exists()
    assert not CompanyIdentity.objects.exists()


def test_a_token_the_providers_key_signed_signs_in_and_links_the_account_by_sub(
    stub: StubProvider, client: Client
) -> None:
    response = sign_in(client, stub)

    assert response.status_code == 302
    assert response["Location"] == "/"
    identity = CompanyIdentity.objects.get()
    assert (identity.issuer, identity.subject) == (stub.issuer, "user-0001")
    assert signed_in_user_id(client) == str(identity.user.pk)
    assert identity.user.username == "alice"
    assert identity.user.email == "alice@acme.test"
    assert not identity.user.has_usable_password()


def test_the_code_is_traded_with_the_client_secret_and_the_pkce_verifier(
    stub: StubProvider, client: Client
) -> None:
    state, query = begin(client)
    stub.hand_out(stub.claims(query["nonce"]))
    finish(client, state)

    (token_request,) = stub.token_requests
    # client_secret_basic, the method the stub's discovery document lists.
    expected = base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
    assert token_request["authorization"] == f"Basic {expected}"
    assert "client_secret" not in token_request["form"]
    verifier = token_request["form"]["code_verifier"]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    assert (query["code_challenge"], query["code_challenge_method"]) == (challenge, "S256")
    assert token_request["form"]["redirect_uri"] == query["redirect_uri"]


def test_a_token_signed_by_another_key_is_refused(
    stub: StubProvider, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    state, query = begin(client)
    claims = stub.claims(query["nonce"])
    stub.hand_out(claims, token=stub.sign(claims, key=new_key()))  # same kid, another key

    assert_refused(client, finish(client, state), caplog, "Signature verification failed")


def test_a_token_whose_payload_was_altered_is_refused(
    stub: StubProvider, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    state, query = begin(client)
    claims = stub.claims(query["nonce"])
    genuine = stub.sign(claims)
    stub.hand_out(claims, token=with_payload(genuine, {**claims, "sub": "user-0002"}))

    assert_refused(client, finish(client, state), caplog, "Signature verification failed")


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param({"aud": "another-client"}, "Audience doesn't match", id="audience"),
        pytest.param(
            {"aud": [CLIENT_ID, "another-client"]}, "`azp` is not this client", id="audiences-no-azp"
        ),
        pytest.param({"iss": "https://idp.elsewhere.example"}, "Invalid issuer", id="issuer"),
        pytest.param({"exp": int(time.time()) - 3600}, "Signature has expired", id="expired"),
        pytest.param({"iat": None}, 'missing the "iat" claim', id="no-iat"),
        pytest.param({"nonce": "another-browsers-nonce"}, "Nonce verification failed", id="nonce"),
        pytest.param({"nonce": None}, "Nonce verification failed", id="no-nonce"),
    ],
)
def test_a_token_with_a_claim_that_fails_its_check_is_refused(
    stub: StubProvider, client: Client, caplog: pytest.LogCaptureFixture, change: dict[str, Any], reason: str
) -> None:
    state, query = begin(client)
    stub.hand_out(stub.claims(**{"nonce": query["nonce"], **change}))

    assert_refused(client, finish(client, state), caplog, reason)


def test_several_audiences_are_accepted_when_azp_names_this_client(
    stub: StubProvider, client: Client
) -> None:
    response = sign_in(client, stub, aud=[CLIENT_ID, "another-client"], azp=CLIENT_ID)

    assert response["Location"] == "/"
    assert signed_in_user_id(client) is not None


@pytest.mark.parametrize("algorithm", ["HS256", "none"])
def test_a_token_not_signed_with_rs256_is_refused(
    stub: StubProvider, client: Client, caplog: pytest.LogCaptureFixture, algorithm: str
) -> None:
    state, query = begin(client)
    claims = stub.claims(query["nonce"])
    # HS256 keyed with the client secret: the classic algorithm confusion; "none": no signature at all.
    key = CLIENT_SECRET if algorithm == "HS256" else None
    stub.hand_out(claims, token=jwt.encode(claims, key, algorithm=algorithm, headers={"kid": stub.kid}))

    assert_refused(client, finish(client, state), caplog, "The specified alg value is not allowed")


def test_a_userinfo_answer_about_another_subject_is_refused(
    stub: StubProvider, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    state, query = begin(client)
    claims = stub.claims(query["nonce"])
    stub.hand_out(claims)
    stub.userinfo = {**stub.userinfo, "sub": "user-0002"}

    assert_refused(client, finish(client, state), caplog, "userinfo response is for another subject")


def test_a_callback_with_a_state_this_browser_was_not_given_is_refused(
    stub: StubProvider, client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    _, query = begin(client)
    stub.hand_out(stub.claims(query["nonce"]))

    assert_refused(
        client, finish(client, "a-state-from-another-browser"), caplog, "state not found in session"
    )
    assert not stub.token_requests  # the code was never even traded


def test_a_callback_in_a_browser_that_never_started_a_sign_in_is_refused(stub: StubProvider) -> None:
    _, query = begin(Client())
    stub.hand_out(stub.claims(query["nonce"]))
    other_browser = Client()

    assert_refused(other_browser, finish(other_browser, "a-state-from-another-browser"), None, "")
    assert not stub.token_requests


def test_a_code_is_traded_once_its_state_is_spent(stub: StubProvider, client: Client) -> None:
    state, query = begin(client)
    stub.hand_out(stub.claims(query["nonce"]))
    assert finish(client, state)["Location"] == "/"
    client.logout()

    replayed = finish(client, state)

    assert replayed["Location"] == "/accounts/login/"
    assert signed_in_user_id(client) is None
    assert len(stub.token_requests) == 1


def test_an_unreachable_provider_sends_the_browser_back_to_the_sign_in_page(
    settings: Any, client: Client
) -> None:
    with configured_for_stub(settings) as provider:
        settings.OIDC_ISSUER = provider.issuer + "/gone"  # never discovered: nothing is cached for it

    response = client.get("/oidc/authenticate/", {"next": "/history/"})

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=%2Fhistory%2F"
    assert "Acme SSO cannot be reached right now" in client.get(response["Location"]).content.decode()


def test_company_sign_in_answers_404_while_no_issuer_is_set(client: Client, db: None) -> None:
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/", {"code": "c", "state": "s"}).status_code == 404
