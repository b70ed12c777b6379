/** When the server drops its sockets (a restart, a crash, "too slow, resume"), the clients it held do not all come
 * back in the same instant: each first reconnect waits a uniform random time over the spread window, the close is
 * never an error for the waits, and the feed resumes from the last cursor. The server here is a stand-in (an
 * injected WebSocket class and fetch), so the test decides when and how every socket closes; the real server's
 * restart is restart.test.ts. */

import assert from "node:assert/strict";
import { test } from "node:test";

import {
  CLOSE_RESUME,
  CLOSE_TRY_AGAIN_LATER,
  ReviewHubClient,
  spreadDelay,
  spreadWindow,
  type WebSocketLike,
} from "reviewhub-client";

import { eventually } from "./harness.js";

const WINDOW_MS = 1000;
const CLIENTS = 40;
const ANSWER = { action: "accept", content: { ok: true } };

type Listener = (event: never) => void;

/** Greets, resumes and subscribes every socket; `dropAll` closes them all at once. */
class StandIn {
  readonly sockets = new Map<string, FakeSocket[]>(); // agent key -> its connections, in order
  readonly resumes = new Map<string, number[]>(); // agent key -> `after` of each resume
  polls = 0;
  busy = 0; // handshakes still to refuse with 4013 before the hello, as a server in a storm does

  fetch = async (input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const url = new URL(String(input));
    const key = new Headers(init?.headers).get("Authorization")?.replace("Bearer ", "") ?? "";
    if (url.pathname === "/api/v1/ws-ticket") return Response.json({ ticket: key });
    this.polls += 1; // a long-poll: never answered here, so a wait that long-polled would show it
    await new Promise((resolve) => setTimeout(resolve, 100));
    return Response.json({ id: url.pathname.split("/").pop(), status: "pending" });
  };

  webSocket = (() => {
    const server = this;
    return class extends FakeSocket {
      constructor(url: string) {
        super(server, new URL(url).searchParams.get("ticket") ?? "");
      }
    };
  })();

  live(key: string): FakeSocket {
    const connections = this.sockets.get(key) ?? [];
    return connections[connections.length - 1]!;
  }

  dropAll(code: number): void {
    for (const connections of this.sockets.values()) connections[connections.length - 1]!.serverClose(code);
  }
}

class FakeSocket implements WebSocketLike {
  private readonly listeners = new Map<string, Listener[]>();
  open = true;

  constructor(
    private readonly server: StandIn,
    readonly key: string,
  ) {
    const connections = server.sockets.get(key) ?? [];
    connections.push(this);
    server.sockets.set(key, connections);
    if (server.busy > 0) {
      server.busy -= 1;
      setTimeout(() => this.serverClose(CLOSE_TRY_AGAIN_LATER), 1);
      return;
    }
    setTimeout(() => this.push({ type: "hello", cursor: 0 }), 1);
  }

  addEventListener(type: string, listener: Listener): void {
    this.listeners.set(type, [...(this.listeners.get(type) ?? []), listener]);
  }

  private emit(type: string, event: unknown): void {
    for (const listener of this.listeners.get(type) ?? []) (listener as (event: unknown) => void)(event);
  }

  push(frame: Record<string, unknown>): void {
    if (this.open) this.emit("message", { data: JSON.stringify(frame) });
  }

  send(data: string): void {
    const message = JSON.parse(data) as { type: string; after?: number; ids?: string[] };
    setTimeout(() => {
      if (message.type === "resume") {
        const resumes = this.server.resumes.get(this.key) ?? [];
        resumes.push(Number(message.after));
        this.server.resumes.set(this.key, resumes);
        this.push({ type: "resumed", cursor: message.after });
      } else if (message.type === "subscribe") {
        for (const id of message.ids ?? []) this.push({ type: "state", id, status: "pending" });
      }
    }, 1);
  }

  close(code = 1000): void {
    this.serverClose(code);
  }

