"""The domain's errors as reviewer pages: one mapping from error code to status and page, for every page view."""

import functools
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from elicitation.queue.errors import DomainError

PAGE_STATUS = {"invalid": 400, "forbidden": 403, "not_found": 404, "conflict": 409, "gone": 410}
PAGE_TITLE = {
    "forbidden": "Not yours to open",
    "not_found": "Nothing here",
    "conflict": "This changed meanwhile",
    "gone": "This is closed",
}


def error_page(
    request: HttpRequest, exc: DomainError, template: str = "review/error.html", title: str | None = None
) -> HttpResponse:
    status = PAGE_STATUS.get(exc.code, 400)
    context = {"title": title or PAGE_TITLE.get(exc.code, "Something is wrong"), "detail": exc.detail}
    return render(request, template, context, status=status)


def domain_errors_as_pages(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """A page view raising a domain error answers with that error's page and status."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except DomainError as exc:
            return error_page(request, exc)

    return wrapped


def throttled_page(request: HttpRequest, retry_after: int) -> HttpResponse:
    """Over the reviewer's REVIEWER_RATE (`rate_budget`): 429 with Retry-After, as the reviewer API answers."""
    minutes = max(1, (retry_after + 59) // 60)
    detail = (
        "You have made more requests than your limit allows in a short time, here or through the API. "
        f"Nothing was changed. Try again in {minutes} minute{'s' if minutes != 1 else ''}."
    )
    response = render(
        request, "review/error.html", {"title": "Too many requests", "detail": detail}, status=429
    )
    response["Retry-After"] = str(retry_after)
    return response
