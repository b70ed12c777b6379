"""Python client for ReviewHub's agent API (importable without Django).

from reviewhub_client import ReviewHubClient

with ReviewHubClient("http://127.0.0.1:8000", "rh_...") as hub:
    result = hub.elicit("Deploy to production?", {"type": "object", "properties": {"ok": {"type": "boolean"}}})
    print(result.action, result.content)
"""

from reviewhub_client.client import AsyncReviewHubClient, ReviewHubClient
from reviewhub_client.errors import (
    AuthenticationError,
    ConflictError,
    NotFoundError,
    RequestWithdrawn,
    ReviewHubError,
    ValidationError,
    WaitTimeout,
)
from reviewhub_client.models import AgentEvent, ElicitationRequest, ElicitResult, EventPage

__all__ = [
    "AgentEvent",
    "AsyncReviewHubClient",
    "AuthenticationError",
    "ConflictError",
    "ElicitResult",
    "ElicitationRequest",
    "EventPage",
    "NotFoundError",
    "RequestWithdrawn",
    "ReviewHubClient",
    "ReviewHubError",
    "ValidationError",
    "WaitTimeout",
]
