/** An MCP server built with the TypeScript SDK elicits; the handler, installed on a `Client` of SDK 1.x
 * (`@modelcontextprotocol/sdk`) and of 2.x (`@modelcontextprotocol/client`), routes each question to a live
 * ReviewHub, where a scripted reviewer (or a rule) answers; ReviewHub's `_meta` reaches the MCP server. */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { Client as ClientV2 } from "@modelcontextprotocol/client-v2";
import { Client as ClientV1 } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { ReviewHubClient, fetchReceiptKeys } from "reviewhub-client";
import {
  ReviewHubElicitation,
  elicitationCapabilities,
  sdkGeneration,
  type McpClient,
  type McpToolResult,
  type ReviewHubElicitationOptions,
} from "reviewhub-client/mcp";

import { EVERY_KIND, approvalsServer, type ApprovalsServer } from "./fixtures/approvals-server.js";
import { LiveServer, Reviewer, eventually, freePort } from "./harness.js";

let live: LiveServer;
let reviewer: Reviewer;
const cleanups: (() => Promise<void>)[] = [];

before(async () => {
  live = await LiveServer.start();
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
});

after(async () => {
  try {
    await Promise.allSettled(cleanups.map((cleanup) => cleanup()));
  } finally {
    await live.close();
  }
});

const silent = { info: () => undefined, warn: () => undefined };

/** The two SDK generations: how each makes a client and calls a tool without the handler's help. */
const SDKS = [
  {
    name: "SDK 1.x (@modelcontextprotocol/sdk)",
    generation: 1,
    client: (): McpClient => new ClientV1({ name: "agent", version: "1.0.0" }, { capabilities: elicitationCapabilities }),
    plainCallTool: (client: McpClient, params: Record<string, unknown>, signal: AbortSignal) =>
      (client as ClientV1).callTool(params as { name: string }, undefined, { signal }),
  },
  {
    name: "SDK 2.x (@modelcontextprotocol/client)",
    generation: 2,
    client: (): McpClient => new ClientV2({ name: "agent", version: "1.0.0" }, { capabilities: elicitationCapabilities }),
    plainCallTool: (client: McpClient, params: Record<string, unknown>, signal: AbortSignal) =>
      (client as ClientV2).callTool(params as { name: string }, { signal }),
  },
] as const;

type Sdk = (typeof SDKS)[number];

interface Session {
  client: McpClient;
  hub: ReviewHubClient;
  handler: ReviewHubElicitation;
  mcp: ApprovalsServer;
  text: (name: string, args: Record<string, unknown>, signal?: AbortSignal) => Promise<string>;
}

/** An SDK Client of `sdk` with the handler installed, connected in memory to the approvals server (SDK 1.x). */
async function session(sdk: Sdk, options: ReviewHubElicitationOptions, hub?: ReviewHubClient): Promise<Session> {
  const reviewhub = hub ?? new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey });
  const mcp = approvalsServer({ receiptKeys: () => fetchReceiptKeys(live.url) });
  const client = sdk.client();
  assert.equal(sdkGeneration(client), sdk.generation);
  const handler = new ReviewHubElicitation(reviewhub, { logger: silent, ...options }).install(client);
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  await mcp.server.connect(serverSide);
  await (client as ClientV1 | ClientV2).connect(clientSide as never);
  cleanups.push(async () => {
    await (client as ClientV1 | ClientV2).close();
    await mcp.server.close();
    await reviewhub.close();
  });
  const text = async (name: string, args: Record<string, unknown>, signal?: AbortSignal): Promise<string> => {
    const result: McpToolResult = await handler.callTool(client, name, args, {
      ...(signal ? { signal } : {}),
      timeout: 60_000,
    });
    const [first] = result.content;
    assert.equal(first?.type, "text");
    return String(first?.text);
  };
  return { client, hub: reviewhub, handler, mcp, text };
}

