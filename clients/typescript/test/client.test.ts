/** The agent client against a live ReviewHub: REST calls, error types, and waits over the socket or long-poll. */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  AuthenticationError,
  ConflictError,
  NotFoundError,
  RequestWithdrawn,
  ReviewHubClient,
  ValidationError,
  WaitTimeout,
  type AgentEvent,
  type RequestedSchema,
} from "reviewhub-client";

import { LiveServer, Reviewer, answerOf, delay, eventually, freePort } from "./harness.js";

const SCHEMA: RequestedSchema = {
  type: "object",
  properties: { approve: { type: "boolean", title: "Approve" }, note: { type: "string", maxLength: 200 } },
  required: ["approve"],
};

let server: LiveServer;
let reviewer: Reviewer;
const clients: ReviewHubClient[] = [];

function client(options: ConstructorParameters<typeof ReviewHubClient>[0] = {}): ReviewHubClient {
  const hub = new ReviewHubClient({ baseUrl: server.url, apiKey: server.fixture.agentKey, ...options });
  clients.push(hub);
  return hub;
}

before(async () => {
  server = await LiveServer.start();
  reviewer = new Reviewer(server.url, server.fixture.reviewerToken);
});

after(async () => {
  try {
    await Promise.allSettled(clients.map((hub) => hub.close()));
  } finally {
    await server.close();
  }
});

