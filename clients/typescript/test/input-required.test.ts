/** 2026-07-28 input-required rounds answered by ReviewHub reviewers: a server speaking the shape, an SDK Client,
 * a live ReviewHub, and agent processes that die and come back. */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { InMemoryTransport } from "@modelcontextprotocol/sdk/inMemory.js";
import { ReviewHubClient } from "reviewhub-client";
import {
  InputRoundsExceeded,
  completeResult,
  recognizeInputRequired,
  resolveInputRequired,
} from "reviewhub-client/mcp";

import { serveRounds, type RecordedCall } from "./fixtures/rounds-server.js";
import { CLIENT_DIR, LiveServer, Reviewer, delay, eventually } from "./harness.js";

const ELICIT = {
  method: "elicitation/create",
  params: { mode: "form", message: "?", requestedSchema: { type: "object", properties: {} } },
};

let live: LiveServer;
let reviewer: Reviewer;
let dir: string;

before(async () => {
  live = await LiveServer.start();
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
  dir = await mkdtemp(join(tmpdir(), "reviewhub-ts-rounds-"));
});

after(async () => {
  await live.close();
  await rm(dir, { recursive: true, force: true });
});

function text(result: { content: unknown[] }): string {
  return (result.content[0] as { text: string }).text;
}

/** An SDK Client connected in memory to a rounds server, and a ReviewHub client; `calls` is the server's record. */
async function connect(): Promise<{ client: Client; hub: ReviewHubClient; calls: RecordedCall[]; close: () => Promise<void> }> {
  const [clientSide, serverSide] = InMemoryTransport.createLinkedPair();
  const calls = await serveRounds(serverSide);
  const client = new Client({ name: "agent", version: "1.0.0" });
  await client.connect(clientSide);
  const hub = new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey });
  return {
    client,
    hub,
    calls,
    close: async () => {
      await hub.close();
      await client.close();
    },
  };
}

describe("recognition follows the final spec", () => {
  test("only a tagged result with requests or state is a round", () => {
    assert.deepEqual(recognizeInputRequired({ resultType: "input_required", inputRequests: { k: ELICIT } }), {
      inputRequests: { k: ELICIT },
      requestState: null,
    });
    assert.deepEqual(recognizeInputRequired({ resultType: "input_required", requestState: "s1" }), {
      inputRequests: {},
      requestState: "s1",
    });
  });

  for (const [what, wire] of [
    ["no resultType: complete", { content: [], inputRequests: { k: ELICIT }, requestState: "s" }],
    ["resultType complete", { resultType: "complete", content: [], inputRequests: { k: ELICIT } }],
    ["half-shaped", { resultType: "input_required", inputRequests: {} }],
    ["half-shaped, empty state", { resultType: "input_required", inputRequests: {}, requestState: "" }],
    ["requests not a map", { resultType: "input_required", inputRequests: ["not", "a", "map"] }],
  ] as const) {
    test(`anything else is a normal result (${what})`, () => {
      assert.equal(recognizeInputRequired(wire as Record<string, unknown>), null);
      assert.deepEqual(completeResult(wire as Record<string, unknown>).content, []);
    });
  }
});

