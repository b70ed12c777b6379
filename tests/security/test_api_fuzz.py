"""Schemathesis against /api/schema/: every operation, as the right caller, with generated inputs. Zero 5xx and
zero responses outside the schema (status codes, content types, headers, bodies). In-process over ASGI, bounded
in examples so the file runs in well under two minutes."""

from typing import Any

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.test import override_settings
from hypothesis import HealthCheck, settings
from schemathesis import checks

from elicitation.models import OPEN_STATUSES, Agent, ElicitationRequest, Queue, Scope
from elicitation.ops import sweeper
from elicitation.queue import accounts, transitions
from reviewhub.asgi import application
from tests.conftest import FORM_SCHEMA

pytestmark = pytest.mark.django_db(transaction=True)
MAX_EXAMPLES = 15
STATEFUL_EXAMPLES = 12


class Credentials:
    agent_key: str
    reviewer_token: str


CREDENTIALS = Credentials()


@pytest.fixture(autouse=True)
def fuzz_data(settings: Any) -> None:
    # Long-polls answer at once: a generated wait=60 must not stall the run (waiting has tests of its own).
    settings.MAX_LONG_POLL_SECONDS = 0
    settings.AGENT_RATE = None  # off
    settings.REVIEWER_RATE = None
    queue = Queue.objects.create(slug="payments", name="Payments", lease_seconds=60)
    _, CREDENTIALS.agent_key = accounts.create_agent(
        "agent-a", queue_slugs=[queue.slug], scopes=[Scope.REQUESTS, Scope.FLOWS_SECRETS]
    )
    reviewer = User.objects.create(username="alice")  # no password: hashing one costs a second per test
    queue.members.add(reviewer)
    queue.supervisors.add(reviewer)
    CREDENTIALS.reviewer_token = accounts.create_reviewer_token(reviewer, name="fuzz")
    three_fresh_requests()


def three_fresh_requests() -> None:
    """Three pending requests in the queue and no other open one."""
    agent = Agent.objects.get(name="agent-a")
    for request_id in ElicitationRequest.objects.filter(status__in=OPEN_STATUSES).values_list(
        "pk", flat=True
    ):
        transitions.withdraw_request(request_id, agent=agent)
    for _ in range(3):
        transitions.create_request(
            agent=agent, queue_slug="payments", message="Approve?", mode="form", requested_schema=FORM_SCHEMA
        )


# Loaded at import (no database needed to render the schema), so each operation is its own test item. With the
# embedded sweeper off: that first ASGI event would otherwise start it in schemathesis' portal thread, sweeping the
# development database during collection (and its error tracebacks' ast.parse raced hypothesis' own on 3.11).
with override_settings(PERIODIC_SWEEPS_IN_PROCESS=False):
    schema = schemathesis.openapi.from_asgi("/api/schema/", application)
SWEEPER_AFTER_SCHEMA_LOAD = sweeper._process_sweeper


def test_loading_the_schema_at_import_started_no_sweeper() -> None:
    assert SWEEPER_AFTER_SCHEMA_LOAD is None


def credentials_for(case: Any) -> dict[str, str]:
    if case.path.startswith("/api/v1/review/"):
        return {"Authorization": f"Bearer {CREDENTIALS.reviewer_token}"}
    return {"Authorization": f"Bearer {CREDENTIALS.agent_key}"}


# Input-validation opinions are left out: the domain refuses schema-valid bodies the OpenAPI document cannot
# describe (an unknown queue, an enum outside its options), and unknown query parameters are ignored on purpose.
EXCLUDED_CHECKS = [checks.positive_data_acceptance, checks.negative_data_rejection]


@schema.parametrize()
@settings(max_examples=MAX_EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
def test_every_operation_conforms_to_the_schema_without_server_errors(case: Any) -> None:
    if isinstance(case.body, dict) and "queue" in case.body:
        case.body["queue"] = (
            "payments"  # a real queue, so creation gets past the lookup and its 201 is checked
        )
    case.call_and_validate(headers=credentials_for(case), excluded_checks=EXCLUDED_CHECKS)


def test_linked_sequences_conform_to_the_schema_without_server_errors() -> None:
    """Stateful: follow the schema's links (create → read, cancel, claim, draft, respond; queues → claim-next) so
    the fuzzer acts on requests that exist, in whatever order it likes."""
    machine = schema.as_state_machine()
    answered: list[tuple[str, int]] = []

    class LinkedSequences(machine):  # type: ignore[misc,valid-type]
        def setup(self) -> None:
            # Each scenario starts from the same queue. Hypothesis needs the same choices to draw the same way, and a
            # link is followed only when the server's answer gave one: a queue emptied by an earlier scenario answers
            # claim-next with 204, and the next draw then differs ("Inconsistent data generation").
            three_fresh_requests()

        def after_call(self, response: Any, case: Any) -> None:
            answered.append((f"{case.method} {case.operation.path}", response.status_code))

        def before_call(self, case: Any) -> None:
            if isinstance(case.body, dict) and "queue" in case.body:
                case.body["queue"] = "payments"

        def get_call_kwargs(self, case: Any) -> dict[str, Any]:
            return {"headers": credentials_for(case)}

        def validate_response(self, response: Any, case: Any, **kwargs: Any) -> None:
            kwargs.pop("additional_checks", None)
            case.validate_response(response, excluded_checks=EXCLUDED_CHECKS, headers=kwargs.get("headers"))

    LinkedSequences.run(
        settings=settings(
            max_examples=STATEFUL_EXAMPLES,
            stateful_step_count=8,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
    )
    # The links were followed: some call on an existing request (an id taken from a response) succeeded.
    linked_successes = {label for label, status in answered if "{" in label and 200 <= status < 300}
    assert linked_successes, sorted(set(answered))


def test_every_operation_documents_rate_limits_and_outages_with_retry_after() -> None:
    document = schema.raw_schema
    operations = [
        (path, method, operation)
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
        if path.startswith("/api/v1/")
    ]

    assert len(operations) >= 19
    for path, method, operation in operations:
        for code in ("429", "503"):
            response = operation["responses"].get(code)
            assert response is not None, (method, path, code)
            assert "Retry-After" in response["headers"], (method, path, code)
        assert operation.get("security"), (method, path)
        assert "401" in operation["responses"], (method, path)
        if method == "post":
            assert {"413", "415"} <= set(operation["responses"]), (method, path)


def test_creating_a_request_links_to_what_can_be_done_with_it() -> None:
    create = schema.raw_schema["paths"]["/api/v1/requests"]["post"]["responses"]["201"]

    assert create["links"]["ReadRequest"] == {
        "operationId": "requests_retrieve",
        "parameters": {"request_id": "$response.body#/id"},
    }
    assert {"CancelRequest", "ClaimRequest", "Respond"} <= set(create["links"])