for (const sdk of SDKS) {
  describe(sdk.name, () => {
    describe("form mode", { timeout: 60_000 }, () => {
      test("an accepted form with every field kind reaches the tool, validated by the server", async () => {
        const { text } = await session(sdk, { queue: "forms" });
        const calling = text("configure", { service: "billing" });
        const asked = await reviewer.nextRequest("forms");

        assert.equal(asked.message, "Configure billing");
        assert.equal(asked.mode, "form");
        assert.deepEqual(asked.requestedSchema, EVERY_KIND);
        assert.deepEqual(
          asked.questions.map((question) => [question.id, question.kind]),
          [
            ["name", "text"],
            ["contact", "text"],
            ["dashboard", "text"],
            ["launch", "text"],
            ["replicas", "integer"],
            ["budget", "number"],
            ["public", "boolean"],
            ["size", "single-select"],
            ["region", "single-select"],
            ["features", "multi-select"],
            ["alerts", "multi-select"],
          ],
        );
        const mcp = asked.context.mcp as Record<string, unknown>;
        assert.equal(mcp.server, "deploy-approvals");
        assert.equal(mcp.tool, "configure");
        assert.deepEqual(mcp.arguments, { service: "billing" });
        assert.equal(typeof mcp.requestId, "number");

        const content = {
          name: "billing",
          contact: "oncall@example.com",
          dashboard: "https://grafana.example.com/d/billing",
          launch: "2026-09-01",
          replicas: 3,
          budget: 1250.5,
          public: false,
          size: "medium",
          region: "eu-west",
          features: ["logs", "traces"],
          alerts: ["pager"],
        };
        await reviewer.respond(asked.id, "accept", content);
        const { _meta, ...answer } = JSON.parse(await calling) as { _meta?: Record<string, unknown> };
        assert.deepEqual(answer, { action: "accept", content });
        // ReviewHub's `_meta` reached the MCP server: the signed receipt of this answer.
        assert.match(String(_meta?.["reviewhub/receipt"]), /^[\w-]+\.[\w-]+\.[\w-]+$/);
      });

      test("a declined form comes back as decline, without content", async () => {
        const { text } = await session(sdk, { queue: "forms" });
        const calling = text("approve", { version: "1.4" });
        await reviewer.respond((await reviewer.nextRequest("forms")).id, "decline");
        assert.equal(await calling, "deploy 1.4: decline");
      });

      test("a reviewer's cancel comes back as cancel", async () => {
        const { text } = await session(sdk, { queue: "forms" });
        const calling = text("approve", { version: "1.5" });
        await reviewer.respond((await reviewer.nextRequest("forms")).id, "cancel");
        assert.equal(await calling, "deploy 1.5: cancel");
      });

      test("an accepted yes/no reaches the tool", async () => {
        const { text } = await session(sdk, { queue: "forms", serverName: "deploys", context: { team: "payments" } });
        const calling = text("approve", { version: "1.6" });
        const asked = await reviewer.nextRequest("forms");
        assert.equal((asked.context.mcp as Record<string, unknown>).server, "deploys");
        assert.equal(asked.context.team, "payments");
        await reviewer.respond(asked.id, "accept", { approve: true, note: "go" });
        assert.equal(await calling, "deploy 1.6: approved");
      });
    });

    describe("approvals the MCP server verifies", { timeout: 60_000 }, () => {
      test("a rule's decision and receipt reach the server, which recomputes the digest and verifies", async () => {
        const { text } = await session(sdk, { queue: "ruled" });
        const verdict = await text("transfer", { amount: 80, to: "Zoë", memo: "Miete 🏠 für März" });
        assert.equal(verdict, "accept; verified accept by small transfers; decision: its digest matches");
      });

      test("a reviewer's answer reaches the server with a receipt naming the reviewer", async () => {
        const { text } = await session(sdk, { queue: "ruled" });
        const calling = text("transfer", { amount: 5000, to: "Zoë", memo: "Kaution" }); // over the rule's limit
        const asked = await reviewer.nextRequest("ruled");
        assert.equal(asked.message, "Überweisung 5000 € an Zoë");
        await reviewer.respond(asked.id, "decline");
        assert.equal(await calling, "decline; verified decline by ts-reviewer; decision: none");
      });
    });

    describe("URL mode", { timeout: 60_000 }, () => {
      test("a URL elicitation is posted with its URL and id, completion is forwarded, accept comes back", async () => {
        const { text, mcp } = await session(sdk, { queue: "urls" });
        const calling = text("link_account", { provider: "acme" });
        const asked = await reviewer.nextRequest("urls");
        assert.equal(asked.mode, "url");
        assert.equal(asked.url, "https://billing.example.com/connect/acme");
        assert.equal(asked.elicitationId, "link-acme");
        assert.equal(asked.requestedSchema, null);

        await mcp.completeLink("link-acme"); // forwarded to POST /api/v1/requests/url-complete
        await reviewer.respond(asked.id, "accept");
        assert.equal(await calling, "link acme: accept");
      });
    });

    describe("no human answer", { timeout: 60_000 }, () => {
      test("cancelling the tool call withdraws the ReviewHub request", async () => {
        const { text, hub } = await session(sdk, { queue: "cancel" });
        const controller = new AbortController();
        const calling = assert.rejects(text("approve", { version: "2.0" }, controller.signal));
        const pending = await eventually(async () => (await reviewer.pending("cancel"))[0], "the question is queued");

        controller.abort();
        await calling;
        await eventually(async () => (await hub.get(pending.id)).status === "withdrawn", "the request is withdrawn");
        assert.deepEqual(await reviewer.pending("cancel"), []);
      });

      test("a tool call cancelled through the plain SDK withdraws the request too (the server cancels its question)", async () => {
        const { client, hub, text } = await session(sdk, { queue: "cancel" });
        // The SDK (1.x) ignores a cancellation of request id 0 (`if (!requestId) return`), and a server's first
        // request has id 0: let one question go by first, as in any session that has already asked something.
        const first = text("approve", { version: "1.9" });
        await reviewer.respond((await reviewer.nextRequest("cancel")).id, "accept", { approve: true });
        assert.equal(await first, "deploy 1.9: approved");

        const controller = new AbortController();
        const calling = assert.rejects(
          sdk.plainCallTool(client, { name: "approve", arguments: { version: "2.0.1" } }, controller.signal),
        );
        const pending = await eventually(async () => (await reviewer.pending("cancel"))[0], "the question is queued");

        controller.abort();
        await calling;
        await eventually(async () => (await hub.get(pending.id)).status === "withdrawn", "the request is withdrawn");
      });

      test("a wait that times out answers cancel and withdraws the request", async () => {
        const { text, hub } = await session(sdk, { queue: "misc", timeoutMs: 500 });
        assert.equal(await text("approve", { version: "2.1" }), "deploy 2.1: cancel");
        const [latest] = await hub.listRequests("all");
        assert.equal(latest?.message, "Deploy 2.1 to production?");
        assert.equal(latest?.status, "withdrawn");
      });

      test("an unreachable ReviewHub answers cancel instead of failing the session", async () => {
        const down = new ReviewHubClient({ baseUrl: `http://127.0.0.1:${await freePort()}`, apiKey: "rh_x", maxRetries: 0 });
        const { text } = await session(sdk, { queue: "misc" }, down);
        assert.equal(await text("approve", { version: "2.2" }), "deploy 2.2: cancel");
      });

      test("a queue the agent may not use answers cancel", async () => {
        const { text } = await session(sdk, { queue: "no-such-queue" });
        assert.equal(await text("approve", { version: "2.3" }), "deploy 2.3: cancel");
      });
    });
  });
}