describe("waiting", { timeout: 60_000 }, () => {
  test("wait returns the reviewer's answer pushed over the socket", async () => {
    const hub = client();
    const seen: AgentEvent[] = [];
    hub.onEvent((event) => seen.push(event));
    const request = await hub.create({ message: "Deploy 1.4.2?", requestedSchema: SCHEMA, queue: "socket" });
    assert.equal(request.status, "pending");

    const waiting = hub.wait(request.id, { timeoutMs: 30_000 });
    await eventually(() => hub.socketConnected, "the socket connects");
    await reviewer.answer(request.id, "accept", { approve: true, note: "ok" });

    const result = await waiting;
    assert.deepEqual(answerOf(result), { action: "accept", content: { approve: true, note: "ok" } });
    assert.match(String(result._meta?.["reviewhub/receipt"]), /^[\w-]+\.[\w-]+\.[\w-]+$/); // _meta kept
    assert.equal(hub.socketConnected, true); // answered while listening on the socket, not long-polling
    await eventually(() => seen.some((event) => event.id === request.id), "the event is seen on the socket");
    assert.deepEqual(
      seen.filter((event) => event.id === request.id).map((event) => [event.type, event.status]),
      [["completed", "completed"]],
    );
  });

  test("a wait on an already answered request returns at once from the subscription", async () => {
    const hub = client();
    const request = await hub.create({ message: "Already done?", requestedSchema: SCHEMA, queue: "socket" });
    await reviewer.answer(request.id, "decline");
    assert.deepEqual(answerOf(await hub.wait(request.id, { timeoutMs: 20_000 })), { action: "decline" });
  });

  test("with the socket refused, wait falls back to long-polling and still gets the answer", async () => {
    const closedPort = await freePort();
    const hub = client({ wsUrl: `ws://127.0.0.1:${closedPort}/ws/agent/`, longPollSeconds: 2 });
    const request = await hub.create({ message: "Fallback?", requestedSchema: SCHEMA, queue: "fallback" });

    const waiting = hub.wait(request.id, { timeoutMs: 30_000 });
    await delay(300); // the socket has failed at least once and the wait is long-polling
    await reviewer.answer(request.id, "accept", { approve: false });

    assert.deepEqual(answerOf(await waiting), { action: "accept", content: { approve: false } });
    assert.equal(hub.socketConnected, false);
  });

  test("without a socket at all, waits long-poll", async () => {
    const hub = client({ useWebSocket: false });
    const request = await hub.create({ message: "Poll only?", requestedSchema: SCHEMA, queue: "fallback" });
    const waiting = hub.wait(request.id, { timeoutMs: 30_000 });
    await reviewer.answer(request.id, "cancel");
    assert.deepEqual(answerOf(await waiting), { action: "cancel" });
  });

  test("many concurrent waits share one socket and each gets its own answer", async () => {
    const hub = client();
    const requests = await Promise.all(
      [0, 1, 2, 3, 4].map((n) => hub.create({ message: `Item ${n}?`, requestedSchema: SCHEMA, queue: "socket" })),
    );
    const waits = requests.map((request) => hub.wait(request.id, { timeoutMs: 30_000 }));
    await eventually(() => hub.socketConnected, "the socket connects");
    for (const [n, request] of requests.entries()) await reviewer.answer(request.id, "accept", { approve: n % 2 === 0 });
    const results = await Promise.all(waits);
    assert.deepEqual(
      results.map((result) => result.content?.approve),
      [true, false, true, false, true],
    );
  });

  test("two clients of one agent connecting in the same second both get their sockets", async () => {
    const [first, second] = [client(), client()];
    const [a, b] = await Promise.all(
      [first, second].map((hub) => hub.create({ message: "Twin?", requestedSchema: SCHEMA, queue: "socket" })),
    );
    const waits = [first.wait(a!.id, { timeoutMs: 30_000 }), second.wait(b!.id, { timeoutMs: 30_000 })];
    await eventually(() => first.socketConnected && second.socketConnected, "both sockets connect");
    await reviewer.answer(a!.id, "accept", { approve: true });
    await reviewer.answer(b!.id, "decline");
    assert.deepEqual((await Promise.all(waits)).map(answerOf), [{ action: "accept", content: { approve: true } }, { action: "decline" }]);
  });

  test("a wait times out with WaitTimeout and leaves the request open", async () => {
    const hub = client();
    const request = await hub.create({ message: "Nobody answers", requestedSchema: SCHEMA, queue: "misc" });
    await assert.rejects(hub.wait(request.id, { timeoutMs: 300 }), (error: unknown) => {
      assert.ok(error instanceof WaitTimeout);
      assert.equal(error.requestId, request.id);
      return true;
    });
    assert.equal((await hub.get(request.id)).status, "pending");
    await hub.cancel(request.id);
  });

  test("elicit withdraws its request when the wait times out", async () => {
    const hub = client();
    await assert.rejects(
      hub.elicit({ message: "Too slow", requestedSchema: SCHEMA, queue: "misc", timeoutMs: 300 }),
      WaitTimeout,
    );
    const [latest] = await hub.listRequests("all");
    assert.equal(latest?.message, "Too slow");
    assert.equal(latest?.status, "withdrawn");
  });

  test("an aborted wait rejects with the signal's reason", async () => {
    const hub = client();
    const request = await hub.create({ message: "Abort me", requestedSchema: SCHEMA, queue: "misc" });
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("turn ended")), 200);
    await assert.rejects(hub.wait(request.id, { signal: controller.signal }), /turn ended/);
    await hub.cancel(request.id);
  });

  test("waiting on a withdrawn request raises RequestWithdrawn", async () => {
    const hub = client();
    const request = await hub.create({ message: "Withdraw me", requestedSchema: SCHEMA, queue: "misc" });
    const waiting = assert.rejects(hub.wait(request.id, { timeoutMs: 20_000 }), RequestWithdrawn);
    const cancelled = await hub.cancel(request.id);
    assert.equal(cancelled.status, "withdrawn");
    await waiting;
  });

  test("waiting with a refused key raises AuthenticationError, socket or not", async () => {
    for (const useWebSocket of [true, false]) {
      const hub = client({ apiKey: "rh_00000000_wrong", useWebSocket });
      await assert.rejects(hub.wait(crypto.randomUUID(), { timeoutMs: 20_000 }), AuthenticationError);
    }
  });

  test("waiting on an unknown id raises NotFoundError", async () => {
    const hub = client();
    await assert.rejects(hub.wait(crypto.randomUUID(), { timeoutMs: 20_000 }), NotFoundError);
    const polling = client({ useWebSocket: false });
    await assert.rejects(polling.wait(crypto.randomUUID(), { timeoutMs: 20_000 }), NotFoundError);
  });
});

