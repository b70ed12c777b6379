"""One contract at every door (docs/contract.md): each operation through each door as each kind of caller.

An allowed call makes the same change whichever door it came through; a refused one answers the same error code
(the same JSON body wherever the door speaks the REST vocabulary) and changes nothing. Each row has its losing side:
another agent, a reviewer of another queue, a caller whose rate is spent, a caller without a valid credential.

Two classes, because of who sees what in the database:

- `TestReviewerDoors`: claim, answer, approve, remember, rules, the operator's close, read and list through the
  reviewer API, the pages, Slack and the admin, all in the test's thread. One world for the class, committed once,
  and every cell in a transaction rolled back after it.
- `TestAgentDoors`: create, read, cancel and list through REST and MCP. MCP is reached in-process through the ASGI
  application uvicorn serves (`reviewhub.asgi.application`: MCPEndpoint, the SDK's bearer stack, ReviewHub's rate
  and refusal rules, the tool), with the agent's key and with an OAuth token acting for it. The MCP door reads the
  database from threads of its own, which see only committed rows: one world per row, each caller a subtest.

A cell marked `xfail(strict=True)` is a contract gap: that door does not keep the contract yet (docs/contract.md,
"Gaps"). When it is fixed the cell passes, and strict xfail fails the suite until the mark is removed.
"""

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from mcp import Client as MCPClient
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from elicitation.delivery import slack
from elicitation.delivery.slack_interactions import NOT_A_REVIEWER
from elicitation.models import Agent, AnswerRule, Approval, ElicitationRequest, Queue, ReviewerReach
from elicitation.queue import accounts, rules, transitions
from elicitation.queue.rules.validation import ROUTE_TARGET
from reviewhub.asgi import application
from reviewhub.rates import parse_rate
from tests.conftest import Clock
from tests.delivery.reach.conftest import (  # noqa: F401 - slack_api is a fixture
    SIGNING_SECRET,
    FakeSlack,
    interaction_body,
    signed_headers,
    slack_api,
)
from tests.mcp.test_oauth_server import code_from, consent, exchange, pkce, register

# One yes/no question: Slack's Yes and No buttons answer it completely, as the page and the API do.
YES_NO: dict[str, Any] = {
    "type": "object",
    "properties": {"ok": {"type": "boolean", "title": "Ship it?"}},
    "required": ["ok"],
}
YES = {"ok": True}
ASK: dict[str, Any] = {"message": "Ship 1.4?", "queue": "payments", "requestedSchema": YES_NO}
REVIEWERS = ("member", "member2", "non_member", "supervisor", "staff")
NOT_REVIEWERS = ("anonymous", "agent_key")


# --- the vocabulary (queue/errors.py, api/errors.py) and how each door renders it ---------------------------------


@dataclass(frozen=True)
class Outcome:
    """What a cell comes to: allowed (`code` None), or refused with the REST status and error code, and, when given,
    the exact `detail` and `fields` of the body."""

    code: str | None
    status: int = 200
    detail: str | None = None
    fields: dict[str, str] | None = None

    @property
    def allowed(self) -> bool:
        return self.code is None


ALLOWED = Outcome(None)
THROTTLED = Outcome("throttled", 429)
UNAUTHENTICATED = Outcome("unauthenticated", 401)
NOT_A_MEMBER = Outcome("forbidden", 403, "You are not a reviewer of this queue.")
NOT_A_SUPERVISOR = Outcome("forbidden", 403, "Only a queue supervisor can do that.")
NO_SUCH_REQUEST = Outcome("not_found", 404, "No such request.")
HELD = Outcome("conflict", 409, "Cannot claim: the request is claimed.")
ANSWERED = Outcome("conflict", 409, "Cannot claim: the request is completed.")
APPROVED_TWICE = Outcome("conflict", 409, "Your approval was not counted: you already approved this request.")
STAFF_ONLY = Outcome("staff_only", 302)  # the admin's refusal: its sign-in page, for whoever is not staff
UNKNOWN_QUEUE = Outcome(
    "invalid", 400, "Unknown queue.", {"queue": "unknown queue, or not one this key may post to"}
)
NOT_A_RULE = Outcome("invalid", 400, "The rule is not valid.")
KEY_NOT_ACCEPTED = "Invalid API key: unknown, revoked, or not a key this endpoint accepts."


def assert_rest(response: Any, expected: Outcome) -> Any:
    """REST: the status and `{code, detail, fields?}`, plus `retryAfter` matching Retry-After over the rate."""
    body = response.json() if response.content else None
    if expected.allowed:
        assert response.status_code in (200, 201), (response.status_code, body)
        return body
    assert response.status_code == expected.status, body
    assert body["code"] == expected.code, body
    if expected.code == "throttled":
        assert body["retryAfter"] == int(response["Retry-After"]) >= 1, body
    if expected.detail is not None:
        assert body["detail"] == expected.detail, body
    if expected.fields is not None:
        assert body["fields"] == expected.fields, body
    return body


def assert_mcp(result: CallToolResult, expected: Outcome, rest_body: Any = None) -> Any:
    """MCP (mcp/service_calls.py): a refusal is a tool error whose text is the REST body as JSON and whose
    structuredContent is that same body; `rest_body`, when given, is what REST answered the same caller."""
    if expected.allowed:
        assert not result.is_error, result.content
        return result.structured_content
    assert result.is_error, result.structured_content
    body = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert body == result.structured_content
    assert body["code"] == expected.code, body
    if expected.code == "throttled":
        assert body["retryAfter"] >= 1, body
    if expected.detail is not None:
        assert body["detail"] == expected.detail, body
    if expected.fields is not None:
        assert body["fields"] == expected.fields, body
    if rest_body is not None:
        assert body == rest_body
    return body


