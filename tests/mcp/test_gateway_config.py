"""`MCP_GATEWAY_UPSTREAMS`: read whole at start; a bad entry is refused naming the entry and field, never echoing a
value (values hold credentials)."""

import json
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from elicitation.mcp.gateway.config import parse_upstreams

pytestmark = pytest.mark.mcp

SECRET = "ghp_never-in-an-error-9d1c"


def refusal(entries: Any) -> str:
    with pytest.raises(ImproperlyConfigured) as refused:
        parse_upstreams(json.dumps(entries))
    return str(refused.value)


def test_a_stdio_and_an_http_upstream_are_read_with_their_defaults() -> None:
    upstreams = parse_upstreams(
        json.dumps(
            {
                "github": {"command": ["python", "gh.py"], "env": {"TOKEN": SECRET}, "queue": "ops"},
                "billing": {
                    "url": "https://billing.internal/mcp",
                    "headers": {"X": "y"},
                    "queue": "pay",
                    "pass": ["ls"],
                },
            }
        )
    )

    github, billing = upstreams["github"], upstreams["billing"]
    assert (github.transport, github.command, github.queue, github.timeout) == (
        "stdio",
        ("python", "gh.py"),
        "ops",
        60,
    )
    assert (billing.transport, billing.passed_tools, billing.expires_in) == ("http", frozenset({"ls"}), None)
    assert SECRET not in repr(github)


def test_nothing_configured_is_no_gateway() -> None:
    assert parse_upstreams("") == {}
    assert parse_upstreams("  ") == {}


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"command": ["x"], "url": "http://a", "queue": "q"}, "command"),
        ({"queue": "q"}, "command"),
        ({"command": "python server.py", "queue": "q"}, "command"),
        ({"url": "ftp://host/mcp", "queue": "q"}, "url"),
        ({"url": "http://host/mcp", "env": {"A": "b"}, "queue": "q"}, "env"),
        ({"command": ["x"], "headers": {"A": "b"}, "queue": "q"}, "headers"),
        ({"command": ["x"]}, "queue"),
        ({"command": ["x"], "queue": "q", "pass": "deploy"}, "pass"),
        ({"command": ["x"], "queue": "q", "timeout": 0}, "timeout"),
        ({"command": ["x"], "queue": "q", "expiresIn": True}, "expiresIn"),
        ({"command": ["x"], "queue": "q", "env": {"TOKEN": 5}}, "env"),
        ({"command": ["x"], "queue": "q", "typo": SECRET}, "typo"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_field(entry: dict[str, Any], field: str) -> None:
    told = refusal({"up": entry})

    assert told.startswith(f"MCP_GATEWAY_UPSTREAMS['up'].{field}:")
    assert SECRET not in told


def test_a_bad_name_or_shape_is_refused() -> None:
    assert "not a gateway name" in refusal({"Bad/Name": {"command": ["x"], "queue": "q"}})
    assert "must be a JSON object" in refusal(["x"])
    with pytest.raises(ImproperlyConfigured) as broken:
        parse_upstreams('{"up": {"headers": {"Authorization": "' + SECRET)
    assert "is not JSON" in str(broken.value) and SECRET not in str(broken.value)
