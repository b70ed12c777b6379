"""One exception handler: domain errors and DRF errors alike become `{code, detail, fields}` with the right status.

The bodies themselves (`domain_error_body`, `invalid_input`, `throttled_body`) are built by functions the MCP door
calls too (elicitation/mcp/service_calls.py, tools.py), so a refusal reads the same whichever door it came through."""

import logging
import sys
from typing import Any

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.views.csrf import csrf_failure as page_csrf_failure
from django.views.defaults import page_not_found
from django.views.defaults import server_error as page_server_error
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler

from elicitation.queue.errors import DomainError, InvalidInput
from elicitation.queue.keys import bearer_token

logger = logging.getLogger(__name__)


def flatten_errors(detail: Any, prefix: str = "") -> dict[str, str]:
    """DRF's nested error lists become `{"field.path": "reason"}`."""
    if isinstance(detail, dict):
        flat: dict[str, str] = {}
        for key, value in detail.items():
            path = key if not prefix else f"{prefix}.{key}"
            if key == "non_field_errors":
                path = prefix or "$"
            flat.update(flatten_errors(value, path))
        return flat
    if isinstance(detail, list):
        if all(not isinstance(item, (dict, list)) for item in detail):
            return {prefix or "$": " ".join(str(item) for item in detail)}
        flat = {}
        for index, item in enumerate(detail):
            flat.update(flatten_errors(item, f"{prefix}[{index}]"))
        return flat
    return {prefix or "$": str(detail)}


def error_body(code: str, detail: str, fields: dict[str, str] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"code": code, "detail": detail}
    if fields:
        body["fields"] = fields
    return body


# The domain's error codes (queue/errors.py) as HTTP statuses: the one mapping every HTTP surface uses.
HTTP_STATUS = {
    "invalid": 400,
    "forbidden": 403,
    "not_found": 404,
    "conflict": 409,
    "idempotency_conflict": 409,
    "gone": 410,
}


def http_status(exc: DomainError) -> int:
    return HTTP_STATUS.get(exc.code, 400)


def domain_error_body(exc: DomainError) -> dict[str, Any]:
    body = error_body(exc.code, exc.detail, exc.fields)
    current = getattr(exc, "current_status", None)
    if current:
        body["status"] = current
    return body


# What REST says of a body its serializer refuses; the MCP door says it of the tool arguments it refuses.
INVALID_DETAIL = "The request is not valid."


def invalid_input(detail: Any) -> InvalidInput:
    """A serializer's (or an argument validator's) refusal as the domain's `invalid` error, with the fields flattened
    as `{"field.path": "reason"}`: every door then answers it with `domain_error_body`."""
    return InvalidInput(INVALID_DETAIL, flatten_errors(detail))


def throttled_body(retry_after: int | None) -> dict[str, Any]:
    """Over the caller's rate (429): DRF's words, and the seconds to wait in the body as well as in Retry-After,
    because an MCP tool error has no headers to carry them."""
    body = error_body("throttled", str(exceptions.Throttled(wait=retry_after).detail))
    if retry_after is not None:
        body["retryAfter"] = retry_after
    return body


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, DomainError):
        return Response(domain_error_body(exc), status=http_status(exc))
    if isinstance(exc, RequestDataTooBig):
        return Response(error_body("too_large", "The request body is too large."), status=413)
    if isinstance(exc, (OperationalError, InterfaceError)):
        logger.warning("database unavailable: %s", type(exc).__name__)
        return Response(
            error_body("unavailable", "The database is unavailable; retry shortly."),
            status=status.HTTP_503_SERVICE_UNAVAILABLE,
            headers={"Retry-After": "5"},
        )
    if isinstance(exc, DatabaseError):
        return None  # a real bug: let it surface as a 500 without details
    if isinstance(exc, Http404):  # get_object_or_404 in a view: same shape as every other error
        exc = exceptions.NotFound(str(exc) or "Not found.")
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied(str(exc) or "Permission denied.")
    response = exception_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = domain_error_body(invalid_input(exc.detail))
    elif isinstance(exc, exceptions.Throttled):
        response.data = throttled_body(getattr(exc, "wait", None))  # set by DRF, missing from its stubs
    elif isinstance(exc, (exceptions.NotAuthenticated, exceptions.AuthenticationFailed)):
        response.status_code = status.HTTP_401_UNAUTHORIZED
        detail = str(exc.detail)
        request = context.get("request")
        if (
            isinstance(exc, exceptions.NotAuthenticated)
            and request is not None
            and bearer_token(request.headers)
        ):
            # A key was sent but no authenticator of this endpoint recognised it: say so, not "not provided".
            detail = "Invalid API key: unknown, revoked, or not a key this endpoint accepts."
        response.data = error_body("unauthenticated", detail)
    elif isinstance(exc, exceptions.APIException):
        code = exc.get_codes() if isinstance(exc.get_codes(), str) else "error"
        response.data = error_body(str(code), str(exc.detail))
    return response


# --- outside DRF: URLs no view matched, CSRF refusals and crashes still answer API callers in JSON -------------


def is_api_path(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception) -> HttpResponse:
    """handler404: JSON under /api/ (an id that is not a UUID never reaches a view), the page elsewhere."""
    if is_api_path(request):
        return JsonResponse(error_body("not_found", "No such resource."), status=404)
    return page_not_found(request, exception)


UNAVAILABLE_PAGE = (
    "<!doctype html><html lang=en><meta charset=utf-8><title>Unavailable · ReviewHub</title>"
    "<h1>ReviewHub is briefly unavailable</h1><p>Its database is not answering. Retry in a few seconds.</p></html>"
)


def server_error(request: HttpRequest) -> HttpResponse:
    """handler500: never a traceback or a setting, whoever asks. A crash caused by the database being unreachable
    (a page view, a middleware saving the session) is a 503 with Retry-After instead: retrying is the right move."""
    if isinstance(sys.exc_info()[1], (OperationalError, InterfaceError)):
        logger.warning("database unavailable: %s", type(sys.exc_info()[1]).__name__)
        if is_api_path(request):
            response: HttpResponse = JsonResponse(
                error_body("unavailable", "The database is unavailable; retry shortly."), status=503
            )
        else:
            # Plain HTML: the site's templates would touch the database again (the signed-in user, messages).
            response = HttpResponse(UNAVAILABLE_PAGE, status=503)
        response["Retry-After"] = "5"
        return response
    if is_api_path(request):
        return JsonResponse(error_body("server_error", "Something went wrong on our side."), status=500)
    return page_server_error(request)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """CSRF_FAILURE_VIEW: API callers get the usual error body; pages get Django's page."""
    if is_api_path(request):
        return JsonResponse(error_body("csrf_failed", "CSRF verification failed."), status=403)
    return page_csrf_failure(request, reason)
