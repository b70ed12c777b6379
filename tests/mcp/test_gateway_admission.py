"""Who may use a gateway: the door rules `/mcp/` applies (one AGENT_RATE call per request; the upstream's queue must
be one the caller may post to, for an OAuth token one its consent covers), checked in-process: the verifier
(`GatewayKeyVerifier`) reads the key and the queue in one trip off the event loop, `admission` charges the rate on
the loop and refuses what the verifier found."""

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.cache import cache
from django.test import override_settings
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken

from elicitation.mcp import callers
from elicitation.mcp.callers import Caller
from elicitation.mcp.gateway.config import Upstream
from elicitation.mcp.gateway.server import POSTS_TO_QUEUE, GatewayKeyVerifier, admission, may_post
from elicitation.models import Agent, Queue
from elicitation.queue import access, accounts, keys
from elicitation.queue.transitions.intake import postable_queue
from reviewhub.rates import parse_rate

pytestmark = [pytest.mark.mcp, pytest.mark.django_db(transaction=True)]

UPSTREAM = Upstream(name="tools", queue="gw-ops", command=("python", "server.py"))


@pytest.fixture
def agent_key() -> tuple[int, str]:
    cache.clear()
    Queue.objects.create(slug="gw-ops", name="Gateway ops")
    Queue.objects.create(slug="other", name="Other")
    agent, key = accounts.create_agent("gw-agent", queue_slugs=["gw-ops"])
    return int(agent.pk), key


def act_as(token: AccessToken) -> None:
    """The rest of this test (its own task, so its own context) runs as the token's holder, as a request does after
    the SDK's AuthContextMiddleware."""
    auth_context_var.set(AuthenticatedUser(token))


async def test_an_agent_on_the_queue_is_admitted_until_its_rate_runs_out(agent_key: tuple[int, str]) -> None:
    token = await GatewayKeyVerifier(UPSTREAM).verify_token(agent_key[1])
    assert token is not None and token.claims == {POSTS_TO_QUEUE: True}
    act_as(token)

    with override_settings(AGENT_RATE=parse_rate("2/min")):
        outcomes = [(await admission())[1] for _ in range(3)]

    assert outcomes[:2] == [None, None]
    refused = outcomes[2]
    assert refused is not None and refused["code"] == "throttled" and refused["retryAfter"] > 0


async def test_an_agent_whose_key_does_not_cover_the_queue_is_refused(agent_key: tuple[int, str]) -> None:
    _, key = await sync_to_async(accounts.create_agent)("other-agent", queue_slugs=["other"])
    token = await GatewayKeyVerifier(UPSTREAM).verify_token(key)
    assert token is not None and token.claims == {POSTS_TO_QUEUE: False}
    act_as(token)

    caller, refused = await admission()

    assert refused is not None and refused["code"] == "invalid"
    assert "queue" in refused["fields"]
    assert caller.agent_id == int(token.client_id)


async def test_a_wrong_key_is_no_token_and_a_key_and_its_queue_are_read_in_one_trip(
    agent_key: tuple[int, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    trips: list[str] = []
    real_database_call = callers.database_call

    def counted(func: Any) -> Any:
        trips.append(func.__name__)
        return real_database_call(func)

    monkeypatch.setattr(callers, "database_call", counted)
    verifier = GatewayKeyVerifier(UPSTREAM)

    assert await verifier.verify_token(agent_key[1] + "x") is None
    assert await verifier.verify_token(agent_key[1]) is not None
    assert trips == ["resolve", "resolve"]


@pytest.mark.django_db
def test_an_oauth_token_must_have_consent_for_the_queue(agent_key: tuple[int, str]) -> None:
    agent_id = agent_key[0]
    assert may_post(Caller(agent_id, frozenset({"gw-ops"})), UPSTREAM)
    assert not may_post(Caller(agent_id, frozenset({"other"})), UPSTREAM)
    assert may_post(Caller(agent_id, None), UPSTREAM)


def test_the_gateway_and_intake_ask_one_rule_of_which_queues_an_agent_may_post_to(
    agent_key: tuple[int, str],
) -> None:
    agent_id = agent_key[0]
    other, other_key = accounts.create_agent("other-agent", queue_slugs=["other", "gw-ops"])
    other.queues.remove(Queue.objects.get(slug="gw-ops"))  # taken off a queue after its key was issued
    agents, slugs = [agent_id, other.pk, other.pk + 1000], ["gw-ops", "other", "missing"]

    gateway = {(a, s): access.agent_may_post(a, s) for a in agents for s in slugs}
    intake = {(a, s): postable_queue(a, s) is not None for a in agents for s in slugs}
    with_the_key = {  # the door's own question: the key's agent and its queue in one statement
        (a, s): keys.agent_for_key_posting_to(key, s)[1]
        for a, key in ((agent_id, agent_key[1]), (other.pk, other_key))
        for s in slugs
    }

    assert gateway == intake
    assert with_the_key == {key: allowed for key, allowed in gateway.items() if key[0] != other.pk + 1000}
    assert {key for key, allowed in gateway.items() if allowed} == {(agent_id, "gw-ops"), (other.pk, "other")}


def test_an_agent_key_and_its_queue_are_one_statement_and_only_a_valid_key_passes(
    agent_key: tuple[int, str], django_assert_num_queries: Any
) -> None:
    agent_id, key = agent_key
    verifier = GatewayKeyVerifier(UPSTREAM)
    with django_assert_num_queries(1):
        token = verifier.resolve(key)
    assert token is not None and token.client_id == str(agent_id) and token.claims == {POSTS_TO_QUEUE: True}

    prefix, secret = key.rsplit("_", 1)
    assert verifier.resolve(f"{prefix}_{'A' * len(secret)}") is None  # the row's prefix, another secret
    assert verifier.resolve("rh_00000000_" + secret) is None  # no such prefix
    with django_assert_num_queries(0):
        assert verifier.resolve("rh_short") is None  # no prefix at all: nothing read
    accounts.revoke_agent(Agent.objects.get(pk=agent_id))
    assert verifier.resolve(key) is None
    assert keys.agent_for_key_posting_to(key, "gw-ops") == (None, False)
