"""The gateway's upstreams, read from `MCP_GATEWAY_UPSTREAMS` (JSON: name -> upstream) and checked whole: a bad entry
stops the server at start with a message naming the entry and field, never with the entry's values (they hold
credentials).

    {"github": {"command": ["python", "github_server.py"], "env": {"GITHUB_TOKEN": "…"}, "queue": "ops"},
     "billing": {"url": "https://billing.internal/mcp", "headers": {"Authorization": "Bearer …"},
                 "queue": "payments", "pass": ["list_invoices"], "timeout": 120}}

`command` (stdio: argv, started by the gateway) or `url` (streamable HTTP), never both; `env` only with a command,
`headers` only with a URL; `queue` is where held calls go (required); `pass` names tools forwarded without a
request (read-only tools an operator trusts); `timeout` bounds one upstream call in seconds (default 60);
`expiresIn` is a held call's deadline in seconds (default: the queue's)."""

import json
import re
from dataclasses import dataclass, field
from typing import Any

from django.core.exceptions import ImproperlyConfigured

NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
DEFAULT_TIMEOUT_SECONDS = 60.0
KNOWN_FIELDS = frozenset({"command", "env", "cwd", "url", "headers", "queue", "pass", "timeout", "expiresIn"})


@dataclass(frozen=True)
class Upstream:
    name: str
    queue: str
    command: tuple[str, ...] = ()
    url: str = ""
    # Credentials: repr=False keeps them out of tracebacks and logs that print the upstream.
    env: dict[str, str] = field(default_factory=dict, repr=False)
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    cwd: str | None = None
    passed_tools: frozenset[str] = frozenset()
    timeout: float = DEFAULT_TIMEOUT_SECONDS
    expires_in: int | None = None

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"


def _refuse(name: str, field_name: str, reason: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"MCP_GATEWAY_UPSTREAMS[{name!r}].{field_name}: {reason}")


def _strings(name: str, field_name: str, value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _refuse(name, field_name, "must be an object of strings")
    return dict(value)


def _upstream(name: str, entry: Any) -> Upstream:
    if not NAME_PATTERN.match(name):
        raise ImproperlyConfigured(
            f"MCP_GATEWAY_UPSTREAMS: {name!r} is not a gateway name (lowercase letters, digits, - and _; 63 at most)"
        )
    if not isinstance(entry, dict):
        raise _refuse(name, "", "must be an object")
    unknown = sorted(set(entry) - KNOWN_FIELDS)
    if unknown:
        raise _refuse(name, unknown[0], "unknown field")
    command, url = entry.get("command"), entry.get("url")
    if (command is None) == (url is None):
        raise _refuse(name, "command", "give exactly one of command (stdio) or url (streamable HTTP)")
    if command is not None and (
        not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command)
    ):
        raise _refuse(name, "command", "must be a non-empty list of strings (argv)")
    if url is not None and (not isinstance(url, str) or not re.match(r"^https?://[^/\s]+", url)):
        raise _refuse(name, "url", "must be an http(s) URL")
    if "env" in entry and command is None:
        raise _refuse(name, "env", "only for a command")
    if "headers" in entry and url is None:
        raise _refuse(name, "headers", "only for a url")
    queue = entry.get("queue")
    if not isinstance(queue, str) or not queue:
        raise _refuse(name, "queue", "is required: the queue held calls go to")
    passed = entry.get("pass", [])
    if not isinstance(passed, list) or not all(isinstance(t, str) for t in passed):
        raise _refuse(name, "pass", "must be a list of tool names")
    timeout = entry.get("timeout", DEFAULT_TIMEOUT_SECONDS)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout <= 3600:
        raise _refuse(name, "timeout", "must be a number of seconds, above 0 and at most 3600")
    expires_in = entry.get("expiresIn")
    if expires_in is not None and (
        isinstance(expires_in, bool) or not isinstance(expires_in, int) or expires_in < 1
    ):
        raise _refuse(name, "expiresIn", "must be a whole number of seconds, at least 1")
    cwd = entry.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise _refuse(name, "cwd", "must be a path")
    return Upstream(
        name=name,
        queue=queue,
        command=tuple(command or ()),
        url=url or "",
        env=_strings(name, "env", entry.get("env", {})),
        headers=_strings(name, "headers", entry.get("headers", {})),
        cwd=cwd,
        passed_tools=frozenset(passed),
        timeout=float(timeout),
        expires_in=expires_in,
    )


def parse_upstreams(raw: str) -> dict[str, Upstream]:
    """`MCP_GATEWAY_UPSTREAMS` as upstreams by name; empty or unset: none (the gateway answers 404)."""
    if not raw.strip():
        return {}
    try:
        entries = json.loads(raw)
    except json.JSONDecodeError as exc:
        # The position only: the text around it may be a credential.
        raise ImproperlyConfigured(
            f"MCP_GATEWAY_UPSTREAMS is not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})"
        ) from None
    if not isinstance(entries, dict):
        raise ImproperlyConfigured("MCP_GATEWAY_UPSTREAMS must be a JSON object: name -> upstream")
    return {name: _upstream(name, entry) for name, entry in entries.items()}