def assert_page(response: Any, expected: Outcome, *, admin: bool = False) -> None:
    """Pages (reviewer/errors.py): the error's status with its detail on the page (a conflict in the page's own
    sentence); without a session, the sign-in page. The admin sends whoever is not staff to its own sign-in."""
    if expected.allowed:
        assert response.status_code in (200, 302), response.status_code
        assert "/login/" not in response.get("Location", ""), response["Location"]
        return
    if expected in (UNAUTHENTICATED, STAFF_ONLY):
        assert response.status_code == 302
        assert response["Location"].startswith("/admin/login/" if admin else "/accounts/login/")
        return
    assert response.status_code == expected.status, response.content[:500]
    if expected.detail is not None and expected.code != "conflict":
        assert expected.detail in response.content.decode(), response.content[:2000]


# --- the world: queues, agents, reviewers, their tokens and Slack links --------------------------------------------


@dataclass
class World:
    payments: Queue
    approvals: Queue  # every request here needs two approvals
    other: Queue
    agents: dict[str, Agent]
    keys: dict[str, str]
    users: dict[str, User]
    tokens: dict[str, str]  # reviewer API tokens (`rhr_…`)

    def user(self, name: str) -> User:
        return User.objects.get(pk=self.users[name].pk)

    def ask(self, queue: Queue | None = None, agent: str = "owner") -> ElicitationRequest:
        request, _ = transitions.create_request(
            agent=self.agents[agent],
            queue_slug=(queue or self.payments).slug,
            message="Ship 1.4?",
            mode="form",
            requested_schema=YES_NO,
        )
        return request


def build_world() -> World:
    payments = Queue.objects.create(slug="payments", name="Payments", lease_seconds=60)
    approvals = Queue.objects.create(slug="approvals", name="Approvals", lease_seconds=60)
    other = Queue.objects.create(slug="other", name="Other", lease_seconds=60)
    rules.replace_policy(approvals, {"quorum": {"approvals": 2}})
    scopes = {
        "owner": ["payments", "approvals", "other"],
        "another_agent": ["payments"],
        "other_queue_agent": ["other"],
        "revoked": ["payments"],
    }
    agents: dict[str, Agent] = {}
    keys: dict[str, str] = {}
    for name, slugs in scopes.items():
        agents[name], keys[name] = accounts.create_agent(name, queue_slugs=slugs)
    accounts.revoke_agent(agents["revoked"])
    # No passwords: sessions come from force_login.
    users = {
        name: User.objects.create(username=name, is_staff=name == "staff", is_superuser=name == "staff")
        for name in REVIEWERS
    }
    for queue in (payments, approvals):
        queue.members.add(users["member"], users["member2"], users["supervisor"])
        queue.supervisors.add(users["supervisor"])
    other.members.add(users["non_member"])
    for user in users.values():
        ReviewerReach.objects.create(user=user, slack_user_id=slack_id(user.username))
    tokens = {name: accounts.create_reviewer_token(user, "contract") for name, user in users.items()}
    return World(payments, approvals, other, agents, keys, users, tokens)


def slack_id(username: str) -> str:
    return "U" + username.upper().replace("_", "")


# --- reviewer rows --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cell:
    """One caller at one door. `caller` names the kind of caller or situation; `account` the reviewer acting
    (`anonymous` and `agent_key` are no reviewer); `gap` marks a cell the door does not keep yet."""

    door: str
    caller: str
    expected: Outcome
    account: str = ""
    gap: str = ""

    @property
    def acting(self) -> str:
        return self.account or (self.caller if self.caller in (*REVIEWERS, *NOT_REVIEWERS) else "member")

    def param(self) -> Any:
        marks = [pytest.mark.xfail(strict=True, reason=self.gap)] if self.gap else []
        return pytest.param(self, id=f"{self.door}-{self.caller}", marks=marks)


def cells(*rows: Cell) -> list[Any]:
    return [row.param() for row in rows]


def rest(world: World, cell: Cell) -> Client:
    """The reviewer API as a script calls it: the acting reviewer's `rhr_` token (or an agent's key)."""
    if cell.acting == "agent_key":
        return Client(HTTP_AUTHORIZATION=f"Bearer {world.keys['owner']}")
    if cell.acting == "anonymous":
        return Client()
    return Client(HTTP_AUTHORIZATION=f"Bearer {world.tokens[cell.acting]}")


def browser(world: World, cell: Cell) -> Client:
    """The pages and the admin: the acting reviewer's session."""
    client = Client()
    if cell.acting in REVIEWERS:
        client.force_login(world.user(cell.acting))
    return client


def spend_reviewer_rate(world: World, cell: Cell, settings: Any) -> None:
    """REVIEWER_RATE at one call an hour, and that call made through the reviewer API by the acting reviewer."""
    if cell.caller == "rate_spent":
        settings.REVIEWER_RATE = parse_rate("1/hour")
        assert rest(world, cell).get("/api/v1/review/queues").status_code == 200


class Slack:
    """The interaction endpoint, signed as Slack signs, as the Slack user linked to the acting reviewer; what
    reached Slack's Web API (the ephemeral messages) is recorded by the stand-in `slack_api`."""

    def __init__(self, api: FakeSlack) -> None:
        self.api = api

    def press_yes(self, cell: Cell, request_id: Any, secret: str = SIGNING_SECRET) -> Any:
        user = slack_id(cell.acting) if cell.acting in REVIEWERS else "UNLINKED"
        payload = {
            "type": "block_actions",
            "api_app_id": uuid.uuid4().hex,  # unread by ReviewHub; keeps each signed body unique (not a replay)
            "user": {"id": user},
            "channel": {"id": "C1"},
            "trigger_id": "trigger-1",
            "actions": [{"action_id": slack.YES, "value": str(request_id)}],
        }
        return self.post(interaction_body(payload), secret)

    def submit(self, cell: Cell, request_id: Any, values: dict[str, Any]) -> Any:
        payload = {
            "type": "view_submission",
            "api_app_id": uuid.uuid4().hex,
            "user": {"id": slack_id(cell.acting)},
            "view": {
                "callback_id": slack.MODAL_CALLBACK,
                "private_metadata": str(request_id),
                "blocks": [{"type": "input", "block_id": slack.BLOCK_PREFIX + "ok"}],
                "state": {"values": values},
            },
        }
        return self.post(interaction_body(payload))

    def post(self, body: bytes, secret: str = SIGNING_SECRET) -> Any:
        return Client().post(
            "/api/v1/slack/interactions",
            body,
            content_type="application/x-www-form-urlencoded",
            headers=signed_headers(body, secret=secret),
        )

    def told(self) -> list[str]:
        return [str(call.body.get("text")) for call in self.api.named("chat.postEphemeral")]


