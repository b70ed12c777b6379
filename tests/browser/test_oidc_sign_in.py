"""Company sign-in end to end: a reviewer signs in through a real OpenID Connect provider (django-oauth-toolkit's, in
a process of its own on loopback: tests/oidc_provider/) in Chromium, lands in ReviewHub with the queues its groups
give, and loses a queue at the next sign-in once the provider's administrator removed the group.

ReviewHub runs with LOCAL_PASSWORD_LOGIN=false, so the sign-in page offers the provider alone."""

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from playwright.sync_api import expect

from elicitation.models import Queue
from elicitation.reviewer.company_sign_in.models import CompanyIdentity
from tests.browser.conftest import ASYNC_UNSAFE, FAILURES, WAIT_MS
from tests.delivery.liveserver import LiveServer
from tests.oidc_provider.server import OIDCProvider

pytestmark = pytest.mark.browser

CLIENT_ID = "reviewhub"
CLIENT_SECRET = "reviewhub-client-secret-for-the-browser-test"
PROVIDER_PASSWORD = "acme-password-1"


@dataclass
class Servers:
    provider: OIDCProvider
    reviewhub: LiveServer


@pytest.fixture
def servers(transactional_db: None, tmp_path: Path) -> Iterator[Servers]:
    """The provider, and ReviewHub on this run's test database configured for it as an operator would; both start
    at once (ReviewHub reads the provider's discovery document at the first sign-in, not at start)."""
    if connection.vendor == "sqlite" and "memory" in str(connection.settings_dict["NAME"]):
        pytest.skip("browser tests need a file SQLite test database (set SQLITE_TEST_PATH)")
    provider = OIDCProvider(tmp_path)
    reviewhub = LiveServer(
        env={
            "OIDC_ISSUER": provider.issuer,
            "OIDC_CLIENT_ID": CLIENT_ID,
            "OIDC_CLIENT_SECRET": CLIENT_SECRET,
            "OIDC_SCOPES": "openid profile email groups",
            "OIDC_PROVIDER_NAME": "Acme SSO",
            "LOCAL_PASSWORD_LOGIN": "false",
        }
    )
    reviewhub.env.pop(ASYNC_UNSAFE, None)
    reviewhub.launch()
    try:
        provider.start()
        provider.set_client(CLIENT_ID, CLIENT_SECRET, f"{reviewhub.url}/oidc/callback/")
        reviewhub.wait_ready()
        yield Servers(provider, reviewhub)
    finally:
        reviewhub.stop()
        provider.stop()


def test_a_reviewer_signs_in_with_the_company_provider_and_its_groups_decide_the_queues(
    browser: Any, servers: Servers, request: pytest.FixtureRequest, screenshot: Callable[[Any, str], Path]
) -> None:
    provider, reviewhub = servers.provider, servers.reviewhub
    Queue.objects.create(slug="deploys", name="Deploys")
    Queue.objects.create(slug="billing", name="Billing")
    # ReviewHub's own alice, who is not Acme's: the company sign-in must not land in her account.
    local_alice = User.objects.create_user("alice", password="local-password-1")
    provider.set_user(
        "alice",
        PROVIDER_PASSWORD,
        "alice@acme.test",
        ["reviewhub:deploys", "reviewhub:billing:supervisor", "sales"],
    )
    context = browser.new_context(base_url=reviewhub.url)
    # Each step waits for a page of one of two servers (and a third request between them) on a shared machine.
    context.set_default_timeout(WAIT_MS)
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and console_errors.append(message.text))
    try:
        page.goto("/")
        expect(page).to_have_url(f"{reviewhub.url}/accounts/login/?next=/")
        expect(page.get_by_label("Password")).to_have_count(0)  # passwords are off: the provider asks for one
        screenshot(page, "company-sign-in")
        page.get_by_role("link", name="Sign in with Acme SSO").click()
        expect(page).to_have_url(re.compile(re.escape(f"{provider.url}/accounts/login/?next=/o/authorize/")))
        expect(page.get_by_role("heading", name="Acme single sign-on")).to_be_visible()
        page.get_by_label("Username").fill("alice")
        page.get_by_label("Password").fill(PROVIDER_PASSWORD)
        page.get_by_role("button", name="Sign in to Acme").click()

        expect(page).to_have_url(f"{reviewhub.url}/")
        identity = CompanyIdentity.objects.select_related("user").get()
        user = identity.user
        assert identity.issuer == provider.issuer
        assert user.pk != local_alice.pk
        assert user.username.startswith("alice-")
        expect(page.locator(".whoami-name")).to_have_text(user.username)
        expect(page.locator("tr[data-queue]")).to_have_count(2)
        expect(page.get_by_role("link", name="Metrics")).to_be_visible()  # a supervisor sees metrics
        assert sorted(user.review_queues.values_list("slug", flat=True)) == ["deploys"]
        assert sorted(user.supervised_queues.values_list("slug", flat=True)) == ["billing"]
        assert not user.is_staff
        assert not local_alice.review_queues.exists()

        # Acme's administrator takes alice out of billing's supervisors; she signs out and in again. The provider
        # still knows her (its own session), so it sends her straight back.
        provider.set_user("alice", PROVIDER_PASSWORD, "alice@acme.test", ["reviewhub:deploys", "sales"])
        page.get_by_role("button", name="Sign out").click()
        expect(page).to_have_url(f"{reviewhub.url}/accounts/login/")
        page.get_by_role("link", name="Sign in with Acme SSO").click()

        expect(page).to_have_url(f"{reviewhub.url}/")
        expect(page.locator("tr[data-queue]")).to_have_count(1)
        expect(page.locator("tr[data-queue='deploys']")).to_be_visible()
        expect(page.get_by_role("link", name="Metrics")).to_have_count(0)
        assert CompanyIdentity.objects.get().user_id == user.pk  # the same account
        assert not user.supervised_queues.exists()
        assert sorted(user.review_queues.values_list("slug", flat=True)) == ["deploys"]
        response = page.goto("/queues/billing/")
        assert response is not None and response.status == 403
        assert not [text for text in console_errors if "Content Security Policy" in text]
    except BaseException:
        FAILURES.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(FAILURES / f"{request.node.name}.png"), full_page=True)
        raise
    finally:
        context.close()
