"""What the tools return, also published as each tool's outputSchema: the REST API's representation of a request
(plus a retry hint while it is open), a queue, and what the MCP channel may carry about a secret flow."""

import json
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
    """The same representation as `GET /api/v1/requests/{id}`, plus a retry hint while the request is open."""

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
    retryAfterSeconds: NotRequired[int]


def retry_after(request: ElicitationRequest) -> int:
    """How long a polling agent should wait before asking again: a tenth of the time left, 5 s to 60 s."""
    left = (request.deadline - clock.now()).total_seconds()
    return int(max(5, min(60, left / 10)))


def represent(request: ElicitationRequest) -> ReviewRequest:
    data: Any = json.loads(json.dumps(s.RequestSerializer(request).data, default=str))
    if request.status in OPEN_STATUSES:
        data["retryAfterSeconds"] = retry_after(request)
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
    if "retryAfterSeconds" in request:
        outcome["retryAfterSeconds"] = request["retryAfterSeconds"]
    return outcome
