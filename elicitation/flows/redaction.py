"""Keep secrets out of logs. `RedactSecretsFilter` sits on every handler (settings.LOGGING) and rewrites records:

- API keys (`rh_…` agent keys, `rhr_…` reviewer tokens) keep their public prefix and lose the rest;
- values a hosted flow is handling right now (registered with `secrets_in_flight`, or attached to the request
  with `attach_to_request`) are replaced wherever they occur, message or traceback;
- a record about a flow request marks it so Django's error reporter shows none of its POST data
  (`FlowSafeExceptionReporterFilter`, settings.DEFAULT_EXCEPTION_REPORTER_FILTER, does so even under DEBUG).

The flow code never logs a secret on purpose; this is the net under it. Importable before apps load (LOGGING is
configured first), so no models here.
"""

import contextlib
import contextvars
import logging
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from django.http import HttpRequest
from django.views.debug import SafeExceptionReporterFilter

REDACTED = "[redacted]"
# Agent keys are rh_<8 hex>_<token>, reviewer tokens rhr_<8 hex>_<token>; the prefix is not secret.
API_KEY_PATTERN = re.compile(r"\b(rhr?_[0-9a-f]{8}_)[A-Za-z0-9_\-]+")
FLOW_PATH_PREFIXES = ("/flows/", "/api/v1/flows")
# Shorter values cannot be hunted down in free text without mangling every log line; none is a real secret.
MIN_SECRET_LENGTH = 3
REQUEST_ATTRIBUTE = "reviewhub_secrets"

_in_flight: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar(
    "reviewhub_secrets_in_flight", default=()
)


def _usable(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(str(v) for v in values if v is not None and len(str(v)) >= MIN_SECRET_LENGTH)


@contextmanager
def secrets_in_flight(values: Iterable[Any]) -> Iterator[None]:
    """While the block runs, any log record created in this context has these values redacted."""
    token = _in_flight.set(_in_flight.get() + _usable(values))
    try:
        yield
    finally:
        _in_flight.reset(token)


def attach_to_request(request: Any, values: Iterable[Any]) -> None:
    """Remember values on the request, for records logged about it after the view returned (django.request)."""
    setattr(request, REQUEST_ATTRIBUTE, (*getattr(request, REQUEST_ATTRIBUTE, ()), *_usable(values)))


def redact_text(text: str, secrets: Iterable[str] = ()) -> str:
    cleaned = API_KEY_PATTERN.sub(lambda m: m.group(1) + REDACTED, text)
    # Longest first, so a secret containing another is removed whole.
    for secret in sorted(set(secrets), key=len, reverse=True):
        if secret in cleaned:
            cleaned = cleaned.replace(secret, REDACTED)
    return cleaned


def is_flow_path(path: str) -> bool:
    """Flow pages and the flows API: every request to them may carry a secret."""
    return path.startswith(FLOW_PATH_PREFIXES)


class FlowSafeExceptionReporterFilter(SafeExceptionReporterFilter):
    """Django's filter masks sensitive_variables/sensitive_post_parameters only when DEBUG is off; for flow
    requests it masks them always, so even the development error page never shows a submitted secret."""

    def is_active(self, request: HttpRequest | None) -> bool:
        return super().is_active(request) or (request is not None and is_flow_path(request.path))


class RedactSecretsFilter(logging.Filter):
    """Never drops a record; only rewrites what it would print."""

    def filter(self, record: logging.LogRecord) -> bool:
        secrets = _in_flight.get()
        request = getattr(record, "request", None)
        if request is not None:
            if is_flow_path(str(getattr(request, "path", ""))):
                # The attribute sensitive_post_parameters() sets: Django's reporters then mask every POST value.
                with contextlib.suppress(AttributeError):  # not an HttpRequest: nothing to mark
                    request.sensitive_post_parameters = "__ALL__"
            secrets = secrets + tuple(getattr(request, REQUEST_ATTRIBUTE, ()))
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: leave it to the handler to report
            return True
        cleaned = redact_text(message, secrets)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and not record.exc_text:
            text = logging.Formatter().formatException(record.exc_info)
            if redact_text(text, secrets) != text:
                record.exc_text = text
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact_text(record.stack_info, secrets)
        return True