def assert_slack(door: Slack, response: Any, expected: Outcome) -> None:
    """Slack: 200 either way (Slack shows the person nothing else); a refusal is an ephemeral message only they
    see: that they are not a reviewer of the queue (a missing request and an unlinked Slack user alike), or
    "Not answered: " and the error's detail."""
    assert response.status_code == 200, response.content
    if expected.allowed:
        assert door.told() == []
    elif expected.code in ("forbidden", "not_found", "unauthenticated"):
        assert door.told() == [NOT_A_REVIEWER]
    elif expected.code == "throttled":
        assert len(door.told()) == 1  # the contract asks for a refusal the person sees; its words are Slack's
    else:
        assert door.told() == [f"Not answered: {expected.detail}"]


def answer_state(request_id: Any) -> tuple[str, str, str | None]:
    found = ElicitationRequest.objects.select_related("answered_by").get(pk=request_id)
    return found.status, found.action, found.answered_by.username if found.answered_by else None


def claim_state(request_id: Any) -> tuple[str, str | None]:
    found = ElicitationRequest.objects.select_related("claimed_by").get(pk=request_id)
    return found.status, found.claimed_by.username if found.claimed_by else None


def quorum_state(request_id: Any) -> tuple[str, int]:
    approvals = Approval.objects.filter(request_id=request_id).count()
    return ElicitationRequest.objects.get(pk=request_id).status, approvals


def rule_names(queue: Queue) -> list[str]:
    return list(AnswerRule.objects.filter(queue=queue).order_by("pk").values_list("name", flat=True))


CLAIM = cells(
    Cell("rest", "member", ALLOWED),
    Cell("rest", "supervisor", ALLOWED),
    Cell("rest", "staff", ALLOWED),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "held_by_another", HELD),
    Cell("rest", "anonymous", UNAUTHENTICATED),
    Cell("rest", "agent_key", UNAUTHENTICATED),
    Cell("rest", "rate_spent", THROTTLED),
    Cell("page", "member", ALLOWED),
    Cell("page", "supervisor", ALLOWED),
    Cell("page", "staff", ALLOWED),
    Cell("page", "non_member", NOT_A_MEMBER),
    Cell("page", "held_by_another", HELD),
    Cell("page", "anonymous", UNAUTHENTICATED),
    Cell("page", "agent_key", UNAUTHENTICATED),
    Cell("page", "rate_spent", THROTTLED),
)
ANSWER = cells(
    Cell("rest", "member", ALLOWED),
    Cell("rest", "supervisor", ALLOWED),
    Cell("rest", "staff", ALLOWED),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "answered_by_another", ANSWERED),
    Cell("rest", "missing_request", NO_SUCH_REQUEST),
    Cell("rest", "anonymous", UNAUTHENTICATED),
    Cell("rest", "rate_spent", THROTTLED),
    Cell("page", "member", ALLOWED),
    Cell("page", "supervisor", ALLOWED),
    Cell("page", "staff", ALLOWED),
    Cell("page", "non_member", NOT_A_MEMBER),
    Cell("page", "answered_by_another", ANSWERED),
    Cell("page", "missing_request", NO_SUCH_REQUEST),
    Cell("page", "anonymous", UNAUTHENTICATED),
    Cell("page", "rate_spent", THROTTLED),
    Cell("slack", "member", ALLOWED),
    Cell("slack", "supervisor", ALLOWED),
    Cell("slack", "staff", ALLOWED),
    Cell("slack", "non_member", NOT_A_MEMBER),
    Cell("slack", "answered_by_another", ANSWERED),
    Cell("slack", "missing_request", NO_SUCH_REQUEST),
    Cell("slack", "anonymous", UNAUTHENTICATED),  # a Slack user linked to no reviewer
    Cell("slack", "unsigned", Outcome("bad_signature", 401)),  # not Slack: signed with another secret
    Cell("slack", "rate_spent", THROTTLED),
)
APPROVE = cells(
    Cell("rest", "second_approver", ALLOWED),
    Cell("rest", "first_approver_again", APPROVED_TWICE, account="member2"),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "rate_spent", THROTTLED),
    Cell("page", "second_approver", ALLOWED),
    Cell("page", "first_approver_again", APPROVED_TWICE, account="member2"),
    Cell("page", "non_member", NOT_A_MEMBER),
    Cell("page", "rate_spent", THROTTLED),
    Cell("slack", "second_approver", ALLOWED),
    Cell("slack", "first_approver_again", APPROVED_TWICE, account="member2"),
    Cell("slack", "non_member", NOT_A_MEMBER),
    Cell("slack", "rate_spent", THROTTLED),
)
REMEMBER = cells(
    Cell("page", "supervisor", ALLOWED),
    Cell("page", "staff", ALLOWED),
    Cell("page", "member", Outcome("forbidden", 403, "You may not remember decisions in this queue.")),
    Cell("page", "non_member", NOT_A_MEMBER),
    Cell("page", "anonymous", UNAUTHENTICATED),
)
RULES_READ = cells(
    Cell("rest", "member", ALLOWED),
    Cell("rest", "supervisor", ALLOWED),
    Cell("rest", "staff", ALLOWED),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "anonymous", UNAUTHENTICATED),
    Cell("rest", "rate_spent", THROTTLED),
    Cell("admin", "staff", ALLOWED),
    Cell("admin", "supervisor", STAFF_ONLY),
    Cell("admin", "member", STAFF_ONLY),
)
UNKNOWN_MATCH_FIELD = "unknown field; match on "
RULES_WRITE = cells(
    Cell("rest", "supervisor", ALLOWED),
    Cell("rest", "staff", ALLOWED),
    Cell("rest", "member", NOT_A_SUPERVISOR),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "anonymous", UNAUTHENTICATED),
    Cell("rest", "rate_spent", THROTTLED, account="supervisor"),
    Cell("rest", "invalid_rule", NOT_A_RULE, account="supervisor"),
    Cell("rest", "route_into_a_queue_not_supervised", NOT_A_RULE, account="supervisor"),
    Cell("admin", "staff", ALLOWED),
    Cell("admin", "supervisor", STAFF_ONLY),
    Cell("admin", "invalid_rule", NOT_A_RULE, account="staff"),
    Cell("admin", "rate_spent", THROTTLED, account="staff"),
)
CLOSE = cells(
    Cell("admin", "staff", ALLOWED),
    Cell("admin", "anonymous", STAFF_ONLY),
    Cell("admin", "supervisor", STAFF_ONLY),
    Cell("admin", "member", STAFF_ONLY),
)
READ = cells(
    Cell("rest", "member", ALLOWED),
    Cell("rest", "staff", ALLOWED),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "missing_request", NO_SUCH_REQUEST),
    Cell("rest", "anonymous", UNAUTHENTICATED),
    Cell("rest", "rate_spent", THROTTLED),
    Cell("page", "member", ALLOWED),
    Cell("page", "staff", ALLOWED),
    Cell("page", "non_member", NOT_A_MEMBER),
    Cell("page", "missing_request", NO_SUCH_REQUEST),
    Cell("page", "anonymous", UNAUTHENTICATED),
    Cell("page", "rate_spent", THROTTLED),
)
LIST = cells(
    Cell("rest", "member", ALLOWED),
    Cell("rest", "staff", ALLOWED),
    Cell("rest", "non_member", NOT_A_MEMBER),
    Cell("rest", "anonymous", UNAUTHENTICATED),
    Cell("rest", "rate_spent", THROTTLED),
    Cell("page", "member", ALLOWED),
    Cell("page", "staff", ALLOWED),
    Cell("page", "non_member", NOT_A_MEMBER),
    Cell("page", "anonymous", UNAUTHENTICATED),
    Cell("page", "rate_spent", THROTTLED),
)


