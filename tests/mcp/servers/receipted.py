"""An MCP server that trusts an approval only with proof: its `transfer` tool asks with a raw `elicitation/create`
(so it sees the whole ElicitResult, `_meta` included), recomputes the argument digest itself from docs/approvals.md
(`rfc8785` + SHA-256, nothing of ReviewHub's), and verifies the signed receipt against ReviewHub's published keys
(`RH_RECEIPTS_JWKS_URL`). Run as a stdio subprocess: `python tests/mcp/servers/receipted.py`.
"""

import hashlib
import json
import os
from typing import Any

import httpx
import rfc8785
from mcp.server.mcpserver import Context, MCPServer

from reviewhub_client.receipts import ReceiptInvalid, verify_receipt

NAME = "receipted-transfers"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approve": {"type": "boolean", "title": "Approve?"}},
    "required": ["approve"],
}

server = MCPServer(NAME)


def expected_digest(message: str, tool: str, arguments: dict[str, Any]) -> str:
    body = {
        "arguments": arguments,
        "message": message,
        "requestedSchema": SCHEMA,
        "server": NAME,
        "tool": tool,
    }
    return "sha256:" + hashlib.sha256(rfc8785.dumps(body)).hexdigest()


@server.tool()
async def transfer(amount: int, note: str, ctx: Context) -> str:
    """Transfer money once ReviewHub approves these exact arguments."""
    message = f"Überweisung {amount} € — {note}"
    answer = await ctx.session.elicit_form(message, SCHEMA, related_request_id=ctx.request_id)
    meta = answer.meta or {}
    mine = expected_digest(message, "transfer", {"amount": amount, "note": note})
    jwks = httpx.get(os.environ["RH_RECEIPTS_JWKS_URL"], timeout=10).json()
    try:
        receipt = verify_receipt(meta.get("reviewhub/receipt", ""), jwks, expected_digest=mine)
        verified: dict[str, Any] = {
            "action": receipt.action,
            "rule": receipt.rule,
            "request": receipt.request_id,
        }
    except ReceiptInvalid as refused:
        verified = {"refused": str(refused)}
    seen = {
        "action": answer.action,
        "decision": meta.get("reviewhub/decision"),
        "mine": mine,
        "receipt": verified,
    }
    return json.dumps(seen)


if __name__ == "__main__":
    server.run("stdio")
