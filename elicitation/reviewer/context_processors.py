"""Template context every page needs: which links the top bar shows."""

from typing import Any

from django.http import HttpRequest
from django.utils.functional import SimpleLazyObject

from elicitation.queue import access


def navigation(request: HttpRequest) -> dict[str, Any]:
    # Lazy: pages that never render the top bar's links pay no query.
    return {"can_view_metrics": SimpleLazyObject(lambda: access.can_view_metrics(request.user))}