@pytest.fixture(scope="class")
def world(django_db_setup: None, django_db_blocker: Any) -> Iterator[World]:
    """Committed once for TestReviewerDoors; each cell's own changes roll back with its test's transaction. The
    flush after the class leaves the database as a transactional test leaves it."""
    with django_db_blocker.unblock():
        built = build_world()
    yield built
    with django_db_blocker.unblock():
        call_command("flush", interactive=False, verbosity=0)


@pytest.fixture
def slack_door(slack_api: FakeSlack) -> Slack:  # noqa: F811
    return Slack(slack_api)


@pytest.mark.django_db
class TestReviewerDoors:
    @pytest.mark.parametrize("cell", CLAIM)
    def test_claim_is_one_rule_through_the_api_and_the_page(
        self, world: World, cell: Cell, settings: Any
    ) -> None:
        request = world.ask()
        if cell.caller == "held_by_another":
            transitions.claim_request(request.pk, user=world.user("member2"))
        spend_reviewer_rate(world, cell, settings)
        before = claim_state(request.pk)

        if cell.door == "rest":
            body = assert_rest(
                rest(world, cell).post(f"/api/v1/review/requests/{request.pk}/claim"), cell.expected
            )
            if cell.expected == HELD:
                assert body["status"] == "claimed"
        else:
            response = browser(world, cell).post(f"/requests/{request.pk}/", {"action": "claim"})
            assert_page(response, cell.expected)
            if cell.expected == HELD:
                assert "That did not work: member2 holds this request now." in response.content.decode()

        expected_state = ("claimed", cell.acting) if cell.expected.allowed else before
        assert claim_state(request.pk) == expected_state

    @pytest.mark.parametrize("cell", ANSWER)
    def test_an_answer_is_one_rule_through_the_api_the_page_and_slack(
        self, world: World, cell: Cell, settings: Any, slack_door: Slack
    ) -> None:
        request = world.ask()
        target = uuid.uuid4() if cell.caller == "missing_request" else request.pk
        if cell.caller == "answered_by_another":
            transitions.claim_request(request.pk, user=world.user("member2"))
            transitions.respond(request.pk, user=world.user("member2"), action="accept", content=YES)
        spend_reviewer_rate(world, cell, settings)
        before = answer_state(request.pk)

        if cell.door == "rest":
            # A script claims, then answers; the page and Slack claim as part of answering.
            client = rest(world, cell)
            response = client.post(f"/api/v1/review/requests/{target}/claim")
            if response.status_code == 200:
                response = client.post(
                    f"/api/v1/review/requests/{target}/respond",
                    {"action": "accept", "content": YES},
                    content_type="application/json",
                )
            body = assert_rest(response, cell.expected)
            if cell.expected == ANSWERED:
                assert body["status"] == "completed"
        elif cell.door == "page":
            response = browser(world, cell).post(
                f"/requests/{target}/", {"action": "accept", "answer-ok": "true"}
            )
            assert_page(response, cell.expected)
            if cell.expected == ANSWERED:
                assert "Your answer was not sent" in response.content.decode()
        elif cell.caller == "unsigned":
            assert_rest(slack_door.press_yes(cell, target, secret="not-slacks-secret"), cell.expected)
            assert slack_door.told() == []
        else:
            assert_slack(slack_door, slack_door.press_yes(cell, target), cell.expected)

        expected_state = ("completed", "accept", cell.acting) if cell.expected.allowed else before
        assert answer_state(request.pk) == expected_state

    def test_an_invalid_answer_is_refused_with_the_same_reason_through_the_api_and_slack(
        self, world: World, slack_door: Slack
    ) -> None:
        request = world.ask()
        member = Cell("rest", "member", ALLOWED)
        client = rest(world, member)
        assert client.post(f"/api/v1/review/requests/{request.pk}/claim").status_code == 200

        api = client.post(
            f"/api/v1/review/requests/{request.pk}/respond",
            {"action": "accept", "content": {}},
            content_type="application/json",
        )
        modal = slack_door.submit(member, request.pk, {})
        page = browser(world, member).post(f"/requests/{request.pk}/", {"action": "accept"})

        body = assert_rest(api, Outcome("invalid", 400, "The answers are not valid."))
        assert list(body["fields"]) == ["content.ok"]
        # Slack's modal shows the same reason (schemas.validate_content), under the question's input block.
        assert modal.status_code == 200
        assert modal.json() == {
            "response_action": "errors",
            "errors": {slack.BLOCK_PREFIX + "ok": body["fields"]["content.ok"]},
        }
        # The page refuses it in its form's own words, before anything is sent.
        assert page.status_code == 400
        assert answer_state(request.pk) == ("claimed", "", None)

    @pytest.mark.parametrize("cell", APPROVE)
    def test_a_quorum_approval_is_one_rule_through_the_api_the_page_and_slack(
        self, world: World, cell: Cell, settings: Any, slack_door: Slack
    ) -> None:
        request = world.ask(world.approvals)
        transitions.respond(request.pk, user=world.user("member2"), action="accept", content=YES)  # proposes
        spend_reviewer_rate(world, cell, settings)
        assert quorum_state(request.pk) == ("pending", 1)

        if cell.door == "rest":
            response = rest(world, cell).post(
                f"/api/v1/review/requests/{request.pk}/respond",
                {"action": "accept"},
                content_type="application/json",
            )
            assert_rest(response, cell.expected)
        elif cell.door == "page":
            response = browser(world, cell).post(f"/requests/{request.pk}/", {"action": "approve"})
            assert_page(response, cell.expected)
            if cell.expected == APPROVED_TWICE:
                assert "you already approved this request" in response.content.decode()
        else:
            assert_slack(slack_door, slack_door.press_yes(cell, request.pk), cell.expected)

        assert quorum_state(request.pk) == (("completed", 2) if cell.expected.allowed else ("pending", 1))

    @pytest.mark.parametrize("cell", REMEMBER)
    def test_remembering_a_decision_is_for_supervisors_on_the_page(self, world: World, cell: Cell) -> None:
        request = world.ask()
        transitions.claim_request(request.pk, user=world.user("member"))
        transitions.respond(request.pk, user=world.user("member"), action="accept", content=YES)

        response = browser(world, cell).post(
            f"/requests/{request.pk}/remember", {"days": "7", "confirm": "yes"}
        )

        assert_page(response, cell.expected)
        remembered = AnswerRule.objects.filter(remembered_from=request.pk).count()
        assert remembered == (1 if cell.expected.allowed else 0)

    @pytest.mark.parametrize("cell", RULES_READ)
    def test_a_queues_rules_are_read_by_its_reviewers_over_rest_and_by_staff_in_the_admin(
        self, world: World, cell: Cell, settings: Any
    ) -> None:
        rules.add_rule(
            world.payments, {"name": "no refunds", "match": {"tool": "refund"}, "action": "decline"}
        )
        spend_reviewer_rate(world, cell, settings)

        if cell.door == "rest":
            body = assert_rest(rest(world, cell).get("/api/v1/queues/payments/rules"), cell.expected)
            if cell.expected.allowed:
                assert [rule["name"] for rule in body["rules"]] == ["no refunds"]
        else:
            response = browser(world, cell).get("/admin/elicitation/answerrule/")
            assert_page(response, cell.expected, admin=True)
            if cell.expected.allowed:
                assert "no refunds" in response.content.decode()

    @pytest.mark.parametrize("cell", RULES_WRITE)
    def test_a_rule_is_written_by_supervisors_over_rest_and_by_staff_in_the_admin(
        self, world: World, cell: Cell, settings: Any
    ) -> None:
        rule: dict[str, Any] = {"name": "contract rule", "action": "decline"}
        if cell.caller == "invalid_rule":
            rule["match"] = {"nope": 1}
        if cell.caller == "route_into_a_queue_not_supervised":
            rule.update({"action": "route", "queue": world.other.slug})
        spend_reviewer_rate(world, cell, settings)

        if cell.door == "rest":
            response = rest(world, cell).post(
                "/api/v1/queues/payments/rules", rule, content_type="application/json"
            )
            body = assert_rest(response, cell.expected)
            if cell.caller == "invalid_rule":
                assert list(body["fields"]) == ["rule.match.nope"]
                assert body["fields"]["rule.match.nope"].startswith(UNKNOWN_MATCH_FIELD)
            if cell.caller == "route_into_a_queue_not_supervised":
                assert body["fields"] == {"rule.queue": ROUTE_TARGET}
        else:
            form = {
                "queue": world.payments.pk,
                "position": "10",
                "name": rule["name"],
                "enabled": "on",
                "match": json.dumps(rule.get("match", {})),
                "action": rule["action"],
                "content": "null",
                "quorum": "null",
            }
            response = browser(world, cell).post("/admin/elicitation/answerrule/add/", form)
            if cell.expected == NOT_A_RULE:
                # The form again (200), with the validator's own path and reason on the field.
                assert response.status_code == 200
                assert f"rule.match.nope: {UNKNOWN_MATCH_FIELD}" in response.content.decode()
            else:
                assert_page(response, cell.expected, admin=True)

        assert rule_names(world.payments) == (["contract rule"] if cell.expected.allowed else [])

    @pytest.mark.parametrize("cell", CLOSE)
    def test_the_operators_close_is_for_staff_in_the_admin(self, world: World, cell: Cell) -> None:
        request = world.ask()

        response = browser(world, cell).post(
            "/admin/elicitation/elicitationrequest/",
            {"action": "expire_now", "_selected_action": [str(request.pk)], "index": "0"},
        )

        assert_page(response, cell.expected, admin=True)
        assert claim_state(request.pk)[0] == ("expired" if cell.expected.allowed else "pending")

    @pytest.mark.parametrize("cell", READ)
    def test_a_reviewer_reads_a_request_by_one_rule_through_the_api_and_the_page(
        self, world: World, cell: Cell, settings: Any
    ) -> None:
        request = world.ask()
        target = uuid.uuid4() if cell.caller == "missing_request" else request.pk
        spend_reviewer_rate(world, cell, settings)

        if cell.door == "rest":
            body = assert_rest(rest(world, cell).get(f"/api/v1/review/requests/{target}"), cell.expected)
            if cell.expected.allowed:
                assert body["id"] == str(request.pk)
        else:
            response = browser(world, cell).get(f"/requests/{target}/")
            assert_page(response, cell.expected)
            if cell.expected.allowed:
                assert response.status_code == 200 and "Ship 1.4?" in response.content.decode()

        # A look never claims; an allowed one is audited (a sensitive view), a refused one leaves no trace.
        assert claim_state(request.pk) == ("pending", None)
        assert request.events.filter(kind="viewed").count() == (1 if cell.expected.allowed else 0)

    @pytest.mark.parametrize("cell", LIST)
    def test_a_queue_is_listed_by_one_rule_through_the_api_and_the_page(
        self, world: World, cell: Cell, settings: Any
    ) -> None:
        request = world.ask()
        spend_reviewer_rate(world, cell, settings)

        if cell.door == "rest":
            body = assert_rest(
                rest(world, cell).get("/api/v1/review/queues/payments/requests"), cell.expected
            )
            if cell.expected.allowed:
                assert [row["id"] for row in body] == [str(request.pk)]
        else:
            response = browser(world, cell).get("/queues/payments/")
            assert_page(response, cell.expected)
            if cell.expected.allowed:
                assert response.status_code == 200 and str(request.pk) in response.content.decode()

    def test_a_body_over_the_limit_is_413_too_large_at_every_django_door(
        self, world: World, settings: Any, slack_door: Slack
    ) -> None:
        huge = "x" * settings.MAX_BODY_BYTES
        member = browser(world, Cell("page", "member", ALLOWED))
        staff = browser(world, Cell("admin", "staff", ALLOWED))
        answers = {
            "agent REST": Client(HTTP_AUTHORIZATION=f"Bearer {world.keys['owner']}").post(
                "/api/v1/requests", {**ASK, "message": huge}, content_type="application/json"
            ),
            "reviewer REST": Client(HTTP_AUTHORIZATION=f"Bearer {world.tokens['supervisor']}").post(
                "/api/v1/queues/payments/rules", {"name": huge}, content_type="application/json"
            ),
            "page": member.post("/queues/payments/next", {"note": huge}),
            "Slack": slack_door.post(interaction_body({"type": "block_actions", "note": huge})),
            "admin": staff.post("/admin/elicitation/answerrule/add/", {"name": huge}),
        }

        for door, answer in answers.items():
            assert answer.status_code == 413, door
            assert answer.json()["code"] == "too_large", door
        assert ElicitationRequest.objects.count() == AnswerRule.objects.count() == 0


