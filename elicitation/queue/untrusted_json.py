"""JSON from outside (API bodies, WebSocket frames) checked before anything stores or echoes it.

Two things Python's `json` accepts would poison what is stored: a lone UTF-16 surrogate (`"\\ud800"` decodes to a
`str` no UTF-8 encoder, PostgreSQL or browser can take, so every later page or listing holding it fails) and
nesting deep enough that recursive code meets a `RecursionError`. Both are refused at the door with the path of
the offending field; `scrub` repairs values stored before the door existed. `check_text_depth` counts the depth on
the text, before a parser builds anything (rule files, `rules.load_rule_file`).
"""

import json
import re
from typing import Any

from django.conf import settings

# After json.loads a valid surrogate pair has become one code point: any surrogate left is a lone one.
LONE_SURROGATE = re.compile("[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


class JSONRefused(ValueError):
    """`code` is "surrogate", "too_deep" or "malformed"; `path` names the field (`$` for the document)."""

    def __init__(self, code: str, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.code = code
        self.path = path
        self.reason = reason


def max_depth() -> int:
    return int(settings.MAX_JSON_DEPTH)


def printable(text: str) -> str:
    """A key as it may appear in an error message: its lone surrogates written as `\\udXXX` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]" if path else f"[{key}]"
    return f"{path}.{printable(key)}" if path else printable(key)


def check(value: Any, *, limit: int | None = None, path: str = "") -> None:
    """Raise JSONRefused for the first lone surrogate (in a key or a string) or container nested deeper than
    `limit` (default MAX_JSON_DEPTH; the outermost container is depth 1). Iterative: no recursion to exhaust."""
    limit = max_depth() if limit is None else limit
    stack: list[tuple[Any, str, int]] = [(value, path, 1)]
    while stack:
        node, where, depth = stack.pop()
        if isinstance(node, str):
            if not node.isascii() and LONE_SURROGATE.search(node):
                raise JSONRefused(
                    "surrogate", where or "$", "contains a lone UTF-16 surrogate (invalid Unicode)."
                )
            continue
        if not isinstance(node, (dict, list)):
            continue
        if depth > limit:
            raise JSONRefused("too_deep", where or "$", f"nested deeper than {limit} levels.")
        if isinstance(node, dict):
            for key, item in node.items():
                child = join(where, str(key))
                if isinstance(key, str) and not key.isascii() and LONE_SURROGATE.search(key):
                    raise JSONRefused(
                        "surrogate", child, "the key contains a lone UTF-16 surrogate (invalid Unicode)."
                    )
                stack.append((item, child, depth + 1))
        else:
            stack.extend((item, join(where, index), depth + 1) for index, item in enumerate(node))


# JSON text's structure without parsing it: outside strings only `"` and the brackets matter; a string's rest
# (escapes included) is consumed in one anchored match, so the walk is linear in the text, whatever its content.
_JSON_STRUCTURE = re.compile(r'["\[\]{}]')
_JSON_STRING_REST = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def check_text_depth(text: str, *, limit: int | None = None) -> None:
    """Raise JSONRefused("too_deep") when JSON text nests containers deeper than `limit` (as `check` counts them),
    found before any parser builds anything: the brackets outside strings, counted. Exact for valid JSON; text
    that is not JSON (an unterminated string) stops the count and is left to the parser to refuse."""
    limit = max_depth() if limit is None else limit
    depth, position = 0, 0
    search, string_rest = _JSON_STRUCTURE.search, _JSON_STRING_REST.match
    while (found := search(text, position)) is not None:
        char, position = found.group(), found.end()
        if char == '"':
            rest = string_rest(text, position)
            if rest is None:
                return
            position = rest.end()
        elif char in "[{":
            depth += 1
            if depth > limit:
                raise JSONRefused("too_deep", "$", f"nested deeper than {limit} levels.")
        else:
            depth = max(0, depth - 1)


def loads(text: str | bytes, *, limit: int | None = None) -> Any:
    """Parse untrusted JSON text and `check` it. Every failure is a JSONRefused, never a RecursionError."""
    try:
        value = json.loads(text)
    except RecursionError:
        limit = max_depth() if limit is None else limit
        raise JSONRefused("too_deep", "$", f"nested deeper than {limit} levels.") from None
    except (ValueError, TypeError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise JSONRefused("malformed", "$", f"is not valid JSON ({type(exc).__name__}).") from None
    check(value, limit=limit)
    return value


def scrub_text(text: str) -> str:
    return LONE_SURROGATE.sub(REPLACEMENT, text) if not text.isascii() else text


def scrub(value: Any) -> Any:
    """The value with every lone surrogate (in keys and strings) replaced by U+FFFD; other values unchanged.
    Iterative, so a stored value nested arbitrarily deep is repaired too."""
    if isinstance(value, str):
        return scrub_text(value)
    if not isinstance(value, (dict, list)):
        return value
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]  # (parent, slot, node)
    while stack:
        parent, slot, node = stack.pop()
        if isinstance(node, str):
            parent[slot] = scrub_text(node)
        elif isinstance(node, list):
            copy = list(node)
            parent[slot] = copy
            stack.extend((copy, index, item) for index, item in enumerate(copy))
        elif isinstance(node, dict):
            fresh: dict[Any, Any] = {}
            for key, item in node.items():
                fresh[scrub_text(key) if isinstance(key, str) else key] = item
            parent[slot] = fresh
            stack.extend((fresh, key, item) for key, item in fresh.items())
    return root[0]


def needs_scrub(value: Any) -> bool:
    try:
        check(value, limit=1 << 30)
    except JSONRefused:
        return True
    return False
