"""The text formats a question may ask for (email, uri, date, date-time), checked strictly: jsonschema's own
checkers where they are right, ReviewHub's where they let too much through."""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

from jsonschema import FormatChecker

_FORMAT_CHECKER = FormatChecker()
if not {"uri", "date-time"} <= set(_FORMAT_CHECKER.checkers):
    # Without these jsonschema silently accepts anything; refuse to run rather than fail open.
    raise ImportError(
        "elicitation.queue.schemas needs jsonschema[format-nongpl] for uri and date-time checks"
    )

# One "@", a non-empty local part, a dotted domain with non-empty labels, no whitespace or controls.
_EMAIL_PATTERN = re.compile(r"[^@\s\x00-\x1f\x7f]+@[^@\s\x00-\x1f\x7f.]+(?:\.[^@\s\x00-\x1f\x7f.]+)+")
_DATE_PATTERN = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
# The checkers' own regexes end in "$", which lets a trailing newline through.
_WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")


def _is_email(value: str) -> bool:
    return _EMAIL_PATTERN.fullmatch(value) is not None


def _is_uri(value: str) -> bool:
    return not _WHITESPACE_OR_CONTROL.search(value) and _FORMAT_CHECKER.conforms(value, "uri")


def _is_date(value: str) -> bool:
    if _DATE_PATTERN.fullmatch(value) is None:
        return False
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_date_time(value: str) -> bool:
    return not _WHITESPACE_OR_CONTROL.search(value) and _FORMAT_CHECKER.conforms(value, "date-time")


_FORMAT_CHECKS: dict[str, Callable[[str], bool]] = {
    "email": _is_email,
    "uri": _is_uri,
    "date": _is_date,
    "date-time": _is_date_time,
}
_FORMAT_REASONS = {
    "email": "must be a valid email address",
    "uri": "must be a valid absolute URI, such as https://example.com",
    "date": "must be a valid date (YYYY-MM-DD)",
    "date-time": "must be a valid date-time (RFC 3339 with a timezone, e.g. 2025-06-18T12:00:00Z)",
}


def format_problem(text_format: str, value: str) -> str | None:
    """Why `value` is not a valid `text_format`, or None when it is."""
    return None if _FORMAT_CHECKS[text_format](value) else _FORMAT_REASONS[text_format]
