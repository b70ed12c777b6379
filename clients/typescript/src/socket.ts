/** The agent WebSocket (`/ws/agent/`), shared by every wait of a client. */

import { AuthenticationError, NotFoundError, ReviewHubError } from "./errors.js";
import type { AgentEvent } from "./models.js";
import { OPEN_STATUSES } from "./models.js";
import { Deferred, backoffDelay, sleep, spreadDelay, spreadWindow } from "./timing.js";

export const CLOSE_UNAUTHORIZED = 4401;
/** The server closed a socket that could not keep up with its frames: reconnect and resume from the cursor. */
export const CLOSE_RESUME = 4008;
/** The server is busy with a reconnect storm and refused the handshake before any work: spread, then return. */
export const CLOSE_TRY_AGAIN_LATER = 4013;
/** 4013 is RFC 6455's 1013 in the application range (daphne cannot send 1013); other servers may send 1013. */
const TRY_AGAIN_LATER_CODES = new Set([CLOSE_TRY_AGAIN_LATER, 1013]);
/** After the server drops an established socket (a restart, a crash, 1001/1006/1011/1012, or CLOSE_RESUME), the
 * first reconnect waits a uniform random time in [0, this): 5,000 agents of a dead process return over 5 s. */
export const RECONNECT_SPREAD_MS = 5000;

/** The part of the WHATWG WebSocket the client uses; browsers', Node's (22+, or 20 with
 * `--experimental-websocket`) and the `ws` package's sockets all fit. */
export interface WebSocketLike {
  send(data: string): void;
  close(code?: number, reason?: string): void;
  addEventListener(type: "message", listener: (event: { data: unknown }) => void): void;
  addEventListener(type: "close", listener: (event: { code: number }) => void): void;
  addEventListener(type: "open" | "error", listener: (event: unknown) => void): void;
}

export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** A frame as it came: the closing event of a request (`completed`, `expired`, `withdrawn`) or a `state`. */
export type Frame = Record<string, unknown>;

export interface AgentSocketOptions {
  /** `ws(s)://host/ws/agent/`; the ticket is appended as a query parameter. */
  url: string;
  webSocket: WebSocketConstructor;
  /** A single-use ticket (`POST /api/v1/ws-ticket`): sockets cannot carry an Authorization header in browsers. */
  issueTicket: () => Promise<string>;
  /** How long to wait for the socket to open and say hello. */
  openTimeoutMs: number;
  /** The window the first reconnect after a server drop is spread over (default RECONNECT_SPREAD_MS). */
  reconnectSpreadMs?: number;
}

/**
 * On each (re)connect it resumes the feed from its last cursor and subscribes to every id still awaited, so
 * completions made while it was away arrive (once each: the server never repeats an event on one socket).
 * The cursor only advances over a gap-free run of cursors, never past an event it has not seen.
 */
export class AgentSocket {
  readonly watchers = new Map<string, Set<Deferred<Frame>>>();
  cursor: number | null = null;
  connected = false;
  /** The server has no socket for us (no ticket endpoint): waits long-poll only. */
  unusable = false;
  /** The close code of the last connection (undefined: it never opened, or was cut without one). */
  lastCloseCode: number | undefined = undefined;
  /** Date.now() by which the spread reconnect after a server drop should be connected; null otherwise. */
  private backBy: number | null = null;
  private ahead = new Set<number>();
  private ws: WebSocketLike | null = null;
  private running: Promise<void> | null = null;
  private changed = new Deferred<void>();
  private wake = new Deferred<void>();
  private readonly closing = new AbortController();
  private readonly listeners = new Set<(event: AgentEvent) => void>();

  constructor(private readonly options: AgentSocketOptions) {}

  watch(requestId: string): Deferred<Frame> {
    const answer = new Deferred<Frame>();
    let waiting = this.watchers.get(requestId);
    if (!waiting) this.watchers.set(requestId, (waiting = new Set()));
    waiting.add(answer);
    this.wake.resolve();
    if (this.running === null) this.running = this.run();
    else if (this.connected) this.send({ type: "subscribe", ids: [requestId] });
    return answer;
  }

