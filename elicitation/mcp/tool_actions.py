"""What each tool does, in the core's own terms: the synchronous halves (ORM, services) and the wait for an answer.

Every write goes through `elicitation.queue.transitions` (or `flows.hosted_flows`), exactly as the REST API does;
a create's body is mapped by `api/create_body.py`, as REST's is, so limits, URL checks and error codes are the same on
both doors."""

import asyncio
import contextlib
import uuid
from datetime import datetime
from typing import Any

import anyio
from django.conf import settings
from mcp.server.mcpserver import Context

from elicitation.api.create_body import create_arguments, flow_arguments
from elicitation.api.errors import invalid_input
from elicitation.delivery.long_poll import wait_for_request
from elicitation.flows import hosted_flows
from elicitation.mcp.callers import Caller, load_agent
from elicitation.mcp.results import QueueInfo, ReviewRequest, represent
from elicitation.mcp.service_calls import call_service, database_call
from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import access, clock, selectors, transitions
from elicitation.queue.errors import DomainError, NotFoundError

TERMINAL = ("completed", "expired", "withdrawn")


def wait_cap(seconds: int) -> int:
    return selectors.long_poll_cap(seconds)


def queue_infos(caller: Caller) -> list[QueueInfo]:
    queues = Queue.objects.filter(agents__pk=caller.agent_id, agents__revoked_at__isnull=True)
    if caller.queues is not None:
        queues = queues.filter(slug__in=caller.queues)
    rows: list[QueueInfo] = []
    for summary in selectors.open_counts(queues):
        queue = summary.queue
        minutes = max(1, queue.default_deadline_seconds // 60)
        rows.append(
            {
                "slug": queue.slug,
                "name": queue.name,
                "description": (
                    f"{queue.name}: reviewers answer within {minutes} min by default; unanswered requests "
                    f"close with '{queue.expiry_outcome}'."
                ),
                "pending": summary.pending,
                "claimed": summary.claimed,
                "defaultDeadlineSeconds": queue.default_deadline_seconds,
            }
        )
    return rows


def create_request(caller: Caller, body: dict[str, Any]) -> ReviewRequest:
    arguments = create_arguments(body)
    caller.check_queue(arguments["queue_slug"])
    request, _ = transitions.create_request(agent=load_agent(caller.agent_id), **arguments)
    return represent(request)


def open_secret_flow(caller: Caller, body: dict[str, Any]) -> tuple[str, ReviewRequest]:
    arguments = flow_arguments(body)
    caller.check_queue(arguments["queue_slug"])
    flow, _ = hosted_flows.create_hosted_flow(agent=load_agent(caller.agent_id), **arguments)
    return str(flow.pk), represent(flow.request)


def request_uuid(request_id: str) -> uuid.UUID:
    """A tool's `id` argument as a request id. REST's URL only routes UUIDs; a tool gets any string, and the UUID
    column would refuse a malformed one with Django's ValidationError, which is no domain error (a crash, three
    tracebacks in the log and a bare "Error executing tool")."""
    try:
        return uuid.UUID(request_id)
    except ValueError:  # DRF's words for a UUID field it refuses
        raise invalid_input({"id": ["Must be a valid UUID."]}) from None


def owned_request(caller: Caller, request_id: str) -> ElicitationRequest:
    """One of the caller's own requests, in a queue its consent covers; anything else is "no such request", in the
    words `GET /api/v1/requests/{id}` uses."""
    request = access.owned_request(caller.agent_id, request_uuid(request_id))
    if not caller.sees(request):
        raise NotFoundError("No such request.")
    return request


def read_request(caller: Caller, request_id: str) -> ReviewRequest:
    return represent(owned_request(caller, request_id))


def open_requests(caller: Caller, queue: str | None) -> list[ReviewRequest]:
    rows = selectors.agent_requests(caller.agent_id, "open")
    return [represent(row) for row in rows if caller.sees(row) and (queue is None or row.queue.slug == queue)]


def withdraw_request(caller: Caller, request_id: str) -> ReviewRequest:
    owned = owned_request(caller, request_id)
    agent = load_agent(caller.agent_id)
    return represent(transitions.withdraw_request(owned.pk, agent=agent))


def progress_interval() -> float:
    return float(settings.MCP_PROGRESS_INTERVAL_SECONDS)


async def wait_with_progress(
    ctx: Context | None, caller: Caller, request_id: str, seconds: int
) -> ReviewRequest:
    """Wait up to `seconds` (never past the request's deadline, plus the sweeper's grace) for the request to close.

    Waits in slices of `MCP_PROGRESS_INTERVAL_SECONDS`, each a long-poll on the request's push group, and sends a
    progress notification after every slice that ends with the request still open: a host that resets its timeout
    on progress (as the MCP spec suggests) keeps waiting for as long as the human needs."""
    loop = asyncio.get_running_loop()
    current: ReviewRequest = await call_service(read_request, caller, request_id)
    deadline_left = (datetime.fromisoformat(current["deadline"]) - clock.now()).total_seconds()
    end = loop.time() + max(0.0, min(float(seconds), deadline_left + 2 * progress_interval()))
    beat = 0
    while current["status"] not in TERMINAL:
        remaining = end - loop.time()
        if remaining <= 0:
            break
        await wait_for_request(caller.agent_id, request_id, min(progress_interval(), remaining, wait_cap(60)))
        current = await call_service(read_request, caller, request_id)
        if current["status"] in TERMINAL:
            break
        beat += 1
        if ctx is not None:
            await ctx.report_progress(beat, None, f"Waiting for a human reviewer ({current['status']}).")
    return current


async def withdraw_unread(caller: Caller, request_id: str) -> None:
    # The host cancelled the call (or hung up) before learning the id: nobody will read the answer,
    # so the question leaves the reviewers' queue instead of costing someone's time.
    with anyio.CancelScope(shield=True):
        with contextlib.suppress(DomainError):  # answered in the meantime
            await database_call(withdraw_request)(caller, request_id)
