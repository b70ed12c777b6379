"""The text formats a question may ask for (email, uri, date, date-time).

An accepted answer goes on to the agent, whose MCP SDK checks it again; an answer the SDK refuses fails the agent's
tool call after the request is already closed, so the reviewer's work is lost. ReviewHub therefore accepts only
what both official SDKs accept:

- TypeScript: `Server.elicitInput` validates the content against `requestedSchema` with ajv and ajv-formats in
  their default "full" mode (`AjvJsonSchemaValidator`). Its rules are stricter than the RFCs in places: an e-mail
  address is ASCII dot-atoms at a dotted domain of letter-digit-hyphen labels; a URI needs something after its
  scheme; all of it ASCII.
- Python: `ElicitResult` checks only value types; `ctx.elicit(schema=Model)` then validates the content with the
  server's pydantic model, whose `date`, `datetime` and `AnyUrl` fields are what render as these formats. pydantic
  reads a URL by the WHATWG rules (ports up to 65535, real IPv4 hosts, valid punycode) and refuses leap seconds.

`tests/queue/test_answer_formats_sdks.py` holds these checks to both SDKs' validators on generated strings.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable

import idna
from jsonschema import FormatChecker

from elicitation.queue.browser_urls import read_as_browser

_FORMAT_CHECKER = FormatChecker()
if not {"uri", "date-time"} <= set(_FORMAT_CHECKER.checkers):
    # Without these jsonschema silently accepts anything; refuse to run rather than fail open.
    raise ImportError(
        "elicitation.queue.schemas needs rfc3986-validator and rfc3339-validator for uri and date-time checks"
    )

# Character classes are spelled out in ASCII: Python's `\d`, `\s` and IGNORECASE also match non-ASCII characters
# (Arabic-Indic digits, the long s, the Kelvin sign), which ajv's rules do not.
_EMAIL_ATOM_CHARACTERS = r"A-Za-z0-9!#$%&'*+/=?^_`{|}~\-"
_EMAIL_ATOM = f"[{_EMAIL_ATOM_CHARACTERS}]+"
_DOMAIN_LABEL = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_EMAIL_PATTERN = re.compile(rf"{_EMAIL_ATOM}(?:\.{_EMAIL_ATOM})*@(?:{_DOMAIN_LABEL}\.)+{_DOMAIN_LABEL}")
_EMAIL_LOCAL_PART_CHARACTER = re.compile(rf"[{_EMAIL_ATOM_CHARACTERS}.]")
_DOMAIN_CHARACTER = re.compile("[A-Za-z0-9.-]")

_DATE_PATTERN = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}")
# RFC 3339 with a time zone; the ranges (and year 0, and the length of the month) are the jsonschema checker's.
_DATE_TIME_PATTERN = re.compile(
    "[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:(?P<second>[0-9]{2})(?:[.][0-9]+)?(?:[Zz]|[+-][0-9]{2}:[0-9]{2})"
)
_LEAP_SECOND = "60"

# RFC 3986 allows nothing after the scheme ("mailto:", "urn:?q"); ajv wants a path or an authority there.
_EMPTY_AFTER_SCHEME = re.compile("[A-Za-z][A-Za-z0-9+.-]*:(?:$|[?#])")
# The jsonschema checkers' regexes end in "$", which lets a trailing newline through.
_WHITESPACE_OR_CONTROL = re.compile(r"[\s\x00-\x1f\x7f]")

_EMAIL_REASON = "must be a valid email address"
_URI_REASON = "must be a valid absolute URI, such as https://example.com"
_DATE_REASON = "must be a valid date (YYYY-MM-DD)"
_DATE_TIME_REASON = "must be a valid date-time (RFC 3339 with a timezone, e.g. 2025-06-18T12:00:00Z)"


def format_problem(text_format: str, value: str) -> str | None:
    """Why `value` is not a valid `text_format`, or None when it is."""
    return _FORMAT_PROBLEMS[text_format](value)


def _email_problem(value: str) -> str | None:
    if _EMAIL_PATTERN.fullmatch(value):
        return None
    if value.count("@") != 1:
        return _EMAIL_REASON
    local_part, domain = value.split("@")
    # Name the first thing a reviewer can fix: the character or the dot that the agents' SDKs refuse.
    for character in local_part:
        if not _EMAIL_LOCAL_PART_CHARACTER.fullmatch(character):
            return f"{_EMAIL_REASON} (“{character}” is not allowed before the @)"
    if local_part.startswith(".") or local_part.endswith(".") or ".." in local_part:
        return f"{_EMAIL_REASON} (no dot at the start or end of the name, nor two in a row)"
    for character in domain:
        if not _DOMAIN_CHARACTER.fullmatch(character):
            return f"{_EMAIL_REASON} (“{character}” is not allowed after the @)"
    return _EMAIL_REASON


def _uri_problem(value: str) -> str | None:
    if not value.isascii() or _WHITESPACE_OR_CONTROL.search(value):
        return f"{_URI_REASON} (spaces and non-ASCII characters must be percent-encoded, e.g. %20)"
    if not _FORMAT_CHECKER.conforms(value, "uri") or _EMPTY_AFTER_SCHEME.match(value):
        return _URI_REASON
    browser = read_as_browser(value)
    if browser is None or not _has_valid_punycode(browser.host):
        return f"{_URI_REASON} (its host or port is not one a URL parser accepts)"
    return None


def _has_valid_punycode(host: str) -> bool:
    """Every "xn--" label of `host` decodes by IDNA 2008 (pydantic refuses a URL whose punycode does not)."""
    for label in host.lower().split("."):
        if label.startswith("xn--"):
            try:
                idna.decode(label)
            except idna.IDNAError:
                return False
    return True


def _date_problem(value: str) -> str | None:
    if _DATE_PATTERN.fullmatch(value) is None:
        return _DATE_REASON
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return _DATE_REASON
    return None


def _date_time_problem(value: str) -> str | None:
    shape = _DATE_TIME_PATTERN.fullmatch(value)
    if shape is None:
        return _DATE_TIME_REASON
    if shape["second"] == _LEAP_SECOND:
        return f"{_DATE_TIME_REASON}; seconds run from 00 to 59"
    return None if _FORMAT_CHECKER.conforms(value, "date-time") else _DATE_TIME_REASON


_FORMAT_PROBLEMS: dict[str, Callable[[str], str | None]] = {
    "email": _email_problem,
    "uri": _uri_problem,
    "date": _date_problem,
    "date-time": _date_time_problem,
}
