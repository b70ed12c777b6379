/** The input-required driver on SDK 2.x over a real 2026-07-28 session (streamable HTTP, server/discover,
 * per-request _meta): the driver, not the SDK's auto-fulfilment, drives the round, a live ReviewHub answers, a final
 * result without resultType is read as complete, and SEP-2243 `Mcp-Param-*` headers go out as tools declare them. */

import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import { after, before, test } from "node:test";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client-v2";
import { ReviewHubClient } from "reviewhub-client";
import { resolveInputRequired } from "reviewhub-client/mcp";

import { LiveServer, Reviewer } from "./harness.js";

const VERSION = "2026-07-28";
const CACHE = { ttlMs: 0, cacheScope: "private" };
const HEADER_MISMATCH = -32020;

interface Call {
  id: unknown;
  params: Record<string, any>;
  headers: IncomingHttpHeaders;
}

/** What a wire server answers a request: a result, or a JSON-RPC error with the HTTP status it comes under. */
type Reply = { result: Record<string, unknown> } | { error: { code: number; message: string }; status?: number };

interface WireServer {
  url: string;
  calls: Call[];
  /** How many times the tools were listed. */
  listings: () => number;
  close: () => Promise<void>;
}

/** A 2026-07-28-only MCP server at the wire level: discovery and `tools/list` (of `tools()`, read at each listing)
 * are answered here, every `tools/call` is recorded and answered by `onCall`. */
async function wireServer(
  tools: () => Record<string, unknown>[],
  onCall: (params: Record<string, any>, headers: IncomingHttpHeaders) => Reply,
): Promise<WireServer> {
  const calls: Call[] = [];
  let listings = 0;
  const answer = (method: string, params: Record<string, any>, headers: IncomingHttpHeaders): Reply => {
    if (method === "server/discover") {
      const serverInfo = { name: "wire", version: "1.0.0" };
      const discovered = { supportedVersions: [VERSION], capabilities: { tools: {} }, serverInfo };
      return { result: { resultType: "complete", ...CACHE, ...discovered } };
    }
    if (method === "tools/list") {
      listings += 1;
      return { result: { resultType: "complete", ...CACHE, tools: tools() } };
    }
    if (method === "tools/call") return onCall(params, headers);
    return { error: { code: -32601, message: `Method not found: ${method}` } };
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
      const reply = answer(message.method, params, request.headers);
      const status = "error" in reply ? (reply.status ?? 200) : 200;
      const payload = "error" in reply ? { error: reply.error } : { result: reply.result };
      const json = JSON.stringify({ jsonrpc: "2.0", id: message.id, ...payload });
      response.writeHead(status, { "Content-Type": "application/json" }).end(json);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    calls,
    listings: () => listings,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

const QUESTION = {
  method: "elicitation/create",
  params: {
    mode: "form",
    message: "Ship it?",
    requestedSchema: { type: "object", properties: { ok: { type: "boolean" } } },
  },
};

/** One question with state, then the final result (tagged `complete`, or with no resultType at all). */
function confirmTool(states: string[], tagFinal: boolean): (params: Record<string, any>) => Reply {
  return (params) => {
    if (!params.inputResponses) {
      const state = JSON.stringify({ nonce: crypto.randomUUID(), round: 1 });
      states.push(state);
      return { result: { resultType: "input_required", inputRequests: { ship: QUESTION }, requestState: state } };
    }
    const ship = params.inputResponses.ship ?? {};
    const text = ship.action === "accept" && ship.content?.ok ? "shipped" : "held";
    return { result: { ...(tagFinal ? { resultType: "complete" } : {}), content: [{ type: "text", text }] } };
  };
}

/** A 2.x Client on a 2026-07-28 session with `server`. No elicitation handler is installed: were the SDK to fulfil a
 * round itself, nobody could answer it. */
async function connect(server: WireServer): Promise<Client> {
  const client = new Client({ name: "agent", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } });
  await client.connect(new StreamableHTTPClientTransport(new URL(server.url)));
  assert.equal(client.getProtocolEra(), "modern");
  return client;
}

function textContent(text: string): { type: "text"; text: string } {
  return { type: "text", text };
}

function text(result: { content: unknown[] }): string {
  return (result.content[0] as { text: string }).text;
}

/** The `Mcp-Param-*` headers of a request (names lowercased by node). */
function paramHeadersIn(headers: IncomingHttpHeaders): Record<string, string> {
  return Object.fromEntries(Object.entries(headers).filter(([name]) => name.startsWith("mcp-param-")) as [string, string][]);
}

function paramHeadersOf(call: Call): Record<string, string> {
  return paramHeadersIn(call.headers);
}

function base64Sentinel(value: string): string {
  return `=?base64?${Buffer.from(value, "utf8").toString("base64")}?=`;
}

let live: LiveServer;
let reviewer: Reviewer;
let hub: ReviewHubClient;

before(async () => {
  live = await LiveServer.start();
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
  hub = new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey });
});

