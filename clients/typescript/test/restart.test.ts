/** The server restarted mid-wait: waits long-poll while it is down, the socket comes back, resumes from its last
 * cursor, and every event arrives exactly once. */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { ReviewHubClient, type AgentEvent, type RequestedSchema } from "reviewhub-client";

import { LiveServer, Reviewer, answerOf, eventually } from "./harness.js";

const SCHEMA: RequestedSchema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"] };

let server: LiveServer;

before(async () => {
  server = await LiveServer.start();
});

after(async () => {
  await server.close();
});

test("a wait survives a server restart: resumed, no event lost or repeated", { timeout: 90_000 }, async () => {
  const hub = new ReviewHubClient({ baseUrl: server.url, apiKey: server.fixture.agentKey, longPollSeconds: 2 });
  const reviewer = new Reviewer(server.url, server.fixture.reviewerToken);
  try {
    const seen: AgentEvent[] = [];
    hub.onEvent((event) => seen.push(event));
    const requests = await Promise.all(
      ["before", "while away", "after"].map((when) =>
        hub.create({ message: `Answered ${when} the restart`, requestedSchema: SCHEMA, queue: "restart" }),
      ),
    );
    const [early, away, late] = requests.map((request) => request.id) as [string, string, string];
    const waits = Promise.all(requests.map((request) => hub.wait(request.id, { timeoutMs: 60_000 })));
    await eventually(() => hub.socketConnected, "the socket connects");
    await reviewer.answer(early, "accept", { ok: true });
    await eventually(() => seen.length === 1, "the first answer arrives on the socket");

    await server.restart(); // killed: no close frame, no goodbye
    await eventually(() => !hub.socketConnected, "the client notices the socket is gone");
    // Answered before the socket is back: only the resume (or a long-poll) can bring this one.
    await reviewer.answer(away, "decline");
    await eventually(() => hub.socketConnected, "the socket reconnects", 30_000);
    await reviewer.answer(late, "accept", { ok: false });

    assert.deepEqual((await waits).map(answerOf), [
      { action: "accept", content: { ok: true } },
      { action: "decline" },
      { action: "accept", content: { ok: false } },
    ]);
    await eventually(() => seen.length >= 3, "all three events arrive on the socket");
    const feed = await hub.events(0);
    const expected = feed.events.filter((event) => [early, away, late].includes(event.id));
    assert.deepEqual(
      seen.map((event) => [event.id, event.cursor]),
      expected.map((event) => [event.id, event.cursor]),
    );
    assert.equal(new Set(seen.map((event) => event.cursor)).size, seen.length);
  } finally {
    await hub.close();
  }
});
