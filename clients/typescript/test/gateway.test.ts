/** The MCP gateway with the official TypeScript SDK as the agent (1.x and 2.x `Client` over streamable HTTP): a live
 * ReviewHub fronts the Python upstream (tests/mcp/servers/gateway_upstream.py, official Python SDK, over stdio) at
 * `/mcp/gateway/tools/`, and a scripted reviewer decides the held calls through the reviewer API. */

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from "@modelcontextprotocol/client-v2";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

import { LiveServer, PYTHON, REPO, Reviewer } from "./harness.js";

const QUEUE = "gateway";
const UPSTREAM_SECRET = "upstream-secret-ts-7c2e";

interface ToolResult {
  content?: { type: string; text?: string }[];
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
}

/** The two SDK majors, reduced to what the test needs: connect to a URL with a bearer, call a tool, close. */
interface Agent {
  callTool(name: string, args: Record<string, unknown>): Promise<ToolResult>;
  close(): Promise<void>;
}

const SDKS: { name: string; connect: (url: URL, key: string) => Promise<Agent> }[] = [
  {
    name: "@modelcontextprotocol/sdk 1.x",
    connect: async (url, key) => {
      const client = new ClientV1({ name: "ts-gateway-agent", version: "1.0.0" });
      await client.connect(new TransportV1(url, { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
      return {
        callTool: async (name, args) => (await client.callTool({ name, arguments: args })) as ToolResult,
        close: () => client.close(),
      };
    },
  },
  {
    name: "@modelcontextprotocol/client 2.x",
    connect: async (url, key) => {
      const client = new ClientV2({ name: "ts-gateway-agent", version: "2.0.0" });
      await client.connect(new TransportV2(url, { requestInit: { headers: { Authorization: `Bearer ${key}` } } }));
      return {
        callTool: async (name, args) => (await client.callTool({ name, arguments: args })) as ToolResult,
        close: () => client.close(),
      };
    },
  },
];

let live: LiveServer;
let reviewer: Reviewer;
let dir: string;
let callLog: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "reviewhub-ts-gateway-"));
  callLog = join(dir, "calls.jsonl");
  const upstreamEnv = { UPSTREAM_CALL_LOG: callLog, UPSTREAM_EXPECTED_TOKEN: UPSTREAM_SECRET };
  const upstreams = {
    tools: {
      command: [PYTHON, join(REPO, "tests/mcp/servers/gateway_upstream.py")],
      env: { ...upstreamEnv, UPSTREAM_TOKEN: UPSTREAM_SECRET },
      queue: QUEUE,
      pass: ["read_status"],
    },
  };
  live = await LiveServer.start({ MCP_GATEWAY_UPSTREAMS: JSON.stringify(upstreams) });
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
});

after(async () => {
  await live?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** The tool calls the upstream ran, as its call log recorded them. */
function upstreamCalls(): { tool: string; arguments: Record<string, unknown>; transport: string }[] {
  if (!existsSync(callLog)) return [];
  return readFileSync(callLog, "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line));
}

function text(result: ToolResult): string {
  return (result.content ?? []).map((part) => part.text ?? "").join("");
}

for (const sdk of SDKS) {
  describe(`the gateway, agent on ${sdk.name}`, () => {
    let agent: Agent;
    const tag = sdk.name.includes("1.x") ? "v1" : "v2";

    before(async () => {
      agent = await sdk.connect(new URL(`${live.url}/mcp/gateway/tools/`), live.fixture.agentKey);
    });

    after(async () => {
      await agent?.close();
    });

    test("a call the reviewer approves runs upstream once and its result comes back, naming the approval", async () => {
      const version = `${tag}-approved`;
      const call = agent.callTool("deploy", { version });
      const request = await reviewer.nextRequest(QUEUE);
      assert.equal(request.message, "Allow the tool call 'deploy' on the MCP server 'tools'?");
      const mcp = request.context.mcp as Record<string, unknown>;
      assert.deepEqual([mcp.server, mcp.tool, mcp.arguments, mcp.gateway], ["tools", "deploy", { version }, true]);
      // Held, not forwarded, while the reviewer looks.
      assert.equal(upstreamCalls().filter((c) => c.arguments.version === version).length, 0);
      await reviewer.respond(request.id, "accept", { approve: true });

      const result = await call;
      assert.notEqual(result.isError, true);
      assert.equal(text(result), `deployed ${version} to production`);
      const held = result._meta?.["reviewhub/gateway"] as { requestId: string; digest: string } | undefined;
      assert.equal(held?.requestId, request.id);
      assert.equal(held?.digest, mcp.digest);
      const ran = upstreamCalls().filter((c) => c.arguments.version === version);
      assert.deepEqual(ran, [{ tool: "deploy", arguments: { version, environment: "production" }, transport: "stdio" }]);
    });

    test("a call the reviewer declines is a tool error naming the decline, and the upstream never sees it", async () => {
      const version = `${tag}-declined`;
      const call = agent.callTool("deploy", { version });
      const request = await reviewer.nextRequest(QUEUE);
      assert.equal((request.context.mcp as Record<string, unknown>).tool, "deploy");
      await reviewer.respond(request.id, "decline");

      const result = await call;
      assert.equal(result.isError, true);
      const body = JSON.parse(text(result)) as { code: string; detail: string; requestId: string };
      assert.equal(body.code, "declined");
      assert.equal(body.requestId, request.id);
      assert.match(body.detail, /The call to 'deploy' on 'tools' was not forwarded: the reviewer declined it\./);
      assert.deepEqual(result.structuredContent, body);
      assert.equal(upstreamCalls().filter((c) => c.arguments.version === version).length, 0);
    });

    test("a tool in `pass` goes straight through: no request is opened", async () => {
      const before = upstreamCalls().filter((c) => c.tool === "read_status").length;
      const result = await agent.callTool("read_status", {});
      assert.notEqual(result.isError, true);
      assert.equal(text(result), "all green");
      assert.equal(result._meta?.["reviewhub/gateway"], undefined);
      assert.equal(upstreamCalls().filter((c) => c.tool === "read_status").length, before + 1);
      assert.equal(await reviewer.claimNext(QUEUE), null);
    });
  });
}

test("a key that is not an agent's gets the 401 /mcp/ sends, before any upstream is involved", async () => {
  const response = await fetch(`${live.url}/mcp/gateway/tools/`, {
    method: "POST",
    headers: { Authorization: "Bearer rh_not-a-key", "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(response.status, 401);
  assert.match(response.headers.get("www-authenticate") ?? "", /^Bearer /);
});
