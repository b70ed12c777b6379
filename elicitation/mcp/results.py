"""What the tools return, also published as each tool's outputSchema: the REST API's representation of a request
(with its expected wait and a retry hint while it is open), a queue, and what the MCP channel may carry about a
secret flow."""

import json
import math
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from elicitation.api import serializers as s
from elicitation.models import OPEN_STATUSES, ElicitationRequest
from elicitation.queue import clock


class ElicitOutcome(TypedDict):
    """MCP `ElicitResult`: `content` only on accept of a form."""

    action: Literal["accept", "decline", "cancel"]
    content: NotRequired[dict[str, Any]]


class ReviewRequest(TypedDict):
    """The same representation as `GET /api/v1/requests/{id}` (`expectedWaitSeconds` while the request is open
    and the queue gives something to go on), plus a retry hint while it is open."""

    id: str
    status: Literal["pending", "claimed", "completed", "expired", "withdrawn"]
    queue: str
    mode: Literal["form", "url"]
    message: str
    requestedSchema: dict[str, Any] | None
    url: str
    elicitationId: str
    priority: int
    context: dict[str, Any]
    createdAt: str
    deadline: str
    closedAt: str | None
    overdue: bool
    result: ElicitOutcome | None
    expectedWaitSeconds: NotRequired[int]
    retryAfterSeconds: NotRequired[int]


class QueueInfo(TypedDict):
    slug: str
    name: str
    description: str
    pending: int
    claimed: int
    defaultDeadlineSeconds: int


class SecretOutcome(TypedDict):
    """What the MCP channel may carry about a hosted secret flow: never the values."""

    flowId: str
    requestId: str
    status: Literal["pending", "claimed", "completed", "expired", "withdrawn"]
    action: Literal["accept", "decline", "cancel"] | None
    redeem: str
    expectedWaitSeconds: NotRequired[int]
    retryAfterSeconds: NotRequired[int]


MIN_RETRY_SECONDS = 1
MAX_RETRY_SECONDS = 60


def retry_after(request: ElicitationRequest, expected_wait: int | None) -> int:
    """How long a polling agent should wait before asking again (`retryAfterSeconds`, Tasks' `pollIntervalMs`):
    when the answer is expected, 1 s to 60 s and never past the deadline; without an estimate, a tenth of the
    time left, 5 s to 60 s."""
    left = (request.deadline - clock.now()).total_seconds()
    if expected_wait is None:
        return int(max(5, min(MAX_RETRY_SECONDS, left / 10)))
    return max(MIN_RETRY_SECONDS, min(expected_wait, MAX_RETRY_SECONDS, math.ceil(left)))


def represent(request: ElicitationRequest) -> ReviewRequest:
    """Reads the expected wait of an open request: its queue must be loaded with it (as every caller's query
    does), and the queue's figures are kept a few seconds, so representing many requests costs per queue."""
    context = s.expected_wait_context([request])
    data: Any = json.loads(json.dumps(s.RequestSerializer(request, context=context).data, default=str))
    if request.status in OPEN_STATUSES:
        data["retryAfterSeconds"] = retry_after(request, data.get("expectedWaitSeconds"))
    return data  # type: ignore[no-any-return]


def secret_outcome(flow_id: str, request: ReviewRequest) -> SecretOutcome:
    result = request.get("result")
    outcome: SecretOutcome = {
        "flowId": flow_id,
        "requestId": request["id"],
        "status": request["status"],
        "action": result["action"] if result else None,
        "redeem": f"POST /api/v1/flows/{flow_id}/retrieve with the agent key",
    }
    if "expectedWaitSeconds" in request:
        outcome["expectedWaitSeconds"] = request["expectedWaitSeconds"]
    if "retryAfterSeconds" in request:
        outcome["retryAfterSeconds"] = request["retryAfterSeconds"]
    return outcome
