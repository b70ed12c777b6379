"""Exceptions raised by the ReviewHub client. Every one is a `ReviewHubError`."""

from typing import Any


class ReviewHubError(Exception):
    """An error answered by the server (`status`, `code`, `detail`) or a failure to reach it (`status` None)."""

    def __init__(
        self,
        detail: str,
        *,
        status: int | None = None,
        code: str | None = None,
        fields: dict[str, str] | None = None,
        body: Any = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.status = status
        self.code = code
        self.fields: dict[str, str] = fields or {}
        self.body = body

    def __str__(self) -> str:
        where = f"{self.status} {self.code}: " if self.status else ""
        fields = f" {self.fields}" if self.fields else ""
        return f"{where}{self.detail}{fields}"


class AuthenticationError(ReviewHubError):
    """The agent key is missing, wrong, revoked or rotated (HTTP 401/403, socket close 4401)."""


class NotFoundError(ReviewHubError):
    """No such request for this agent (another agent's request looks exactly the same)."""


class ConflictError(ReviewHubError):
    """The request is not in a state that allows this (e.g. cancelling a completed request), or an
    Idempotency-Key was reused with a different body."""


class ValidationError(ReviewHubError):
    """The server refused the input; `fields` maps each offending field (e.g. `requestedSchema.x`) to a reason."""


class WaitTimeout(ReviewHubError, TimeoutError):
    """No answer within the wait's timeout. The request is still open (unless `elicit` cancelled it)."""

    def __init__(self, detail: str, *, request_id: str) -> None:
        super().__init__(detail)
        self.request_id = request_id


class RequestWithdrawn(ConflictError):
    """The request was withdrawn (cancelled by the agent) before anyone answered: there is no result."""
