"""Who may use a gateway: the door rules `/mcp/` applies (one AGENT_RATE call per request; the upstream's queue must
be one the caller may post to, for an OAuth token one its consent covers), checked in-process on `admission`."""

import pytest
from django.core.cache import cache
from django.test import override_settings

from elicitation.mcp.callers import Caller
from elicitation.mcp.gateway.config import Upstream
from elicitation.mcp.gateway.server import admission
from elicitation.models import Queue
from elicitation.queue import access, accounts
from elicitation.queue.transitions.intake import postable_queue
from reviewhub.rates import parse_rate

pytestmark = [pytest.mark.mcp, pytest.mark.django_db]

UPSTREAM = Upstream(name="tools", queue="gw-ops", command=("python", "server.py"))


@pytest.fixture
def agent_id() -> int:
    cache.clear()
    Queue.objects.create(slug="gw-ops", name="Gateway ops")
    Queue.objects.create(slug="other", name="Other")
    agent, _ = accounts.create_agent("gw-agent", queue_slugs=["gw-ops"])
    return int(agent.pk)


def test_an_agent_on_the_queue_is_admitted_until_its_rate_runs_out(agent_id: int) -> None:
    with override_settings(AGENT_RATE=parse_rate("2/min")):
        outcomes = [admission(Caller(agent_id, None), UPSTREAM) for _ in range(3)]

    assert outcomes[:2] == [None, None]
    refused = outcomes[2]
    assert refused is not None and refused["code"] == "throttled" and refused["retryAfter"] > 0


def test_an_agent_whose_key_does_not_cover_the_queue_is_refused(agent_id: int) -> None:
    other, _ = accounts.create_agent("other-agent", queue_slugs=["other"])

    refused = admission(Caller(other.pk, None), UPSTREAM)

    assert refused is not None and refused["code"] == "invalid"
    assert "queue" in refused["fields"]


def test_an_oauth_token_must_have_consent_for_the_queue(agent_id: int) -> None:
    assert admission(Caller(agent_id, frozenset({"gw-ops"})), UPSTREAM) is None
    refused = admission(Caller(agent_id, frozenset({"other"})), UPSTREAM)
    assert refused is not None and refused["code"] == "invalid"


def test_the_gateway_and_intake_ask_one_rule_of_which_queues_an_agent_may_post_to(agent_id: int) -> None:
    other, _ = accounts.create_agent("other-agent", queue_slugs=["other", "gw-ops"])
    other.queues.remove(Queue.objects.get(slug="gw-ops"))  # taken off a queue after its key was issued
    agents, slugs = [agent_id, other.pk, other.pk + 1000], ["gw-ops", "other", "missing"]

    gateway = {(a, s): access.agent_may_post(a, s) for a in agents for s in slugs}
    intake = {(a, s): postable_queue(a, s) is not None for a in agents for s in slugs}

    assert gateway == intake
    assert {key for key, allowed in gateway.items() if allowed} == {(agent_id, "gw-ops"), (other.pk, "other")}