describe("rounds, end to end", { timeout: 60_000 }, () => {
  test("a round is posted with its state and retried with keyed answers and the echoed state", async () => {
    const { client, hub, calls, close } = await connect();
    try {
      const calling = resolveInputRequired(client, "deploy", { version: "7.0" }, hub, "rounds");
      const asked = await reviewer.nextRequest("rounds");
      await reviewer.respond(asked.id, "accept", { approve: true, note: "ship it" });
      assert.equal(text(await calling), "deploy 7.0: approved (ship it)");

      const mcp = asked.context.mcp as Record<string, unknown>;
      assert.deepEqual(
        Object.fromEntries(["server", "method", "params", "inputKey", "inputKeys", "round"].map((key) => [key, mcp[key]])),
        {
          server: "rounds",
          method: "tools/call",
          params: { name: "deploy", arguments: { version: "7.0" } },
          inputKey: "approval",
          inputKeys: ["approval"],
          round: 1,
        },
      );
      assert.equal((mcp.inputRequests as Record<string, { method: string }>).approval?.method, "elicitation/create");
      const [first, retry] = calls;
      assert.ok(first && retry && calls.length === 2);
      assert.deepEqual([first.requestState, first.inputResponses], [null, []]);
      assert.equal(retry.requestState, mcp.requestState); // echoed byte for byte
      assert.deepEqual(retry.inputResponses, ["approval"]);
      assert.deepEqual(retry.arguments, first.arguments);
      assert.notEqual(retry.id, first.id);
    } finally {
      await close();
    }
  });

  test("every input of a round becomes one request of that round", async () => {
    const { client, hub, close } = await connect();
    try {
      const calling = resolveInputRequired(client, "release", { version: "3.1" }, hub, "rounds");
      const answers: Record<string, Record<string, unknown>> = {
        "When may 3.1 go out?": { start: "07:00" },
        "Deploy 3.1 to production?": { approve: false },
      };
      const seen = [];
      for (let n = 0; n < 2; n++) {
        const asked = await reviewer.nextRequest("rounds");
        seen.push(asked.context.mcp as Record<string, unknown>);
        await reviewer.respond(asked.id, "accept", answers[asked.message]);
      }
      assert.equal(text(await calling), "release 3.1 at 07:00: rejected (no note)");
      assert.equal(seen[0]?.roundId, seen[1]?.roundId);
      assert.deepEqual(seen.map((mcp) => mcp.inputKey).sort(), ["approval", "window"]);
    } finally {
      await close();
    }
  });

  test("a server that never stops asking is cut off after maxRounds", async () => {
    const { client, hub, close } = await connect();
    try {
      const before = (await hub.listRequests("all")).length;
      const calling = assert.rejects(
        resolveInputRequired(client, "endless", {}, hub, "rounds", { maxRounds: 2 }),
        (error: unknown) => {
          assert.ok(error instanceof InputRoundsExceeded);
          assert.match(error.message, /'endless'.*after 2 rounds/);
          return true;
        },
      );
      const messages = [];
      for (let n = 0; n < 2; n++) {
        const asked = await reviewer.nextRequest("rounds");
        messages.push(asked.message);
        await reviewer.respond(asked.id, "accept", { ok: true });
      }
      await calling;
      assert.deepEqual(messages, ["Round 1: one more thing?", "Round 2: one more thing?"]);
      assert.equal((await hub.listRequests("all")).length - before, 2); // the third question was never posted
    } finally {
      await close();
    }
  });

  test("the default cap is 5 rounds", async () => {
    const { client, hub, close } = await connect();
    const answering = reviewer.answerAll("rounds");
    try {
      await assert.rejects(resolveInputRequired(client, "endless", {}, hub, "rounds"), /after 5 rounds/);
      assert.equal(answering.seen.length, 5);
    } finally {
      await answering.stop();
      await close();
    }
  });

  test("a state-only round is retried with the state and asks nobody", async () => {
    const { client, hub, calls, close } = await connect();
    try {
      const before = (await hub.listRequests("all")).length;
      assert.equal(text(await resolveInputRequired(client, "warm_up", {}, hub, "rounds")), "warm after warming");
      assert.deepEqual(
        calls.map((call) => [call.requestState, call.inputResponses]),
        [
          [null, []],
          ["warming", []],
        ],
      );
      assert.equal((await hub.listRequests("all")).length, before);
    } finally {
      await close();
    }
  });

  test("a half-shaped result is the final result and is not retried", async () => {
    const { client, hub, calls, close } = await connect();
    try {
      assert.equal(text(await resolveInputRequired(client, "half", {}, hub, "rounds")), "half-shaped, but final");
      assert.equal(calls.length, 1);
    } finally {
      await close();
    }
  });
});

