"""The account a company sign-in lands in, and the queue access its groups give: found by the provider's `sub`,
never by a name or an address; memberships and supervision set to exactly what the groups say at every sign-in."""

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from elicitation.models import Queue
from elicitation.reviewer.company_sign_in.models import CompanyIdentity
from elicitation.reviewer.company_sign_in.queue_grants import QueueGrants, queue_grants
from tests.security.oidc_stub import StubProvider, configured_for_stub, sign_in, signed_in_user_id


@pytest.fixture
def stub(settings: Any, db: None) -> Iterator[StubProvider]:
    with configured_for_stub(settings) as provider:
        yield provider


@pytest.fixture
def deploys(db: None) -> Queue:
    return Queue.objects.create(slug="deploys", name="Deploys")


@pytest.fixture
def billing(db: None) -> Queue:
    return Queue.objects.create(slug="billing", name="Billing")


def slugs(queues: Any) -> list[str]:
    return sorted(queues.values_list("slug", flat=True))


def test_groups_name_queues_to_review_and_to_supervise() -> None:
    grants = queue_grants(
        ["reviewhub:deploys", "reviewhub:billing:supervisor", "engineering", "other:deploys"],
        prefix="reviewhub:",
        mapping={},
    )

    assert grants == QueueGrants(member_of=frozenset({"deploys"}), supervisor_of=frozenset({"billing"}))


def test_mapped_group_names_grant_like_prefixed_ones_and_an_empty_prefix_turns_the_convention_off() -> None:
    mapping = {"0b5c-entra-id": ("deploys", "billing:supervisor")}

    grants = queue_grants(["0b5c-entra-id", "reviewhub:ops"], prefix="", mapping=mapping)

    assert grants == QueueGrants(member_of=frozenset({"deploys"}), supervisor_of=frozenset({"billing"}))


def test_the_first_sign_in_makes_an_account_with_the_access_its_groups_give(
    stub: StubProvider, client: Client, deploys: Queue, billing: Queue
) -> None:
    sign_in(
        client, stub, groups=["reviewhub:deploys", "reviewhub:billing:supervisor", "reviewhub:no-such-queue"]
    )

    user = User.objects.get(company_identity__subject="user-0001")
    assert slugs(user.review_queues) == ["deploys"]
    assert slugs(user.supervised_queues) == ["billing"]
    assert not Queue.objects.filter(slug="no-such-queue").exists()  # queues are never made from a claim


def test_a_group_removed_at_the_provider_is_access_removed_at_the_next_sign_in(
    stub: StubProvider, client: Client, deploys: Queue, billing: Queue
) -> None:
    sign_in(client, stub, groups=["reviewhub:deploys", "reviewhub:billing:supervisor"])
    user = User.objects.get(company_identity__subject="user-0001")
    billing.members.add(user)  # an admin's hand-made membership: the provider manages this account's access
    client.logout()

    sign_in(client, stub, groups=["reviewhub:deploys"])

    assert signed_in_user_id(client) == str(user.pk)
    assert slugs(user.review_queues) == ["deploys"]
    assert slugs(user.supervised_queues) == []


def test_a_missing_groups_claim_removes_every_access(
    stub: StubProvider, client: Client, deploys: Queue
) -> None:
    sign_in(client, stub, groups=["reviewhub:deploys"])
    client.logout()

    sign_in(client, stub, groups=None)

    user = User.objects.get(company_identity__subject="user-0001")
    assert slugs(user.review_queues) == []


def test_other_accounts_memberships_are_left_alone(
    stub: StubProvider, client: Client, deploys: Queue, make_reviewer: Any
) -> None:
    local = make_reviewer("bob", deploys, supervisor=True)

    sign_in(client, stub, groups=[])

    assert slugs(local.review_queues) == ["deploys"]
    assert slugs(local.supervised_queues) == ["deploys"]


def test_the_groups_claim_is_read_from_the_claim_the_settings_name(
    stub: StubProvider, client: Client, settings: Any, deploys: Queue
) -> None:
    settings.OIDC_GROUPS_CLAIM = "roles"

    sign_in(client, stub, groups=["reviewhub:billing"], roles=["reviewhub:deploys"])

    assert slugs(User.objects.get(company_identity__subject="user-0001").review_queues) == ["deploys"]


def test_a_local_account_with_the_same_username_and_email_is_never_signed_into(
    stub: StubProvider, client: Client, deploys: Queue
) -> None:
    local = User.objects.create_user("Alice", email="alice@acme.test", password="local-password")

    sign_in(client, stub, preferred_username="alice", email="alice@acme.test", groups=["reviewhub:deploys"])

    company = User.objects.get(company_identity__subject="user-0001")
    assert company.pk != local.pk
    assert signed_in_user_id(client) == str(company.pk)
    assert company.username.startswith("alice-")
    assert slugs(local.review_queues) == []
    local.refresh_from_db()
    assert local.check_password("local-password")


def test_the_same_subject_lands_in_the_same_account_whatever_name_it_has_now(
    stub: StubProvider, client: Client
) -> None:
    sign_in(client, stub, preferred_username="alice", email="alice@acme.test")
    client.logout()

    sign_in(client, stub, preferred_username="alice.smith", email="alice.smith@acme.test", given_name="Alice")

    user = User.objects.get()
    assert (user.username, user.email, user.first_name) == ("alice", "alice.smith@acme.test", "Alice")
    assert signed_in_user_id(client) == str(user.pk)


def test_another_subject_with_the_same_email_gets_an_account_of_its_own(
    stub: StubProvider, client: Client
) -> None:
    sign_in(client, stub, sub="user-0001", preferred_username="alice")
    client.logout()

    sign_in(client, stub, sub="user-0002", preferred_username="alice")

    assert CompanyIdentity.objects.count() == 2
    assert signed_in_user_id(client) == str(User.objects.get(company_identity__subject="user-0002").pk)


def test_an_unverified_email_is_not_kept(stub: StubProvider, client: Client) -> None:
    sign_in(client, stub, email="ceo@acme.test", email_verified=False)

    assert User.objects.get().email == ""


def test_no_group_makes_an_account_staff(stub: StubProvider, client: Client) -> None:
    sign_in(client, stub, groups=["reviewhub:staff", "reviewhub:admin", "admin", "staff"])

    user = User.objects.get()
    assert not user.is_staff
    assert not user.is_superuser
    assert client.get("/admin/").status_code == 302  # to the admin's sign-in


def test_an_account_an_admin_deactivated_cannot_sign_in(stub: StubProvider, client: Client) -> None:
    sign_in(client, stub)
    User.objects.update(is_active=False)
    client.logout()

    response = sign_in(client, stub)

    assert response["Location"] == "/accounts/login/"
    assert signed_in_user_id(client) is None


def test_a_session_of_an_account_deactivated_since_ends_at_its_next_request(
    stub: StubProvider, client: Client
) -> None:
    sign_in(client, stub)
    assert client.get("/").status_code == 200

    User.objects.update(is_active=False)

    assert client.get("/").status_code == 302
