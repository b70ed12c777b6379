"""Response headers every page gets, and the API body-size limit enforced before parsing.

Both are MiddlewareMixin classes so they are async-capable: a sync-only middleware would push every async
view (the long-polls) into a thread of its own."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin

# Agent text is rendered on reviewer pages, so no inline script may ever run: scripts come from our origin only.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)


class SecurityHeadersMiddleware(MiddlewareMixin):
    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
        response.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        response.setdefault("Permissions-Policy", "camera=(), microphone=(), geolocation=()")
        return response


class BodySizeLimitMiddleware(MiddlewareMixin):
    """413 for bodies over MAX_BODY_BYTES, judged by Content-Length before anything reads the body."""

    def process_request(self, request: HttpRequest) -> HttpResponse | None:
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        if length > settings.MAX_BODY_BYTES:
            return JsonResponse(
                {
                    "code": "too_large",
                    "detail": f"The request body is {length} bytes; the limit is {settings.MAX_BODY_BYTES}.",
                },
                status=413,
            )
        return None
