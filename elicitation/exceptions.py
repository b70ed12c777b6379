"""Domain errors raised by services; `elicitation.api.errors` maps each to one HTTP status."""


class DomainError(Exception):
    status_code = 400
    code = "invalid"

    def __init__(self, detail: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fields = fields or {}


class InvalidTransition(DomainError):
    """The row was not in a state that allows the change: someone else won, or it is already closed."""

    status_code = 409
    code = "conflict"

    def __init__(self, detail: str, current_status: str | None = None) -> None:
        super().__init__(detail)
        self.current_status = current_status


class IdempotencyConflict(DomainError):
    status_code = 409
    code = "idempotency_conflict"


class NotFound(DomainError):
    status_code = 404
    code = "not_found"


class PermissionDenied(DomainError):
    status_code = 403
    code = "forbidden"


class Gone(DomainError):
    status_code = 410
    code = "gone"


class InvalidInput(DomainError):
    """Bad input the serializer could not catch: an unknown queue, a schema the MCP subset does not allow."""

    status_code = 400
    code = "invalid"
