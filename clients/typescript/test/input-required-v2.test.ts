/** The input-required driver on SDK 2.x over a real 2026-07-28 session (streamable HTTP, server/discover,
 * per-request _meta): the driver, not the SDK's auto-fulfilment, drives the round, and a live ReviewHub answers. */

import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import { after, before, test } from "node:test";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client-v2";
import { ReviewHubClient } from "reviewhub-client";
import { resolveInputRequired } from "reviewhub-client/mcp";

import { LiveServer, Reviewer } from "./harness.js";

const VERSION = "2026-07-28";
const CACHE = { ttlMs: 0, cacheScope: "private" };

interface Call {
  id: unknown;
  params: Record<string, any>;
  headers: Record<string, string | string[] | undefined>;
}

/** A 2026-07-28-only server at the wire level: `confirm` asks one question with state, then completes. */
function wireServer(): { server: Server; calls: Call[]; states: string[] } {
  const calls: Call[] = [];
  const states: string[] = [];
  const answer = (method: string, params: Record<string, any>): Record<string, unknown> | null => {
    if (method === "server/discover") {
      return {
        resultType: "complete",
        ...CACHE,
        supportedVersions: [VERSION],
        capabilities: { tools: {} },
        serverInfo: { name: "wire", version: "1.0.0" },
      };
    }
    if (method === "tools/list") {
      return { resultType: "complete", ...CACHE, tools: [{ name: "confirm", inputSchema: { type: "object" } }] };
    }
    if (method !== "tools/call") return null;
    if (!params.inputResponses) {
      const state = JSON.stringify({ nonce: crypto.randomUUID(), round: 1 });
      states.push(state);
      const question = {
        method: "elicitation/create",
        params: { mode: "form", message: "Ship it?", requestedSchema: { type: "object", properties: { ok: { type: "boolean" } } } },
      };
      return { resultType: "input_required", inputRequests: { ship: question }, requestState: state };
    }
    const ship = params.inputResponses.ship ?? {};
    const text = ship.action === "accept" && ship.content?.ok ? "shipped" : "held";
    return { resultType: "complete", content: [{ type: "text", text }] };
  };
  const server = createServer((request, response) => {
    let body = "";
    request.on("data", (chunk: Buffer) => (body += chunk.toString()));
    request.on("end", () => {
      if (request.method !== "POST") {
        response.writeHead(405, { Allow: "POST" }).end();
        return;
      }
      const message = JSON.parse(body) as { id?: unknown; method: string; params?: Record<string, any> };
      if (message.id === undefined) {
        response.writeHead(202).end();
        return;
      }
      const params = message.params ?? {};
      if (message.method === "tools/call") calls.push({ id: message.id, params, headers: request.headers });
      const result = answer(message.method, params);
      const reply = result ? { result } : { error: { code: -32601, message: `Method not found: ${message.method}` } };
      response.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify({ jsonrpc: "2.0", id: message.id, ...reply }));
    });
  });
  return { server, calls, states };
}

let live: LiveServer;
let reviewer: Reviewer;

before(async () => {
  live = await LiveServer.start();
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
});

after(async () => {
  await live.close();
});

test("on SDK 2.x the driver drives a 2026-07-28 round itself: state echoed under a new id", { timeout: 60_000 }, async () => {
  const { server, calls, states } = wireServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  // No elicitation handler is installed: were the SDK to fulfil the round itself, nobody could answer it.
  const client = new Client({ name: "agent", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } });
  const hub = new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey });
  try {
    await client.connect(new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${port}/mcp`)));
    assert.equal(client.getProtocolEra(), "modern");
    const calling = resolveInputRequired(client, "confirm", { version: "2.0" }, hub, "rounds");
    const asked = await reviewer.nextRequest("rounds");
    await reviewer.respond(asked.id, "accept", { ok: true });
    const result = await calling;

    assert.equal((result.content[0] as { text: string }).text, "shipped");
    assert.equal((asked.context.mcp as Record<string, unknown>).requestState, states[0]);
    const [first, retry] = calls as [Call, Call];
    assert.equal(calls.length, 2);
    assert.equal(first.params.requestState, undefined);
    assert.equal(retry.params.requestState, states[0]); // echoed byte for byte
    assert.equal(retry.params.inputResponses.ship.action, "accept");
    assert.notEqual(retry.id, first.id);
    for (const call of calls) {
      assert.equal(call.params._meta["io.modelcontextprotocol/protocolVersion"], VERSION);
      assert.equal(call.headers["mcp-method"], "tools/call");
    }
  } finally {
    await hub.close();
    await client.close();
    server.close();
  }
});
