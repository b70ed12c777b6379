"""What an answer writes when it closes a request, whoever gives it (a reviewer, a quorum, an answer rule, a
hosted flow), and the errors of its content keyed as API fields."""

from datetime import datetime
from typing import Any

from elicitation.models import Status


def completion_changes(
    user: Any, action: str, content: dict[str, Any] | None, now: datetime
) -> dict[str, Any]:
    return {
        "status": Status.COMPLETED,
        "claimed_by": None,
        "lease_expires_at": None,
        "action": action,
        "content": content,
        "answered_by": user,
        "closed_at": now,
    }


def content_error_fields(errors: dict[str, str]) -> dict[str, str]:
    """Answer errors keyed as API fields: `content.<question>`, or `content` for the whole object."""
    return {
        "content" + ("" if key == "$" else "." + key.removeprefix("$.")): reason
        for key, reason in errors.items()
    }