after(async () => {
  await hub.close();
  await live.close();
});

test("on SDK 2.x the driver drives a 2026-07-28 round itself: state echoed under a new id", { timeout: 60_000 }, async () => {
  const states: string[] = [];
  const tools = [{ name: "confirm", inputSchema: { type: "object" } }];
  const server = await wireServer(() => tools, confirmTool(states, true));
  const client = await connect(server);
  try {
    const calling = resolveInputRequired(client, "confirm", { version: "2.0" }, hub, "rounds");
    const asked = await reviewer.nextRequest("rounds");
    await reviewer.respond(asked.id, "accept", { ok: true });
    const result = await calling;

    assert.equal(text(result), "shipped");
    assert.equal((asked.context.mcp as Record<string, unknown>).requestState, states[0]);
    const [first, retry] = server.calls as [Call, Call];
    assert.equal(server.calls.length, 2);
    assert.equal(first.params.requestState, undefined);
    assert.equal(retry.params.requestState, states[0]); // echoed byte for byte
    assert.equal(retry.params.inputResponses.ship.action, "accept");
    assert.notEqual(retry.id, first.id);
    for (const call of server.calls) {
      assert.equal(call.params._meta["io.modelcontextprotocol/protocolVersion"], VERSION);
      assert.equal(call.headers["mcp-method"], "tools/call");
      assert.deepEqual(paramHeadersOf(call), {}); // the tool declares no x-mcp-header
    }
  } finally {
    await client.close();
    await server.close();
  }
});

test("a final result without resultType is the complete result, though SDK 2.x refuses it", { timeout: 60_000 }, async () => {
  const states: string[] = [];
  const confirm = confirmTool(states, false);
  const server = await wireServer(
    () => [
      { name: "confirm", inputSchema: { type: "object" } },
      { name: "plain", inputSchema: { type: "object" } },
    ],
    // `plain` answers at once with no resultType.
    (params) => (params.name === "plain" ? { result: { content: [textContent("plain")] } } : confirm(params)),
  );
  const client = await connect(server);
  try {
    const calling = resolveInputRequired(client, "confirm", {}, hub, "rounds");
    const asked = await reviewer.nextRequest("rounds");
    await reviewer.respond(asked.id, "accept", { ok: true });
    const result = await calling;
    assert.equal(text(result), "shipped");
    assert.equal(result.isError, undefined);
    assert.equal(server.calls.length, 2);

    const direct = await resolveInputRequired(client, "plain", {}, hub, "rounds");
    assert.deepEqual(direct, { content: [{ type: "text", text: "plain" }] });

    // Why call-v2.ts reads such results off the transport, and proof that it hands the SDK every message unchanged:
    // the application's own callTool() still gets the SDK's refusal. When this fails, 2.x reads such a result itself.
    await assert.rejects(client.callTool({ name: "plain", arguments: {} }), /missing required resultType/);
  } finally {
    await client.close();
    await server.close();
  }
});

const DEPLOY_SCHEMA = {
  type: "object",
  properties: {
    region: { type: "string", "x-mcp-header": "Region" },
    priority: { type: "integer", "x-mcp-header": "Priority" },
    dryRun: { type: "boolean", "x-mcp-header": "Dry-Run" },
    note: { type: "string", "x-mcp-header": "Note" },
    label: { type: "string", "x-mcp-header": "Label" },
    token: { type: "string", "x-mcp-header": "Token" },
    reviewer: { type: "string", "x-mcp-header": "Reviewer" },
    target: { type: "object", properties: { cluster: { type: "string", "x-mcp-header": "Cluster" } } },
    query: { type: "string" },
  },
};

