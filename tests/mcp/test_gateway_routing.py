"""Which of the gateway's two apps answers a request: a `tools/call` that may wait for a person goes to the streaming
app (progress, disconnects), everything else to the plain-JSON one; the body read to decide is handed on intact."""

import json
from typing import Any

import pytest

from elicitation.mcp.gateway.config import Upstream
from elicitation.mcp.gateway.endpoint import read_message
from elicitation.mcp.gateway.server import may_hold

pytestmark = pytest.mark.mcp

UPSTREAM = Upstream(
    name="tools", queue="ops", command=("python", "server.py"), passed_tools=frozenset({"ls"})
)


def call(tool: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": {}}}


@pytest.mark.parametrize(
    ("message", "holds"),
    [
        (call("deploy"), True),  # not on the pass list: an approval may hold it
        (call(None), True),  # no tool named: the SDK refuses it, as it would any call
        ([call("ls")], True),  # a batch (older protocol versions) might carry a held call
        (call("ls"), False),
        ({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, False),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, False),
        (
            {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": "deploy"},
            False,
        ),  # refused by the SDK
        (None, False),  # no JSON: the SDK answers the parse error
    ],
)
def test_only_a_call_that_may_wait_for_a_person_goes_to_the_streaming_app(message: Any, holds: bool) -> None:
    assert may_hold(message, UPSTREAM) is holds


def receiver(chunks: list[bytes], then: dict[str, Any] | None = None) -> Any:
    events = [
        {"type": "http.request", "body": chunk, "more_body": index < len(chunks) - 1}
        for index, chunk in enumerate(chunks)
    ]
    events.append(then or {"type": "http.disconnect"})

    async def receive() -> dict[str, Any]:
        return events.pop(0)

    return receive


async def drain(receive: Any) -> tuple[bytes, dict[str, Any]]:
    """Everything the app would read: the body, then the next event (the disconnect)."""
    body = b""
    while True:
        event = await receive()
        if event["type"] != "http.request":
            return body, event
        body += event.get("body", b"")
        if not event.get("more_body"):
            return body, await receive()


async def test_the_body_read_to_decide_is_handed_on_whole() -> None:
    body = json.dumps(call("deploy")).encode()

    message, receive = await read_message(receiver([body[:10], body[10:]]), limit=1000)

    assert message == call("deploy")
    assert await drain(receive) == (body, {"type": "http.disconnect"})


async def test_a_body_over_the_limit_is_not_read_past_it_and_reaches_the_app_whole() -> None:
    chunks = [b"x" * 600, b"y" * 600, b"z" * 600]

    message, receive = await read_message(receiver(chunks), limit=1000)

    assert message is None  # the SDK's own limit answers 413
    assert await drain(receive) == (b"".join(chunks), {"type": "http.disconnect"})


async def test_a_body_that_is_no_json_is_handed_on_for_the_sdk_to_refuse() -> None:
    message, receive = await read_message(receiver([b"{not json"]), limit=1000)

    assert message is None
    assert await drain(receive) == (b"{not json", {"type": "http.disconnect"})