  unwatch(requestId: string, answer: Deferred<Frame>): void {
    const waiting = this.watchers.get(requestId);
    if (!waiting) return;
    waiting.delete(answer);
    if (waiting.size === 0) this.watchers.delete(requestId);
  }

  /** Resolves when the socket next connects, drops, or gives up for good. */
  stateChanged(): Promise<void> {
    if (this.changed.settled) this.changed = new Deferred<void>();
    return this.changed.promise;
  }

  /** Milliseconds until the spread reconnect after a server drop is due to be connected (0: not reconnecting so).
   * Waits wait for it rather than long-polling: the resume brings whatever is answered meanwhile. */
  backWithinMs(): number {
    return this.backBy === null ? 0 : Math.max(0, this.backBy - Date.now());
  }

  /** Each event of the agent's feed this socket sees, once, from the moment it first connected. */
  onEvent(listener: (event: AgentEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.closing.abort();
    this.wake.resolve();
    this.ws?.close(1000);
    await this.running;
  }

  private setConnected(connected: boolean): void {
    this.connected = connected;
    this.changed.resolve();
  }

  private send(message: Frame): void {
    try {
      this.ws?.send(JSON.stringify(message));
    } catch {
      // Closing already: the reconnect subscribes everything again.
    }
  }

  private async run(): Promise<void> {
    let failures = 0;
    let refusals = 0; // busy refusals (4013 or 1013) in a row: the server is still busy with a storm, so come back later each time
    while (!this.closing.signal.aborted) {
      if (this.watchers.size === 0) {
        // Idle and disconnected: reconnect only when someone waits.
        if (this.wake.settled) this.wake = new Deferred<void>();
        await this.wake.promise;
        continue;
      }
      let ticket: string;
      try {
        ticket = await this.options.issueTicket();
      } catch (error) {
        if (error instanceof AuthenticationError) {
          this.failAll(error);
        } else if (error instanceof NotFoundError) {
          this.unusable = true; // an older server without tickets: long-poll from now on
          this.setConnected(false);
          return;
        }
        failures += 1;
        await sleep(backoffDelay(Math.min(failures, 6), 200, 5000), this.closing.signal);
        continue;
      }
      if (this.closing.signal.aborted) break;
      const separator = this.options.url.includes("?") ? "&" : "?";
      let code: number | undefined;
      let greeted = false;
      try {
        const ws = new this.options.webSocket(`${this.options.url}${separator}ticket=${encodeURIComponent(ticket)}`);
        this.ws = ws;
        ({ code, greeted } = await this.session(ws));
      } catch {
        // A malformed URL or a constructor that throws: treated like a refused connection.
      } finally {
        this.ws = null;
        this.setConnected(false);
      }
      this.lastCloseCode = code;
      if (code === CLOSE_UNAUTHORIZED && greeted) {
        this.failAll(new AuthenticationError("The agent key was revoked or rotated.", { code: "unauthenticated" }));
      }
      if (this.closing.signal.aborted) break;
      if ((greeted && code !== CLOSE_UNAUTHORIZED) || TRY_AGAIN_LATER_CODES.has(code ?? 0)) {
        // The server dropped a live socket (1001, 1006, 1011, 1012, CLOSE_RESUME "too slow": never an error), and
        // with it every other socket it held: spread the first reconnect over the whole window (full jitter). Each
        // refusal in a row doubles the window.
        failures = 0;
        refusals = TRY_AGAIN_LATER_CODES.has(code ?? 0) ? refusals + 1 : 0;
        const delay = spreadDelay(spreadWindow(this.options.reconnectSpreadMs ?? RECONNECT_SPREAD_MS, refusals));
        this.backBy = Date.now() + delay + this.options.openTimeoutMs;
        await sleep(delay, this.closing.signal);
        continue;
      }
      // Refused before the hello, the ticket was: spent, expired, or issued in the same second as another
      // socket's (the server's tickets are not unique within a second). The next ticket request says whether the
      // key itself is still good.
      this.backBy = null;
      failures = greeted ? 0 : failures + 1;
      await sleep(backoffDelay(Math.min(failures, 6), 200, 5000), this.closing.signal);
    }
  }

  /** One connection, from open to close: the close code, and whether the server said hello. */
  private session(ws: WebSocketLike): Promise<{ code: number | undefined; greeted: boolean }> {
    return new Promise((resolve) => {
      let greeted = false;
      const finish = (code: number | undefined): void => {
        clearTimeout(openTimer);
        this.closing.signal.removeEventListener("abort", closed);
        resolve({ code, greeted });
      };
      const closed = (): void => finish(undefined); // close() must not depend on the close event arriving
      this.closing.signal.addEventListener("abort", closed);
      const openTimer = setTimeout(() => {
        if (!greeted) {
          ws.close();
          finish(undefined);
        }
      }, this.options.openTimeoutMs);
      ws.addEventListener("message", (event) => {
        let frame: unknown;
        try {
          frame = JSON.parse(String(event.data));
        } catch {
          return;
        }
        if (typeof frame !== "object" || frame === null) return;
        if (!greeted) {
          greeted = true;
          clearTimeout(openTimer);
          this.greet(frame as Frame);
          return;
        }
        this.handle(frame as Frame);
      });
      ws.addEventListener("close", (event) => finish(event.code));
      // Some implementations report a refused connection with `error` alone.
      ws.addEventListener("error", () => finish(undefined));
    });
  }

  private greet(hello: Frame): void {
    if (this.cursor === null) {
      // First connection: the feed starts now; earlier completions come from the subscription.
      this.cursor = Number(hello.cursor ?? 0);
    }
    this.setConnected(true); // from here watch() subscribes new ids by itself
    this.send({ type: "resume", after: this.cursor });
    if (this.watchers.size) this.send({ type: "subscribe", ids: [...this.watchers.keys()].sort() });
  }

  private handle(frame: Frame): void {
    const kind = frame.type;
    if (kind === "resumed") {
      this.advanceTo(Number(frame.cursor));
    } else if (kind === "error") {
      if (frame.code === "not_found" && typeof frame.id === "string") {
        this.fail(frame.id, new NotFoundError("No such request.", { status: 404, code: "not_found" }));
      }
    } else if (kind === "state") {
      if (!OPEN_STATUSES.has(String(frame.status))) this.resolve(frame); // a subscribe answered with a closed request
    } else if (frame.cursor !== undefined && frame.id !== undefined) {
      const cursor = Number(frame.cursor);
      if (this.record(cursor)) {
        for (const listener of this.listeners) listener(frame as unknown as AgentEvent);
      }
      if (!OPEN_STATUSES.has(String(frame.status))) this.resolve(frame);
    }
  }

  private resolve(frame: Frame): void {
    for (const answer of this.watchers.get(String(frame.id)) ?? []) answer.resolve(frame);
  }

  /** Advance over gap-free cursors only; a cursor further on waits in `ahead` until the gap fills.
   * True when the cursor was not seen before. */
  private record(cursor: number): boolean {
    if (this.cursor === null || cursor <= this.cursor || this.ahead.has(cursor)) return false;
    this.ahead.add(cursor);
    this.absorbAhead();
    return true;
  }

  /** `resumed`: the server has sent every event up to here. */
  private advanceTo(cursor: number): void {
    if (this.cursor === null || cursor > this.cursor) this.cursor = cursor;
    for (const seen of this.ahead) if (seen <= this.cursor) this.ahead.delete(seen);
    this.absorbAhead();
  }

  private absorbAhead(): void {
    if (this.cursor === null) return;
    while (this.ahead.has(this.cursor + 1)) {
      this.cursor += 1;
      this.ahead.delete(this.cursor);
    }
  }

  private fail(requestId: string, error: ReviewHubError): void {
    for (const answer of this.watchers.get(requestId) ?? []) answer.reject(error);
  }

  private failAll(error: ReviewHubError): void {
    for (const requestId of this.watchers.keys()) this.fail(requestId, error);
  }
}
