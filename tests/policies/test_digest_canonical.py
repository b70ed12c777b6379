"""The argument digest as docs/approvals.md defines it, recomputed by a third party from the docs alone: SHA-256 over
the RFC 8785 canonical JSON of {arguments, message, requestedSchema, server, tool}, with `rfc8785` and hashlib and
nothing of ReviewHub's."""

import hashlib
from collections.abc import Callable
from typing import Any

import pytest
import rfc8785

from elicitation.models import ElicitationRequest, Queue
from elicitation.queue import rules

pytestmark = pytest.mark.django_db

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Überweisung freigeben? ✅"}},
    "required": ["approve"],
}
MESSAGE = "Überweisung 100 € an Zoë 🎉"
ARGUMENTS: dict[str, Any] = {
    "amount": 100,
    "currency": "EUR",
    "memo": "Miete 🏠",
    "fee": 0.5,
    "to": {"iban": "DE1"},
}


def third_party_digest(body: dict[str, Any]) -> str:
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


def auto_accept(queue: Queue) -> None:
    rules.replace_policy(
        queue,
        {
            "rules": [
                {"name": "auto", "match": {"tool": "pay"}, "action": "accept", "content": {"approve": True}}
            ]
        },
    )


def test_a_rules_digest_is_recomputed_from_the_docs_alone_with_non_ascii_text(
    queue: Queue, make_request: Callable[..., ElicitationRequest]
) -> None:
    auto_accept(queue)
    request = make_request(
        message=MESSAGE,
        requested_schema=SCHEMA,
        context={"mcp": {"server": "bank", "tool": "pay", "arguments": ARGUMENTS}},
    )

    digest = request.result()["_meta"]["reviewhub/decision"]["digest"]  # type: ignore[index]
    expected = third_party_digest(
        {
            "arguments": ARGUMENTS,
            "message": MESSAGE,
            "requestedSchema": SCHEMA,
            "server": "bank",
            "tool": "pay",
        }
    )
    assert digest == expected
    # Not the old sorted-keys, ASCII-escaped form, which differs on every non-ASCII message.
    assert b"\\u00dc" not in rfc8785.dumps({"message": MESSAGE})


def test_the_docs_worked_example_gives_the_digest_the_docs_print() -> None:
    context = {
        "mcp": {
            "server": "bank",
            "tool": "transfer",
            "arguments": {"amount": 100, "currency": "EUR", "to": "Zoë", "memo": "Miete 🏠"},
        }
    }
    schema = {"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}
    body = {
        "arguments": {"amount": 100, "currency": "EUR", "memo": "Miete 🏠", "to": "Zoë"},
        "message": "Überweisung 100 €",
        "requestedSchema": schema,
        "server": "bank",
        "tool": "transfer",
    }
    assert rules.request_digest("Überweisung 100 €", schema, context) == third_party_digest(body)
    assert third_party_digest(body) == DOCS_EXAMPLE_DIGEST


def test_absent_server_tool_and_arguments_are_null_null_and_empty() -> None:
    body = {"arguments": {}, "message": "Go?", "requestedSchema": None, "server": None, "tool": None}
    assert rules.request_digest("Go?", None, {"team": "ops"}) == third_party_digest(body)


def test_hand_written_context_keys_count_as_the_docs_list_them() -> None:
    context = {"serverName": "bank", "toolName": "pay", "args": {"amount": 1}}
    body = {
        "arguments": {"amount": 1},
        "message": "Pay?",
        "requestedSchema": None,
        "server": "bank",
        "tool": "pay",
    }
    assert rules.request_digest("Pay?", None, context) == third_party_digest(body)


def test_an_integer_beyond_two_to_the_53_is_digested_as_the_double_nearest_it() -> None:
    big = 2**60 + 1
    body = {
        "arguments": {"n": float(big)},
        "message": "m",
        "requestedSchema": None,
        "server": None,
        "tool": None,
    }
    assert rules.request_digest("m", None, {"arguments": {"n": big}}) == third_party_digest(body)


def test_different_arguments_give_a_different_digest() -> None:
    context = {"mcp": {"tool": "pay", "arguments": {"amount": 100}}}
    other = {"mcp": {"tool": "pay", "arguments": {"amount": 101}}}
    assert rules.request_digest("Pay?", None, context) != rules.request_digest("Pay?", None, other)


DOCS_EXAMPLE_DIGEST = "sha256:4fd55940012df75b072d45d1740b585e794ac52985401addf9d1fb488188c068"
