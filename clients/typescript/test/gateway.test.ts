/** The MCP gateway with the official TypeScript SDK as the agent (1.x and 2.x `Client` over streamable HTTP): a live
 * ReviewHub fronts the Python upstream (tests/mcp/servers/gateway_upstream.py, official Python SDK, over stdio) at
 * `/mcp/gateway/tools/` (and at `/mcp/gateway/brief/`, whose held calls expire after a second), and a scripted
 * reviewer decides the held calls through the reviewer API. The server sweeps in process, every second, as the
 * embedded deployment does: that is what expires a held call nobody decided. */

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client as ClientV2, StreamableHTTPClientTransport as TransportV2 } from "@modelcontextprotocol/client-v2";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport as TransportV1 } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ReviewHubClient, type ElicitationRequest } from "reviewhub-client";
import { z } from "zod";

import { LiveServer, PYTHON, REPO, Reviewer, eventually } from "./harness.js";

const QUEUE = "gateway";
const UPSTREAM_SECRET = "upstream-secret-ts-7c2e";
const TASKS_EXTENSION = "io.modelcontextprotocol/tasks";

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
/** The agent's own view of its requests (the gateway opens them in its name): the REST API. */
let hub: ReviewHubClient;
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
    // The same upstream, with a deadline of one second on every held call.
    brief: {
      command: [PYTHON, join(REPO, "tests/mcp/servers/gateway_upstream.py")],
      env: { ...upstreamEnv, UPSTREAM_TOKEN: UPSTREAM_SECRET },
      queue: QUEUE,
      expiresIn: 1,
    },
  };
  live = await LiveServer.start({
    MCP_GATEWAY_UPSTREAMS: JSON.stringify(upstreams),
    PERIODIC_SWEEPS_IN_PROCESS: "true",
    SWEEP_INTERVAL_SECONDS: "1",
  });
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
  hub = new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey, useWebSocket: false });
});