describe("the REST API", { timeout: 60_000 }, () => {
  test("a create retried with the same Idempotency-Key returns the same request", async () => {
    const hub = client();
    const key = `deploy-${crypto.randomUUID()}`;
    const first = await hub.create({ message: "Once?", requestedSchema: SCHEMA, queue: "misc", idempotencyKey: key });
    const again = await hub.create({ message: "Once?", requestedSchema: SCHEMA, queue: "misc", idempotencyKey: key });
    assert.equal(again.id, first.id);
    await assert.rejects(
      hub.create({ message: "Other body", requestedSchema: SCHEMA, queue: "misc", idempotencyKey: key }),
      ConflictError,
    );
    await hub.cancel(first.id);
  });

  test("a request carries its fields back in the API's shape", async () => {
    const hub = client();
    const created = await hub.create({
      message: "Shape?",
      requestedSchema: SCHEMA,
      queue: "misc",
      priority: 7,
      expiresIn: 600,
      context: { tool: "deploy", arguments: { version: "1.4" } },
    });
    const fetched = await hub.get(created.id);
    assert.equal(fetched.id, created.id);
    assert.equal(fetched.mode, "form");
    assert.equal(fetched.priority, 7);
    assert.deepEqual(fetched.context, { tool: "deploy", arguments: { version: "1.4" } });
    assert.deepEqual(fetched.requestedSchema, SCHEMA);
    assert.ok(fetched.deadline);
    assert.equal(fetched.result, null);
    assert.ok((await hub.listRequests("open")).some((row) => row.id === created.id));
    await hub.cancel(created.id);
    assert.ok((await hub.listRequests("closed")).some((row) => row.id === created.id));
  });

  test("an invalid schema is a ValidationError naming the field", async () => {
    const hub = client();
    const bad = { type: "object", properties: { age: { type: "integer", minimum: "ten" } } } as RequestedSchema;
    await assert.rejects(hub.create({ message: "Bad", requestedSchema: bad, queue: "misc" }), (error: unknown) => {
      assert.ok(error instanceof ValidationError);
      assert.equal(error.status, 400);
      assert.ok(Object.keys(error.fields).some((field) => field.startsWith("requestedSchema")), JSON.stringify(error.fields));
      return true;
    });
  });

  test("a wrong key is an AuthenticationError, and no key at all is refused up front", async () => {
    const hub = client({ apiKey: "rh_00000000_wrong" });
    await assert.rejects(hub.listRequests(), (error: unknown) => error instanceof AuthenticationError && error.status === 401);
    assert.throws(() => new ReviewHubClient({ baseUrl: server.url, apiKey: "" }), AuthenticationError);
  });

  test("another agent's request is a NotFoundError, as if it did not exist", async () => {
    const mine = await client().create({ message: "Mine", requestedSchema: SCHEMA, queue: "misc" });
    const other = client({ apiKey: server.fixture.otherAgentKey });
    await assert.rejects(other.get(mine.id), (error: unknown) => error instanceof NotFoundError && error.status === 404);
    await assert.rejects(other.cancel(mine.id), NotFoundError);
    await client().cancel(mine.id);
  });

  test("cancelling an answered request is a ConflictError; cancelling twice is harmless", async () => {
    const hub = client();
    const answered = await hub.create({ message: "Answered", requestedSchema: SCHEMA, queue: "misc" });
    await reviewer.answer(answered.id, "decline");
    await assert.rejects(hub.cancel(answered.id), (error: unknown) => error instanceof ConflictError && error.status === 409);

    const open = await hub.create({ message: "Open", requestedSchema: SCHEMA, queue: "misc" });
    await hub.cancel(open.id);
    assert.equal((await hub.cancel(open.id)).status, "withdrawn");
  });

  test("the event feed lists closing events after a cursor, and long-polls", async () => {
    const hub = client();
    const start = (await hub.events(0)).cursor;
    const request = await hub.create({ message: "Feed", requestedSchema: SCHEMA, queue: "misc" });
    const polling = hub.events(start, { wait: 10 });
    await delay(200);
    await reviewer.answer(request.id, "accept", { approve: true });
    const page = await polling;
    const event = page.events.find((item) => item.id === request.id);
    assert.ok(event, JSON.stringify(page));
    assert.equal(event.type, "completed");
    assert.equal(event.cursor, page.cursor);
    assert.deepEqual(answerOf(event.result), { action: "accept", content: { approve: true } });
    assert.equal(typeof event.result?._meta?.["reviewhub/receipt"], "string"); // the feed keeps _meta too
    assert.deepEqual((await hub.events(page.cursor)).events, []);
  });

  test("a URL request is answered without content, and its completion is reported by either id", async () => {
    const hub = client();
    const elicitationId = `link-${crypto.randomUUID()}`;
    const request = await hub.create({
      message: "Sign in to link the account",
      url: "https://billing.example.com/connect",
      elicitationId,
      queue: "urls",
    });
    assert.equal(request.mode, "url");
    assert.equal(request.elicitationId, elicitationId);
    await hub.completeUrl({ elicitationId });
    await hub.completeUrl({ requestId: request.id });
    await hub.completeUrl({ elicitationId: "nobody-knows-this-one" }); // unknown ids are ignored, as MCP requires
    await reviewer.answer(request.id, "accept");
    assert.deepEqual(answerOf(await hub.wait(request.id, { timeoutMs: 20_000 })), { action: "accept" });
  });

  test("an unreachable server is a ReviewHubError without a status, after the retries", async () => {
    const hub = client({ baseUrl: `http://127.0.0.1:${await freePort()}`, maxRetries: 1 });
    await assert.rejects(hub.get(crypto.randomUUID()), (error: unknown) => {
      assert.ok(error instanceof Error && error.name === "ReviewHubError");
      assert.equal((error as unknown as { status: unknown }).status, null);
      return true;
    });
  });
});