  serverClose(code: number): void {
    if (!this.open) return;
    this.open = false;
    this.emit("close", { code });
  }
}

const requestId = (n: number): string => `5b0f1c7e-3333-4a4a-9c9c-${String(n).padStart(12, "0")}`;

/** A client of the stand-in, one agent key, reconnects spread over `spreadMs`. */
function standInClient(server: StandIn, apiKey: string, spreadMs: number): ReviewHubClient {
  return new ReviewHubClient({
    baseUrl: "http://stand-in.invalid",
    apiKey,
    fetch: server.fetch as typeof fetch,
    webSocket: server.webSocket,
    reconnectSpreadMs: spreadMs,
  });
}

test("spread delays of many drops cover the whole window", () => {
  const delays = Array.from({ length: 5000 }, () => spreadDelay(5000));
  assert.ok(delays.every((delay) => delay >= 0 && delay <= 5000));
  // Counted: every tenth of the window gets its share (~500 each), so no moment sees a crowd.
  const tenths = Array.from({ length: 10 }, (_, n) => delays.filter((d) => d >= n * 500 && d < (n + 1) * 500).length);
  assert.ok(Math.min(...tenths) > 350 && Math.max(...tenths) < 650, String(tenths));
});

for (const code of [1001, 1006, 1011, 1012, CLOSE_RESUME]) {
  test(`clients dropped together (close ${code}) reconnect spread over the window and resume`, { timeout: 60_000 }, async () => {
    const server = new StandIn();
    const hubs = Array.from(
      { length: CLIENTS },
      (_, n) =>
        new ReviewHubClient({
          baseUrl: "http://stand-in.invalid",
          apiKey: `rh_key_${n}`,
          fetch: server.fetch as typeof fetch,
          webSocket: server.webSocket,
          reconnectSpreadMs: WINDOW_MS,
          timeoutMs: 5000,
        }),
    );
    const keys = hubs.map((_, n) => `rh_key_${n}`);
    try {
      const waits = hubs.map((hub, n) => hub.wait(requestId(n), { timeoutMs: 60_000 }));
      let settled = 0;
      for (const wait of waits) void wait.then(() => (settled += 1), () => (settled += 1));
      await eventually(() => keys.every((key) => server.resumes.get(key)?.length === 1), "every socket resumed once");
      const pollsBefore = server.polls;

      // Counted, not timed: the random draws made from the drop until every client is back are the spread delays,
      // one per client, and they cover the window (every quarter of it got some of the 40 clients).
      const draws: number[] = [];
      const random = Math.random;
      Math.random = () => {
        draws.push(random());
        return draws[draws.length - 1]!;
      };
      try {
        server.dropAll(code);
        await eventually(() => keys.every((key) => server.sockets.get(key)?.length === 2), "every client reconnected");
      } finally {
        Math.random = random;
      }
      assert.equal(draws.length, CLIENTS);
      const quarters = [0, 1, 2, 3].map((q) => draws.filter((d) => d >= q / 4 && d < (q + 1) / 4).length);
      assert.ok(quarters.every((count) => count > 0), String(quarters));
      await eventually(() => keys.every((key) => server.resumes.get(key)?.length === 2), "every socket resumed again");
      // Never an error, and the waits waited for the socket instead of long-polling as a herd.
      assert.equal(settled, 0);
      assert.equal(server.polls, pollsBefore);
      assert.ok(hubs.every((hub) => hub.socketConnected));

      keys.forEach((key, n) =>
        server.live(key).push({ type: "completed", id: requestId(n), cursor: 1, status: "completed", result: ANSWER }),
      );
      assert.deepEqual(await Promise.all(waits), Array(CLIENTS).fill(ANSWER));
    } finally {
      await Promise.all(hubs.map((hub) => hub.close()));
    }
  });
}