// --- a restarted agent process ----------------------------------------------------------------------------------

interface Agent {
  lines: Record<string, unknown>[];
  exited: Promise<number | null>;
  kill: () => void;
}

function agentProcess(args: string[], files: { calls: string; store?: string }): Agent {
  const child = spawn(process.execPath, [join(CLIENT_DIR, "dist-test/fixtures/round-agent.js"), ...args], {
    cwd: CLIENT_DIR,
    env: {
      ...process.env,
      REVIEWHUB_URL: live.url,
      REVIEWHUB_AGENT_KEY: live.fixture.agentKey,
      RH_QUEUE: "rounds",
      RH_CALLS: files.calls,
      ...(files.store ? { RH_ROUND_STORE: files.store } : {}),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const lines: Record<string, unknown>[] = [];
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => {
    for (const line of chunk.toString().split("\n")) if (line.trim()) lines.push(JSON.parse(line) as Record<string, unknown>);
  });
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const timer = setTimeout(() => child.kill("SIGKILL"), 45_000);
  const exited = new Promise<number | null>((resolve) =>
    child.on("exit", (code) => {
      clearTimeout(timer);
      if (code) console.error(stderr);
      resolve(code);
    }),
  );
  return { lines, exited, kill: () => child.kill("SIGKILL") };
}

async function recorded(path: string): Promise<RecordedCall[]> {
  return (await readFile(path, "utf8"))
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as RecordedCall);
}

describe("an agent restarted mid-round", { timeout: 90_000 }, () => {
  test("a round answered while no agent ran is finished by a new process from its store", async () => {
    const files = { calls: join(dir, "calls-1.jsonl"), store: join(dir, "rounds-1.json") };
    const first = agentProcess(["start", "8.0"], files);
    const asked = await reviewer.nextRequest("rounds");
    await eventually(async () => existsSync(files.store) && (await readFile(files.store, "utf8")).includes(asked.id), "the round is stored");
    first.kill();
    await first.exited;
    await reviewer.respond(asked.id, "accept", { approve: true, note: "after the crash" });

    const second = agentProcess(["resume"], files);
    assert.equal(await second.exited, 0);
    const roundId = (asked.context.mcp as Record<string, unknown>).roundId;
    assert.deepEqual(second.lines, [{ pending: [roundId] }, { text: "deploy 8.0: approved (after the crash)" }]);

    const calls = await recorded(files.calls);
    assert.equal(calls.length, 2);
    assert.equal(calls[1]?.requestState, (asked.context.mcp as Record<string, unknown>).requestState);
    assert.deepEqual(calls[1]?.inputResponses, ["approval"]);
    assert.deepEqual(JSON.parse(await readFile(files.store, "utf8")), {}); // finished rounds are forgotten
  });

  test("a round still open is found in ReviewHub by a new process without a store, and not posted twice", async () => {
    const files = { calls: join(dir, "calls-2.jsonl") };
    const hub = new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey, useWebSocket: false });
    const first = agentProcess(["start", "9.0"], files);
    const pending = await eventually(async () => (await reviewer.pending("rounds"))[0], "the question is queued");
    await delay(200); // the agent is waiting on it now
    first.kill();
    await first.exited;
    assert.equal((await hub.get(pending.id)).status, "pending"); // a stopping agent leaves its round open

    const second = agentProcess(["resume"], files);
    await eventually(() => second.lines.length > 0, "the new process finds the round");
    await reviewer.answer(pending.id, "decline");
    assert.equal(await second.exited, 0);
    assert.deepEqual(second.lines.at(-1), { text: "deploy 9.0: decline" });
    const posted = (await hub.listRequests("all")).filter((row) => row.message === "Deploy 9.0 to production?");
    assert.equal(posted.length, 1);
  });
});
