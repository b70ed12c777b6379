"""The API's one JSON parser and renderer.

Parsing refuses, with a 400 naming the field, what would poison a stored row: a lone UTF-16 surrogate in any key
or string, and nesting deeper than MAX_JSON_DEPTH (never a RecursionError 500). Rendering never fails on a row
stored before that check existed: its lone surrogates go out as U+FFFD instead of taking the listing down.
"""

import logging
from typing import Any

from rest_framework import exceptions, parsers, renderers
from rest_framework.utils import json

from elicitation.queue import untrusted_json

logger = logging.getLogger(__name__)


class UntrustedJSONParser(parsers.JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        encoding = parsers.get_encoding(parser_context or {})  # type: ignore[attr-defined]
        try:
            raw = stream.read() if stream is not None else b""
            text = raw.decode(encoding)
            parse_constant = json.strict_constant if self.strict else None
            value = json.loads(text, parse_constant=parse_constant)
        except RecursionError:
            limit = untrusted_json.max_depth()
            raise exceptions.ValidationError(
                {"$": [f"JSON nested deeper than {limit} levels."]}, code="too_deep"
            ) from None
        except ValueError as exc:  # bad UTF-8, bad JSON, NaN/Infinity
            raise exceptions.ParseError(f"JSON parse error - {type(exc).__name__}") from None
        try:
            untrusted_json.check(value)
        except untrusted_json.JSONRefused as refused:
            raise exceptions.ValidationError({refused.path: [refused.reason]}, code=refused.code) from None
        return value


class SafeJSONRenderer(renderers.JSONRenderer):
    def render(
        self, data: Any, accepted_media_type: str | None = None, renderer_context: Any = None
    ) -> bytes:
        try:
            return super().render(data, accepted_media_type, renderer_context)
        except UnicodeEncodeError:
            # A value stored before the parser refused lone surrogates: show it repaired, keep the page working.
            logger.warning("rendered a stored lone surrogate as U+FFFD; run `manage.py repair_text`")
            return super().render(untrusted_json.scrub(data), accepted_media_type, renderer_context)
