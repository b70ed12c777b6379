"""The sign-in page with company sign-in on: the provider's button, the password form unless LOCAL_PASSWORD_LOGIN is
off, and then password POSTs refused, with staff keeping theirs on the admin's sign-in page (the break-glass way in).
And the settings that turn it on fail loudly at start when a value is wrong."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.security.oidc_stub import StubProvider, configured_for_stub, sign_in, signed_in_user_id
from tests.test_settings import settings_in_subprocess

STAFF_PASSWORDS = "elicitation.reviewer.company_sign_in.backend.StaffPasswordBackend"
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


@pytest.fixture
def stub(settings: Any, db: None) -> Iterator[StubProvider]:
    with configured_for_stub(settings) as provider:
        yield provider


@pytest.fixture
def passwords_off(settings: Any, stub: StubProvider) -> None:
    """What LOCAL_PASSWORD_LOGIN=false sets (reviewhub/settings.py)."""
    settings.LOCAL_PASSWORD_LOGIN = False
    backends = list(settings.AUTHENTICATION_BACKENDS)
    backends[backends.index(MODEL_BACKEND)] = STAFF_PASSWORDS
    settings.AUTHENTICATION_BACKENDS = backends


def test_the_sign_in_page_offers_the_provider_beside_the_password_form(
    stub: StubProvider, client: Client
) -> None:
    page = client.get("/accounts/login/", {"next": "/history/"}).content.decode()

    assert 'href="/oidc/authenticate/?next=/history/">Sign in with Acme SSO</a>' in page
    assert 'name="password"' in page


def test_without_an_issuer_the_page_is_the_password_form_alone(client: Client, db: None) -> None:
    page = client.get("/accounts/login/").content.decode()

    assert "Sign in with" not in page
    assert 'name="password"' in page


def test_with_passwords_off_the_page_shows_the_provider_alone(passwords_off: None, client: Client) -> None:
    page = client.get("/accounts/login/").content.decode()

    assert "Sign in with Acme SSO" in page
    assert 'name="password"' not in page


@pytest.mark.parametrize("staff", [False, True])
def test_with_passwords_off_a_password_post_is_refused_even_with_the_right_password(
    passwords_off: None, client: Client, staff: bool
) -> None:
    User.objects.create_user("carol", password="right-password-1", is_staff=staff)

    response = client.post("/accounts/login/", {"username": "carol", "password": "right-password-1"})

    assert response.status_code == 403
    assert "Passwords are turned off here: sign in with Acme SSO." in response.content.decode()
    assert signed_in_user_id(client) is None


def test_with_passwords_off_staff_still_sign_in_on_the_admins_page(
    passwords_off: None, client: Client
) -> None:
    staff = User.objects.create_user("root", password="right-password-1", is_staff=True)

    response = client.post("/admin/login/", {"username": "root", "password": "right-password-1"})

    assert response.status_code == 302
    assert signed_in_user_id(client) == str(staff.pk)


def test_with_passwords_off_a_reviewer_password_opens_nothing_on_the_admins_page_either(
    passwords_off: None, client: Client
) -> None:
    User.objects.create_user("dave", password="right-password-1")

    response = client.post("/admin/login/", {"username": "dave", "password": "right-password-1"})

    assert response.status_code == 200  # the form again, with its error
    assert signed_in_user_id(client) is None


def test_with_passwords_off_a_password_session_of_a_reviewer_ends(settings: Any, stub: StubProvider) -> None:
    reviewer = User.objects.create_user("erin", password="right-password-1")
    client = Client()
    assert (
        client.post("/accounts/login/", {"username": "erin", "password": "right-password-1"}).status_code
        == 302
    )
    assert client.get("/").status_code == 200

    settings.LOCAL_PASSWORD_LOGIN = False
    settings.AUTHENTICATION_BACKENDS = [
        STAFF_PASSWORDS if path == MODEL_BACKEND else path for path in settings.AUTHENTICATION_BACKENDS
    ]

    assert client.get("/").status_code == 302
    assert reviewer.pk  # the account stays; only its password session ended


def test_with_passwords_off_the_company_sign_in_still_works(
    passwords_off: None, stub: StubProvider, client: Client
) -> None:
    response = sign_in(client, stub)

    assert response["Location"] == "/"
    assert client.get("/").status_code == 200


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"OIDC_ISSUER": "idp.example.com"}, "is not an issuer"),
        ({"OIDC_ISSUER": "http://idp.example.com"}, "http only on a loopback host"),
        ({"OIDC_ISSUER": "https://idp.example.com/?tenant=1"}, "no query"),
        ({"OIDC_ISSUER": "https://idp.example.com"}, "set OIDC_CLIENT_ID and OIDC_CLIENT_SECRET"),
        (
            {
                "OIDC_ISSUER": "https://idp.example.com",
                "OIDC_CLIENT_ID": "x",
                "OIDC_CLIENT_SECRET": "y",
                "OIDC_SCOPES": "email",
            },
            "must include openid",
        ),
        ({"LOCAL_PASSWORD_LOGIN": "false"}, "needs OIDC_ISSUER"),
        ({"OIDC_GROUP_QUEUES": "engineering"}, "must be group=queue-slug"),
        ({"OIDC_GROUP_QUEUES": "engineering=not a slug"}, "must be group=queue-slug"),
    ],
)
def test_a_bad_company_sign_in_setting_stops_startup(env: dict[str, str], message: str) -> None:
    result = settings_in_subprocess(env, "s.OIDC_ISSUER")

    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr
    assert message in result.stderr


def test_a_good_company_sign_in_configuration_turns_it_on() -> None:
    env = {
        "OIDC_ISSUER": "https://login.acme.example/realms/staff",
        "OIDC_CLIENT_ID": "reviewhub",
        "OIDC_CLIENT_SECRET": "secret",
        "OIDC_SCOPES": "openid,email groups",
        "OIDC_GROUP_QUEUES": "0b5c=deploys, 0b5c=billing:supervisor, ops=ops",
        "LOCAL_PASSWORD_LOGIN": "false",
    }

    result = settings_in_subprocess(env, "s.OIDC_RP_SCOPES, s.OIDC_GROUP_QUEUES, s.AUTHENTICATION_BACKENDS")

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == repr(
        (
            "openid email groups",
            {"0b5c": ("deploys", "billing:supervisor"), "ops": ("ops",)},
            [
                "elicitation.reviewer.login_throttle.LoginThrottleBackend",
                STAFF_PASSWORDS,
                "elicitation.reviewer.company_sign_in.backend.CompanySignInBackend",
            ],
        )
    )