const DEPLOY_ARGS = {
  region: "us-west1",
  priority: 42,
  dryRun: false,
  note: "Grüße, 世界",
  label: " padded",
  token: "=?base64?abc?=",
  reviewer: null,
  target: { cluster: "eu 1" },
  query: "SELECT * FROM deploys",
};

/** The headers a 2026-07-28 client owes for DEPLOY_ARGS: strings as they are (inner spaces too), integers in
 * decimal, booleans lowercase; non-ASCII, surrounding whitespace and sentinel look-alikes Base64-wrapped; nothing for
 * a null argument or an unmarked one. */
const DEPLOY_HEADERS = {
  "mcp-param-region": "us-west1",
  "mcp-param-priority": "42",
  "mcp-param-dry-run": "false",
  "mcp-param-note": base64Sentinel("Grüße, 世界"),
  "mcp-param-label": base64Sentinel(" padded"),
  "mcp-param-token": base64Sentinel("=?base64?abc?="),
  "mcp-param-cluster": "eu 1",
};

const BATCH_ITEM = { type: "string", "x-mcp-header": "Id" };

/** A server checking the headers as SEP-2243 has it: any disagreement is refused with 400 and HeaderMismatch. */
function checkHeaders(expected: Record<string, string>, headers: IncomingHttpHeaders): Reply | null {
  const sent = paramHeadersIn(headers);
  try {
    assert.deepEqual(sent, expected);
    return null;
  } catch {
    const message = `Mcp-Param headers disagree with the body: ${JSON.stringify(sent)}`;
    return { error: { code: HEADER_MISMATCH, message }, status: 400 };
  }
}

test("calls carry the Mcp-Param headers of a tool's x-mcp-header arguments, every round", { timeout: 60_000 }, async () => {
  const states: string[] = [];
  const confirm = confirmTool(states, true);
  const server = await wireServer(
    () => [
      { name: "deploy", inputSchema: DEPLOY_SCHEMA },
      // Marks an array item: an invalid definition (2.x's listTools() drops it), so no headers go with it.
      { name: "batch", inputSchema: { type: "object", properties: { ids: { type: "array", items: BATCH_ITEM } } } },
    ],
    (params, headers) => {
      if (params.name === "batch") return { result: { resultType: "complete", content: [textContent("batched")] } };
      return checkHeaders(DEPLOY_HEADERS, headers) ?? confirm(params);
    },
  );
  const client = await connect(server);
  try {
    const calling = resolveInputRequired(client, "deploy", DEPLOY_ARGS, hub, "rounds");
    const asked = await reviewer.nextRequest("rounds");
    await reviewer.respond(asked.id, "accept", { ok: true });
    assert.equal(text(await calling), "shipped");
    assert.equal(server.calls.length, 2);
    for (const call of server.calls) {
      assert.deepEqual(paramHeadersOf(call), DEPLOY_HEADERS);
      assert.deepEqual(call.params.arguments, DEPLOY_ARGS); // the body keeps every argument
    }

    assert.equal(text(await resolveInputRequired(client, "batch", { ids: ["a"] }, hub, "rounds")), "batched");
    assert.deepEqual(paramHeadersOf(server.calls[2] as Call), {});
    assert.equal(server.listings(), 1); // listed once for the client, not per call
  } finally {
    await client.close();
    await server.close();
  }
});

test("a HeaderMismatch answer lists the tools again and retries with the new schema's headers", { timeout: 60_000 }, async () => {
  let marked = false;
  const region = (): Record<string, unknown> => ({ type: "string", ...(marked ? { "x-mcp-header": "Region" } : {}) });
  const server = await wireServer(
    () => [{ name: "route", inputSchema: { type: "object", properties: { region: region() } } }],
    (_params, headers) =>
      checkHeaders(marked ? { "mcp-param-region": "eu-west1" } : {}, headers) ?? {
        result: { resultType: "complete", content: [textContent("routed")] },
      },
  );
  const client = await connect(server);
  try {
    assert.equal(text(await resolveInputRequired(client, "route", { region: "eu-west1" }, hub, "rounds")), "routed");
    marked = true; // the server's tool now declares the header; the client's listing is stale
    assert.equal(text(await resolveInputRequired(client, "route", { region: "eu-west1" }, hub, "rounds")), "routed");

    assert.deepEqual(server.calls.map(paramHeadersOf), [{}, {}, { "mcp-param-region": "eu-west1" }]);
    assert.equal(server.listings(), 2);
  } finally {
    await client.close();
    await server.close();
  }
});
