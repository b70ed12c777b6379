"""A 2026-07-28-only MCP server written at the wire level: JSON-RPC over plain HTTP POST (`application/json`
answers, no SSE), `server/discover` and no initialize handshake, as the stateless lifecycle has it.

Its one tool, `confirm`, asks one elicitation with an `InputRequiredResult` carrying a `requestState`, and on the
retry answers with a complete result that has *no* `resultType` (the schema says a client treats that as
`complete`). Written by hand rather than on the SDK's server so the wire is exactly the shapes under test. Every
`tools/call` is recorded (id, params, headers) for the test to assert on.
"""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

VERSION = "2026-07-28"
QUESTION = {
    "method": "elicitation/create",
    "params": {
        "mode": "form",
        "message": "Ship 2.0 to production?",
        "requestedSchema": {"type": "object", "properties": {"confirmed": {"type": "boolean"}}},
    },
}
CACHE = {"ttlMs": 0, "cacheScope": "private"}
TOOLS = [
    {
        "name": "confirm",
        "description": "Asks for a confirmation, then answers without resultType.",
        "inputSchema": {"type": "object", "properties": {"version": {"type": "string"}}},
    }
]


class MrtrWireServer:
    """The server on a loopback port; `calls` holds each `tools/call` as received."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.states: list[str] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/mcp"

    def start(self) -> MrtrWireServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def answer(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if method == "server/discover":
            return {
                "resultType": "complete",
                **CACHE,
                "supportedVersions": [VERSION],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mrtr-wire", "version": "1.0.0"},
            }
        if method == "tools/list":
            return {"resultType": "complete", **CACHE, "tools": TOOLS}
        if method == "tools/call":
            if not params.get("inputResponses"):
                state = json.dumps({"nonce": secrets.token_urlsafe(8), "round": 1})
                self.states.append(state)
                return {
                    "resultType": "input_required",
                    "inputRequests": {"ship": QUESTION},
                    "requestState": state,
                }
            answer = params["inputResponses"].get("ship", {})
            confirmed = answer.get("action") == "accept" and (answer.get("content") or {}).get("confirmed")
            text = f"{params.get('arguments', {}).get('version')}: {'shipped' if confirmed else 'held'}"
            return {"content": [{"type": "text", "text": text}]}  # no resultType: complete
        raise LookupError(method)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if "id" not in body:  # a notification
                    self.send_response(202)
                    self.end_headers()
                    return
                params = body.get("params") or {}
                if body["method"] == "tools/call":
                    server.calls.append({"id": body["id"], "params": params, "headers": dict(self.headers)})
                try:
                    reply: dict[str, Any] = {"result": server.answer(body["method"], params)}
                except LookupError:
                    reply = {"error": {"code": -32601, "message": f"Method not found: {body['method']}"}}
                data = json.dumps({"jsonrpc": "2.0", "id": body["id"], **reply}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # no standalone SSE stream on this server
                self.send_response(405)
                self.send_header("Allow", "POST")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler
