"""The Permissions-Policy header every response gets, and the API body-size limit enforced before parsing."""

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.deprecation import MiddlewareMixin


class PermissionsPolicyMiddleware(MiddlewareMixin):
    """The one security header neither Django nor django-csp sets. Content-Security-Policy comes from
    django-csp (settings.CONTENT_SECURITY_POLICY), Cross-Origin-Opener-Policy and nosniff from Django's
    SecurityMiddleware."""

    def process_response(self, request: HttpRequest, response: HttpResponse) -> HttpResponse:
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