after(async () => {
  await hub?.close();
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

/** The open approval request holding the call with these arguments, as the agent's REST API lists it (a reviewer
 * looking would claim it). */
function heldRequest(version: string): Promise<ElicitationRequest> {
  return eventually(async () => {
    const open = await hub.listRequests("open");
    return open.find((request) => {
      const mcp = request.context.mcp as { arguments?: { version?: unknown } } | undefined;
      return mcp?.arguments?.version === version;
    });
  }, `the approval request for ${version}`);
}

/** The request once it has reached `status` (the REST API's view). */
function requestWhen(id: string, status: string): Promise<ElicitationRequest> {
  return eventually(async () => {
    const request = await hub.get(id);
    return request.status === status ? request : null;
  }, `request ${id} ${status}`);
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

    test("a held call nobody decides expires at its deadline: a tool error saying so", { timeout: 60_000 }, async () => {
      const version = `${tag}-expired`;
      const brief = await sdk.connect(new URL(`${live.url}/mcp/gateway/brief/`), live.fixture.agentKey);
      let result: ToolResult;
      try {
        result = await brief.callTool("deploy", { version });
      } finally {
        await brief.close();
      }

      assert.equal(result.isError, true);
      const body = JSON.parse(text(result)) as { code: string; detail: string; requestId: string };
      assert.equal(body.code, "expired");
      assert.equal(
        body.detail,
        "The call to 'deploy' on 'brief' was not forwarded: nobody decided before the approval request expired.",
      );
      assert.deepEqual(result.structuredContent, body);
      // Closed by the sweep at its deadline, not withdrawn or answered: ReviewHub's record says so.
      const request = await hub.get(body.requestId);
      assert.equal(request.status, "expired");
      assert.deepEqual((request.context.mcp as Record<string, unknown>).arguments, { version });
      assert.ok(Date.parse(request.closedAt ?? "") >= Date.parse(request.deadline ?? ""), JSON.stringify(request));
      assert.equal(upstreamCalls().filter((c) => c.arguments.version === version).length, 0);
    });

    test("a client that disconnects while its call is held withdraws the request", { timeout: 60_000 }, async () => {
      const version = `${tag}-withdrawn`;
      const leaving = await sdk.connect(new URL(`${live.url}/mcp/gateway/tools/`), live.fixture.agentKey);
      const outcome = leaving.callTool("deploy", { version }).then(
        () => "answered",
        () => "rejected",
      );
      const held = await heldRequest(version);
      assert.equal(held.status, "pending");
      await leaving.close(); // the transport aborts the call's open HTTP response

      assert.equal(await outcome, "rejected");
      const withdrawn = await requestWhen(held.id, "withdrawn");
      assert.ok(withdrawn.closedAt);
      const claim = await reviewer.call("POST", `/api/v1/review/requests/${held.id}/claim`);
      assert.equal(claim.status, 409, JSON.stringify(claim.json));
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

/** A `tasks/get` answer (SEP-2663's DetailedTask), as the gateway sends it. */
const DetailedTask = z.looseObject({
  taskId: z.string(),
  status: z.enum(["working", "input_required", "completed", "failed", "cancelled"]),
  statusMessage: z.string().optional(),
  pollIntervalMs: z.number().optional(),
  result: z
    .looseObject({
      content: z.array(z.looseObject({ type: z.string(), text: z.string().optional() })),
      isError: z.boolean().optional(),
      _meta: z.record(z.string(), z.unknown()).optional(),
    })
    .optional(),
});

/** SDK 2.x on a 2026-07-28 session (server/discover, per-request `_meta` envelope) declaring the Tasks extension
 * in its capabilities, and every JSON-RPC result its transport delivers, as sent: the SDK's `Client` has no client
 * half of SEP-2663 (its result codec knows `complete` and `input_required` only), so a task answer to `tools/call`
 * reaches the caller only here. */
async function tasksClient(): Promise<{ client: ClientV2; results: Record<string, unknown>[] }> {
  const client = new ClientV2(
    { name: "ts-gateway-tasks", version: "2.0.0" },
    { capabilities: { extensions: { [TASKS_EXTENSION]: {} } }, versionNegotiation: { mode: "auto" } },
  );
  const transport = new TransportV2(new URL(`${live.url}/mcp/gateway/tools/`), {
    requestInit: { headers: { Authorization: `Bearer ${live.fixture.agentKey}` } },
  });
  await client.connect(transport);
  const results: Record<string, unknown>[] = [];
  const deliver = transport.onmessage;
  transport.onmessage = (message) => {
    if ("result" in message && typeof message.result === "object" && message.result !== null) {
      results.push(message.result as Record<string, unknown>);
    }
    deliver?.(message);
  };
  return { client, results };
}

function getTask(client: ClientV2, taskId: string): Promise<z.infer<typeof DetailedTask>> {
  return client.request({ method: "tasks/get", params: { taskId } }, DetailedTask);
}

describe("Tasks (io.modelcontextprotocol/tasks, 2026-07-28) at the gateway", () => {
  test("on SDK 2.x: a task at once, working until approved, then the upstream's result", { timeout: 60_000 }, async () => {
    const version = "v2-task";
    const { client, results } = await tasksClient();
    try {
      assert.equal(client.getProtocolEra(), "modern");
      assert.ok(TASKS_EXTENSION in (client.getServerCapabilities()?.extensions ?? {}));

      // The gateway answers with the task before anyone decides; the SDK's callTool refuses a result type it lacks.
      const call = client.callTool({ name: "deploy", arguments: { version } });
      await assert.rejects(call, /Unsupported result type 'task'/);
      const created = results.find((result) => result.resultType === "task");
      assert.ok(created, JSON.stringify(results));
      assert.equal(created.status, "working");
      const taskId = String(created.taskId);

      const held = await heldRequest(version);
      assert.ok(taskId.startsWith(`${held.id}.`), taskId); // the approval request's id, signed for this agent
      const working = await getTask(client, taskId);
      assert.deepEqual([working.taskId, working.status, working.result], [taskId, "working", undefined]);
      assert.equal(upstreamCalls().filter((c) => c.arguments.version === version).length, 0);

      const request = await reviewer.nextRequest(QUEUE);
      assert.equal(request.id, held.id);
      await reviewer.respond(request.id, "accept", { approve: true });

      const done = await eventually(async () => {
        const task = await getTask(client, taskId);
        return task.status === "working" ? null : task;
      }, "the task completed");
      assert.equal(done.status, "completed");
      assert.notEqual(done.result?.isError, true);
      assert.deepEqual(done.result?.content, [{ type: "text", text: `deployed ${version} to production` }]);
      assert.deepEqual(done.result?._meta?.["reviewhub/gateway"], {
        requestId: held.id,
        digest: (request.context.mcp as Record<string, unknown>).digest,
      });
      // Every later poll answers the same result; the upstream ran the call once.
      assert.deepEqual((await getTask(client, taskId)).result, done.result);
      const ran = upstreamCalls().filter((c) => c.arguments.version === version);
      assert.deepEqual(ran, [{ tool: "deploy", arguments: { version, environment: "production" }, transport: "stdio" }]);
    } finally {
      await client.close();
    }
  });

  test("on SDK 2.x (2026-07-28) aborting a held call withdraws its request", { timeout: 60_000 }, async () => {
    const version = "v2-aborted";
    // No Tasks here: a plain held call on a modern session, where each request has its own response stream.
    const client = new ClientV2(
      { name: "ts-gateway-agent", version: "2.0.0" },
      { versionNegotiation: { mode: "auto" } },
    );
    await client.connect(
      new TransportV2(new URL(`${live.url}/mcp/gateway/tools/`), {
        requestInit: { headers: { Authorization: `Bearer ${live.fixture.agentKey}` } },
      }),
    );
    try {
      assert.equal(client.getProtocolEra(), "modern");
      const abort = new AbortController();
      const outcome = client.callTool({ name: "deploy", arguments: { version } }, { signal: abort.signal }).then(
        () => "answered",
        () => "rejected",
      );
      const held = await heldRequest(version);
      abort.abort();
      assert.equal(await outcome, "rejected");
      await requestWhen(held.id, "withdrawn");
      assert.equal(await reviewer.claimNext(QUEUE), null); // nothing left for a reviewer to decide
      assert.equal(upstreamCalls().filter((c) => c.arguments.version === version).length, 0);
    } finally {
      await client.close();
    }
  });

  test("on SDK 1.x (2025-11-25 at most) declaring it changes nothing: held in line", { timeout: 60_000 }, async () => {
    // The extension is defined on 2026-07-28's per-request envelope, which 1.x does not speak.
    const version = "v1-task-declared";
    const client = new ClientV1(
      { name: "ts-gateway-agent", version: "1.0.0" },
      { capabilities: { extensions: { [TASKS_EXTENSION]: {} } } },
    );
    await client.connect(
      new TransportV1(new URL(`${live.url}/mcp/gateway/tools/`), {
        requestInit: { headers: { Authorization: `Bearer ${live.fixture.agentKey}` } },
      }),
    );
    try {
      const call = client.callTool({ name: "deploy", arguments: { version } });
      const request = await reviewer.nextRequest(QUEUE);
      assert.deepEqual((request.context.mcp as Record<string, unknown>).arguments, { version });
      await reviewer.respond(request.id, "accept", { approve: true });
      const result = (await call) as ToolResult;
      assert.equal(text(result), `deployed ${version} to production`);
      assert.equal((result._meta?.["reviewhub/gateway"] as { requestId?: string } | undefined)?.requestId, request.id);
    } finally {
      await client.close();
    }
  });
});

test("a key that is not an agent's gets the 401 /mcp/ sends, before any upstream is involved", async () => {
  const response = await fetch(`${live.url}/mcp/gateway/tools/`, {
    method: "POST",
    headers: { Authorization: "Bearer rh_not-a-key", "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "tools/list" }),
  });
  assert.equal(response.status, 401);
  assert.match(response.headers.get("www-authenticate") ?? "", /^Bearer /);
});
