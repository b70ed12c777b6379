"""The domain's error vocabulary. Each error has a stable `code`; every surface maps codes to its own terms in
one place: HTTP statuses in `api/errors.py`, error pages in `reviewer/errors.py`, WebSocket error frames in
`delivery/agent_socket.py`, MCP tool errors in `mcp/server.py`."""


class DomainError(Exception):
    code = "invalid"

    def __init__(self, detail: str, fields: dict[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.fields = fields or {}


class InvalidInput(DomainError):
    """Bad input the serializer could not catch: an unknown queue, a schema the MCP subset does not allow."""

    code = "invalid"


class InvalidTransition(DomainError):
    """The row was not in a state that allows the change: someone else won, or it is already closed."""

    code = "conflict"

    def __init__(self, detail: str, current_status: str | None = None) -> None:
        super().__init__(detail)
        self.current_status = current_status


class IdempotencyConflict(DomainError):
    code = "idempotency_conflict"


class NotFoundError(DomainError):
    code = "not_found"


class AccessDenied(DomainError):
    code = "forbidden"


class StepUpRequired(AccessDenied):
    """An accept that needs a passkey assertion (a rule's `step_up: passkey`) came without a valid one: refused at
    every door the same way (403), nothing recorded. `fields["step_up"]` says why."""


class Gone(DomainError):
    """The thing will never be available again (a retrieved or purged secret)."""

    code = "gone"

    def __init__(self, detail: str, current_status: str | None = None) -> None:
        super().__init__(detail)
        self.current_status = current_status