# --- agent rows: REST and MCP (agent key, OAuth token) side by side -------------------------------------------------


async def call_tool(credential: str, tool: str, arguments: dict[str, Any]) -> CallToolResult:
    """A tool call through the whole ASGI application, in-process, by the SDK's own client."""
    headers = {"Authorization": f"Bearer {credential}"}
    async with (
        httpx2.AsyncClient(
            transport=httpx2.ASGITransport(app=application), base_url="http://testserver", headers=headers
        ) as http,
        MCPClient(streamable_http_client("http://testserver/mcp/", http_client=http)) as client,
    ):
        return await client.call_tool(tool, arguments)


async def post_mcp(credential: str, tool: str, arguments: dict[str, Any]) -> httpx2.Response:
    """One `tools/call` POSTed to /mcp/ as it stands: for what the SDK's client never gets past (a 401, a 413)."""
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    async with httpx2.AsyncClient(
        transport=httpx2.ASGITransport(app=application), base_url="http://testserver"
    ) as http:
        return await http.post(
            "/mcp/",
            content=json.dumps(message),
            headers={
                "Authorization": f"Bearer {credential}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2025-11-25",
            },
        )


def oauth_token(world: World, queues: list[str]) -> str:
    """An access token for /mcp/ acting as the owner in `queues`: registration, consent and the PKCE exchange
    (tests/mcp/test_oauth_server.py's helpers; staff consents, who may delegate any queue)."""
    staff = Client()
    staff.force_login(world.users["staff"])
    client_id = register(Client())["client_id"]
    verifier, challenge = pkce()
    code = code_from(
        consent({"browser": staff, "agent": world.agents["owner"]}, client_id, challenge, queues)
    )
    issued = exchange(client_id, code, verifier)
    assert issued.status_code == 200, issued.content
    return str(issued.json()["access_token"])