test("a 'too slow' close resumes from the last cursor and delivers what came after", { timeout: 30_000 }, async () => {
  const server = new StandIn();
  const hub = standInClient(server, "rh_slow", 300);
  try {
    const seen: number[] = [];
    hub.onEvent((event) => seen.push(event.cursor));
    const waiting = hub.wait(requestId(1), { timeoutMs: 30_000 });
    await eventually(() => server.resumes.get("rh_slow")?.length === 1, "resumed");
    for (const cursor of [1, 2]) {
      server.live("rh_slow").push({ type: "completed", id: requestId(9), cursor, status: "completed", result: ANSWER });
    }
    await eventually(() => seen.length === 2, "two bystander events");
    const pollsBefore = server.polls;
    server.live("rh_slow").serverClose(CLOSE_RESUME);
    await eventually(() => server.resumes.get("rh_slow")?.length === 2, "resumed again");
    assert.deepEqual(server.resumes.get("rh_slow"), [0, 2]); // from the last cursor, not from the start
    server.live("rh_slow").push({ type: "completed", id: requestId(1), cursor: 3, status: "completed", result: ANSWER });
    assert.deepEqual(await waiting, ANSWER);
    assert.deepEqual(seen, [1, 2, 3]);
    assert.equal(server.polls, pollsBefore);
  } finally {
    await hub.close();
  }
});

test("a handshake refused with 4013 waits a spread delay, then is greeted", { timeout: 30_000 }, async () => {
  const server = new StandIn();
  server.busy = 1;
  const draws: number[] = [];
  const random = Math.random;
  const hub = standInClient(server, "rh_busy", 300);
  try {
    Math.random = () => {
      draws.push(random());
      return draws[draws.length - 1]!;
    };
    const waiting = hub.wait(requestId(1), { timeoutMs: 30_000 });
    await eventually(() => server.resumes.get("rh_busy")?.length === 1, "greeted after the refusal");
    Math.random = random;
    assert.equal(server.sockets.get("rh_busy")?.length, 2); // refused once, then greeted
    assert.equal(draws.length, 1); // the retry waited one spread draw
    server.live("rh_busy").push({ type: "completed", id: requestId(1), cursor: 1, status: "completed", result: ANSWER });
    assert.deepEqual(await waiting, ANSWER); // a busy server is not an error
  } finally {
    Math.random = random;
    await hub.close();
  }
});

test("each 4013 in a row doubles the spread window, up to a minute", () => {
  assert.deepEqual(
    [0, 1, 2, 3, 4, 5, 6].map((refusals) => spreadWindow(5000, refusals)),
    [5000, 5000, 10_000, 20_000, 40_000, 60_000, 60_000],
  );
  assert.equal(spreadWindow(5000, 5000), 60_000); // no overflow, however long the storm
});

test("three refusals in a row wait over 1, 2 and 4 windows", { timeout: 30_000 }, async () => {
  const server = new StandIn();
  server.busy = 3;
  const draws: number[] = [];
  const random = Math.random;
  const hub = standInClient(server, "rh_storm", 40);
  try {
    Math.random = () => {
      draws.push(0.999); // the far end of each window, so the waits show the windows
      return 0.999;
    };
    const before = Date.now();
    const waiting = hub.wait(requestId(1), { timeoutMs: 30_000 });
    await eventually(() => server.resumes.get("rh_storm")?.length === 1, "greeted after three refusals");
    assert.equal(server.sockets.get("rh_storm")?.length, 4);
    assert.equal(draws.length, 3);
    // 40 + 80 + 160 ms at least, against 120 ms had every retry used the plain window.
    assert.ok(Date.now() - before >= 270, `greeted after ${Date.now() - before} ms`);
    server.live("rh_storm").push({ type: "completed", id: requestId(1), cursor: 1, status: "completed", result: ANSWER });
    assert.deepEqual(await waiting, ANSWER);
  } finally {
    Math.random = random;
    await hub.close();
  }
});