@dataclass
class AgentDoors:
    """A world's agent-side credentials at each door: REST takes keys only; MCP takes the same keys and OAuth tokens
    acting for the owner, one whose consent covers `payments` and one whose consent covers only `other`."""

    world: World
    oauth: dict[str, str]

    def credentials(self, caller: str) -> dict[str, str]:
        """`another_agent` has no OAuth door here; the owner's token narrowed to `other` stands beside the key of
        the agent that may post only to `other`: both are callers for whom `payments` is out of reach."""
        doors = {"rest": self.world.keys[caller], "mcp-key": self.world.keys[caller]}
        if caller == "owner":
            doors["mcp-oauth"] = self.oauth["payments"]
        if caller == "other_queue_agent":
            doors["mcp-oauth"] = self.oauth["other"]
        return doors

    def rest(self, caller: str) -> Client:
        return Client(HTTP_AUTHORIZATION=f"Bearer {self.world.keys[caller]}")

    def tool(self, credential: str, name: str, arguments: dict[str, Any]) -> CallToolResult:
        return async_to_sync(call_tool)(credential, name, arguments)


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {"leaf": 1}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


class TestAgentDoors:
    @pytest.fixture
    def doors(self, transactional_db: None) -> AgentDoors:
        world = build_world()
        return AgentDoors(world, {slug: oauth_token(world, [slug]) for slug in ("payments", "other")})

    def test_create_answers_the_same_through_rest_and_mcp_by_key_or_oauth(
        self, doors: AgentDoors, subtests: Any
    ) -> None:
        outside_subset = {"type": "object", "properties": {"n": {"type": "object"}}}
        cases: dict[str, tuple[str, dict[str, Any], Outcome]] = {
            "the owner": ("owner", ASK, ALLOWED),
            "a caller for whom the queue is out of reach": ("other_queue_agent", ASK, UNKNOWN_QUEUE),
            "a schema outside the MCP subset": (
                "owner",
                {**ASK, "requestedSchema": outside_subset},
                Outcome("invalid", 400, "requestedSchema is not in the MCP elicitation subset."),
            ),
        }
        for name, (caller, body, expected) in cases.items():
            with subtests.test(case=name):
                before = ElicitationRequest.objects.count()
                credentials = doors.credentials(caller)
                response = doors.rest(caller).post("/api/v1/requests", body, content_type="application/json")
                rest_body = assert_rest(response, expected)
                answers = [rest_body]
                for door in ("mcp-key", "mcp-oauth"):
                    if door in credentials:
                        result = doors.tool(credentials[door], "ask_reviewer", body)
                        answers.append(assert_mcp(result, expected, None if expected.allowed else rest_body))
                if expected.allowed:
                    assert [answer["status"] for answer in answers] == ["pending"] * 3
                    assert ElicitationRequest.objects.count() - before == 3
                else:
                    assert ElicitationRequest.objects.count() == before

    def test_an_argument_out_of_range_is_invalid_naming_the_same_field_at_every_agent_door(
        self, doors: AgentDoors
    ) -> None:
        body = {**ASK, "priority": 5000}
        owner = doors.credentials("owner")

        rest_body = assert_rest(
            doors.rest("owner").post("/api/v1/requests", body, content_type="application/json"),
            Outcome("invalid", 400, "The request is not valid."),
        )
        refused = [
            assert_mcp(
                doors.tool(owner[door], "ask_reviewer", body), Outcome("invalid", 400, rest_body["detail"])
            )
            for door in ("mcp-key", "mcp-oauth")
        ]

        # The same code, detail and field; the reason is in the words of the check that refused it (DRF's over
        # REST, pydantic's for an argument the tool's input schema bounds).
        assert [list(body["fields"]) for body in (rest_body, *refused)] == [["priority"]] * 3
        assert ElicitationRequest.objects.count() == 0

    def test_a_revoked_or_unknown_credential_is_401_at_every_agent_door(self, doors: AgentDoors) -> None:
        world = doors.world
        refused = doors.rest("revoked").post("/api/v1/requests", ASK, content_type="application/json")
        assert_rest(refused, Outcome("unauthenticated", 401, "Invalid or revoked agent key."))
        for credential in (world.keys["revoked"], "not-a-token"):
            answer = async_to_sync(post_mcp)(credential, "ask_reviewer", ASK)
            # MCP's 401 is the transport's (RFC 6750, as the MCP authorization spec asks): it names the resource
            # metadata a host discovers the authorization server from.
            assert answer.status_code == 401
            assert answer.json()["error"] == "invalid_token"
            assert "resource_metadata=" in answer.headers["WWW-Authenticate"]
        # An OAuth token opens /mcp/ only: REST takes agent keys.
        oauth_at_rest = Client(HTTP_AUTHORIZATION=f"Bearer {doors.oauth['payments']}").get("/api/v1/requests")
        assert_rest(oauth_at_rest, Outcome("unauthenticated", 401, KEY_NOT_ACCEPTED))
        assert ElicitationRequest.objects.count() == 0

    def test_read_answers_the_same_through_rest_and_mcp_and_another_agents_request_looks_missing(
        self, doors: AgentDoors, subtests: Any
    ) -> None:
        mine = doors.world.ask()
        for caller, target, expected in (
            ("owner", mine.pk, ALLOWED),
            ("another_agent", mine.pk, NO_SUCH_REQUEST),
            (
                "other_queue_agent",
                mine.pk,
                NO_SUCH_REQUEST,
            ),  # and the owner's token whose consent leaves it out
            ("owner", uuid.uuid4(), NO_SUCH_REQUEST),  # a missing request reads exactly like another agent's
        ):
            with subtests.test(caller=caller, target=str(target)):
                credentials = doors.credentials(caller)
                rest_body = assert_rest(doors.rest(caller).get(f"/api/v1/requests/{target}"), expected)
                for door in ("mcp-key", "mcp-oauth"):
                    if door in credentials:
                        result = doors.tool(credentials[door], "get_request", {"id": str(target)})
                        read = assert_mcp(result, expected, None if expected.allowed else rest_body)
                        if expected.allowed:
                            assert (read["id"], read["status"]) == (rest_body["id"], rest_body["status"])

    @pytest.mark.parametrize("door", ["rest", "mcp-key", "mcp-oauth"])
    def test_cancel_withdraws_only_ones_own_request_and_a_second_cancel_is_a_conflict(
        self, doors: AgentDoors, door: str, subtests: Any
    ) -> None:
        world = doors.world
        for caller in ("another_agent", "other_queue_agent"):
            if door in doors.credentials(caller):
                with subtests.test(caller=caller):
                    theirs = world.ask()
                    assert self.cancel(doors, door, caller, theirs.pk, NO_SUCH_REQUEST) is not None
                    assert ElicitationRequest.objects.get(pk=theirs.pk).status == "pending"
        with subtests.test(caller="owner"):
            mine = world.ask()
            self.cancel(doors, door, "owner", mine.pk, ALLOWED)
            assert ElicitationRequest.objects.get(pk=mine.pk).status == "withdrawn"
            # Withdrawn already: the lost race, with the status it is in.
            again = self.cancel(doors, door, "owner", mine.pk, Outcome("conflict", 409))
            assert again["status"] == "withdrawn"
            assert ElicitationRequest.objects.get(pk=mine.pk).status == "withdrawn"

    @staticmethod
    def cancel(doors: AgentDoors, door: str, caller: str, request_id: Any, expected: Outcome) -> Any:
        if door == "rest":
            return assert_rest(doors.rest(caller).post(f"/api/v1/requests/{request_id}/cancel"), expected)
        credential = doors.credentials(caller)[door]
        return assert_mcp(doors.tool(credential, "cancel_request", {"id": str(request_id)}), expected)

    def test_list_shows_each_caller_its_own_open_requests_in_the_queues_it_may_use(
        self, doors: AgentDoors, subtests: Any
    ) -> None:
        world = doors.world
        in_payments, in_other = world.ask(), world.ask(world.other)
        theirs = world.ask(agent="another_agent")
        expected: dict[str, dict[str, set[Any]]] = {
            "owner": {
                "rest": {in_payments.pk, in_other.pk},
                "mcp-key": {in_payments.pk, in_other.pk},
                "mcp-oauth": {in_payments.pk},  # its consent covers `payments` only
            },
            "another_agent": {"rest": {theirs.pk}, "mcp-key": {theirs.pk}},
            "other_queue_agent": {"rest": set(), "mcp-key": set(), "mcp-oauth": {in_other.pk}},
        }
        for caller, by_door in expected.items():
            with subtests.test(caller=caller):
                credentials = doors.credentials(caller)
                for door, ids in by_door.items():
                    if door == "rest":
                        listed = assert_rest(doors.rest(caller).get("/api/v1/requests"), ALLOWED)
                    else:
                        result = doors.tool(credentials[door], "list_open_requests", {})
                        listed = assert_mcp(result, ALLOWED)["result"]
                    assert {uuid.UUID(row["id"]) for row in listed} == ids, (door, listed)

    def test_one_agent_rate_budget_is_spent_through_rest_and_mcp_by_key_and_oauth(
        self, doors: AgentDoors, settings: Any, clock: Clock
    ) -> None:
        settings.AGENT_RATE = parse_rate("2/hour")
        owner = doors.credentials("owner")
        assert doors.rest("owner").get("/api/v1/requests").status_code == 200  # 1
        assert not doors.tool(owner["mcp-oauth"], "list_open_requests", {}).is_error  # 2

        refused = [
            assert_rest(
                doors.rest("owner").post("/api/v1/requests", ASK, content_type="application/json"), THROTTLED
            ),
            assert_mcp(doors.tool(owner["mcp-key"], "ask_reviewer", ASK), THROTTLED),
            assert_mcp(doors.tool(owner["mcp-oauth"], "ask_reviewer", ASK), THROTTLED),
        ]

        # The same body through each door: the same words and the same seconds to wait.
        assert refused[1] == refused[2] == refused[0]
        assert ElicitationRequest.objects.count() == 0
        assert doors.rest("another_agent").get("/api/v1/requests").status_code == 200  # its budget is its own

    @pytest.mark.parametrize("door", ["rest", "mcp-key", "mcp-oauth"])
    def test_a_context_nested_past_max_json_depth_is_refused_at_every_agent_door(
        self, doors: AgentDoors, door: str, settings: Any
    ) -> None:
        limit = settings.MAX_JSON_DEPTH
        body = {**ASK, "context": nested(limit)}  # the body around it is one level more
        expected = Outcome(
            "invalid", 400, fields={"context" + ".a" * (limit - 1): f"nested deeper than {limit} levels."}
        )

        if door == "rest":
            assert_rest(
                doors.rest("owner").post("/api/v1/requests", body, content_type="application/json"), expected
            )
        else:
            assert_mcp(doors.tool(doors.credentials("owner")[door], "ask_reviewer", body), expected)

        assert ElicitationRequest.objects.count() == 0

    def test_a_body_over_the_limit_is_413_at_the_mcp_door(self, doors: AgentDoors, settings: Any) -> None:
        huge = {**ASK, "message": "x" * settings.MAX_BODY_BYTES}

        answer = async_to_sync(post_mcp)(doors.world.keys["owner"], "ask_reviewer", huge)

        # The SDK transport's own refusal (max_request_body_size=MAX_BODY_BYTES): the status, in plain text.
        assert answer.status_code == 413
        assert ElicitationRequest.objects.count() == 0
