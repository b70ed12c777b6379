/**
 * ReviewHub agent client: ask a human (create an elicitation), wait for the answer, read the event feed.
 *
 * Waiting uses one WebSocket per client, shared by every concurrent wait. It resumes from its last cursor after
 * any reconnect and re-subscribes to what it waits for, so an answer given while it was disconnected still
 * arrives. While the socket is down, each wait long-polls the REST API instead. Creates are retried with the
 * same Idempotency-Key after a connection error or a 429/502/503/504, so a retry never queues a second request.
 *
 * Needs only the platform's `fetch` and `WebSocket`: it runs in browsers, Deno, Bun and Node.
 */

import {
  ConflictError,
  ReviewHubError,
  RequestWithdrawn,
  WaitTimeout,
  AuthenticationError,
  errorForResponse,
} from "./errors.js";
import type { AgentEvent, ElicitResult, ElicitationRequest, EventPage, RequestedSchema } from "./models.js";
import { OPEN_STATUSES, toElicitResult, toRequest } from "./models.js";
import { AgentSocket, type Frame, type WebSocketConstructor } from "./socket.js";
import { Deferred, abortReason, backoffDelay, linkedController, sleep } from "./timing.js";

export const DEFAULT_URL = "http://127.0.0.1:8000";
const RETRY_STATUSES = new Set([429, 502, 503, 504]);

export interface ReviewHubClientOptions {
  /** Defaults to $REVIEWHUB_URL (where there is a `process`), else http://127.0.0.1:8000. */
  baseUrl?: string;
  /** Defaults to $REVIEWHUB_AGENT_KEY. */
  apiKey?: string;
  /** Per HTTP request (a long-poll gets its wait on top). Default 10 s. */
  timeoutMs?: number;
  /** Retries after connection errors and 429/502/503/504. Default 5. */
  maxRetries?: number;
  /** Wait over the agent WebSocket (default true); false long-polls only. */
  useWebSocket?: boolean;
  /** The WebSocket class; defaults to the global one. Without either, waits long-poll. */
  webSocket?: WebSocketConstructor;
  /** The agent socket's URL; defaults to `/ws/agent/` on `baseUrl` (ws:// or wss://). */
  wsUrl?: string;
  /** After the server drops the socket, the first reconnect is spread uniformly over this window. Default 5000. */
  reconnectSpreadMs?: number;
  /** Seconds per long-poll round while the socket is down. Default 25. */
  longPollSeconds?: number;
  /** The fetch function; defaults to the global one. */
  fetch?: typeof fetch;
}

/** `POST /api/v1/requests`: MCP ElicitRequestParams fields plus ReviewHub's. */
export interface CreateRequestOptions {
  message: string;
  /** Form mode: the flat MCP schema subset. */
  requestedSchema?: RequestedSchema;
  queue?: string;
  /** Defaults to "url" when `url` is given, else "form". */
  mode?: "form" | "url";
  url?: string;
  elicitationId?: string;
  priority?: number;
  /** Seconds until the request expires with its queue's outcome. */
  expiresIn?: number;
  /** Free JSON shown to the reviewer (MCP server, tool, arguments...). */
  context?: Record<string, unknown>;
  callbackUrl?: string;
  /** One per logical request; generated when absent and reused by every retry of this call. */
  idempotencyKey?: string;
  signal?: AbortSignal;
}

export interface WaitOptions {
  /** Give up after this long with WaitTimeout; absent or null waits until the request closes. */
  timeoutMs?: number | null;
  /** Aborting stops waiting (the request stays open) and rejects with the signal's reason. */
  signal?: AbortSignal;
}

export interface ElicitOptions extends CreateRequestOptions, WaitOptions {
  /** Withdraw the request when the wait times out (default true). */
  cancelOnTimeout?: boolean;
}

interface SendOptions {
  body?: unknown;
  query?: Record<string, string | number>;
  headers?: Record<string, string>;
  timeoutMs?: number;
  retry?: boolean;
  signal?: AbortSignal | undefined;
}

function environment(name: string): string | undefined {
  const process = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return process?.env?.[name] || undefined;
}

export class ReviewHubClient {
  readonly baseUrl: string;
  readonly timeoutMs: number;
  readonly maxRetries: number;
  readonly longPollSeconds: number;
  private readonly apiKey: string;
  private readonly fetchFn: typeof fetch;
  private readonly socket: AgentSocket | null;

  constructor(options: ReviewHubClientOptions = {}) {
    this.baseUrl = (options.baseUrl ?? environment("REVIEWHUB_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    const key = options.apiKey ?? environment("REVIEWHUB_AGENT_KEY") ?? "";
    if (!key) throw new AuthenticationError("No agent key: pass apiKey or set REVIEWHUB_AGENT_KEY.");
    this.apiKey = key;
    this.timeoutMs = options.timeoutMs ?? 10_000;
    this.maxRetries = options.maxRetries ?? 5;
    this.longPollSeconds = options.longPollSeconds ?? 25;
    this.fetchFn = options.fetch ?? globalThis.fetch.bind(globalThis);
    const webSocket =
      options.webSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket ?? undefined;
    this.socket =
      options.useWebSocket === false || webSocket === undefined
        ? null
        : new AgentSocket({
            url: options.wsUrl ?? `${this.baseUrl.replace(/^http/, "ws")}/ws/agent/`,
            webSocket,
            issueTicket: () => this.issueTicket(),
            openTimeoutMs: this.timeoutMs,
            reconnectSpreadMs: options.reconnectSpreadMs,
          });
  }

  /** Closes the socket; pending waits fall back to long-polling. Call it when done, or the process lives on. */
  async close(): Promise<void> {
    await this.socket?.close();
  }

  // --- REST ----------------------------------------------------------------------------------------------

  /** One API call; retried (same request, same headers) after connection errors and 429/502/503/504. */
  private async send<T>(method: string, path: string, options: SendOptions = {}): Promise<T> {
    const url = new URL(this.baseUrl + path);
    for (const [name, value] of Object.entries(options.query ?? {})) url.searchParams.set(name, String(value));
    const headers: Record<string, string> = { Authorization: `Bearer ${this.apiKey}`, ...options.headers };
    if (options.body !== undefined) headers["Content-Type"] = "application/json";
    const attempts = options.retry === false ? 1 : this.maxRetries + 1;
    const signal = options.signal;
    for (let attempt = 0; ; attempt++) {
      const last = attempt === attempts - 1;
      const call = linkedController(signal);
      const timer = setTimeout(
        () => call.abort(new DOMException("ReviewHub did not answer in time.", "TimeoutError")),
        options.timeoutMs ?? this.timeoutMs,
      );
      let response: Response;
      let text: string;
      try {
        response = await this.fetchFn(url, {
          method,
          headers,
          body: options.body === undefined ? undefined : JSON.stringify(options.body),
          signal: call.signal,
        });
        text = await response.text();
      } catch (error) {
        if (signal?.aborted) throw abortReason(signal);
        if (last) {
          throw new ReviewHubError(`Cannot reach ReviewHub at ${this.baseUrl}: ${String(error)}`, { cause: error });
        }
        await this.pause(backoffDelay(attempt), signal);
        continue;
      } finally {
        clearTimeout(timer);
        call.abort(); // detaches it from the caller's signal
      }
      if (RETRY_STATUSES.has(response.status) && !last) {
        const retryAfter = response.headers.get("Retry-After") ?? "";
        const delay = /^\d+$/.test(retryAfter) ? Number(retryAfter) * 1000 : backoffDelay(attempt);
        await this.pause(Math.min(delay, 30_000), signal);
        continue;
      }
      const body: unknown = text ? parseJson(text) : null;
      if (response.ok) return body as T;
      throw errorForResponse(response.status, response.statusText, body);
    }
  }

  private async pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
    await sleep(ms, signal);
    if (signal?.aborted) throw abortReason(signal);
  }

  /** Queue an MCP elicitation for a human. Form mode takes `requestedSchema`; URL mode takes `url`. */
  async create(options: CreateRequestOptions): Promise<ElicitationRequest> {
    const body: Record<string, unknown> = {
      message: options.message,
      queue: options.queue ?? "default",
      mode: options.mode ?? (options.url ? "url" : "form"),
    };
    const optional: Record<string, unknown> = {
      requestedSchema: options.requestedSchema,
      url: options.url,
      elicitationId: options.elicitationId,
      priority: options.priority,
      expiresIn: options.expiresIn,
      context: options.context,
      callbackUrl: options.callbackUrl,
    };
    for (const [name, value] of Object.entries(optional)) if (value !== undefined && value !== null) body[name] = value;
    // One key per create call, reused by every retry of it: the server returns the first request.
    const key = options.idempotencyKey ?? crypto.randomUUID();
    const data = await this.send<Record<string, unknown>>("POST", "/api/v1/requests", {
      body,
      headers: { "Idempotency-Key": key },
      signal: options.signal,
    });
    return toRequest(data);
  }

  /** The request's status and, once closed, its result. `wait` long-polls up to that many seconds. */
  async get(requestId: string, options: { wait?: number; signal?: AbortSignal } = {}): Promise<ElicitationRequest> {
    const wait = options.wait ?? 0;
    const data = await this.send<Record<string, unknown>>("GET", `/api/v1/requests/${encodeURIComponent(requestId)}`, {
      query: wait ? { wait } : {},
      timeoutMs: wait * 1000 + this.timeoutMs,
      signal: options.signal,
    });
    return toRequest(data);
  }

  /** Withdraw an open request (the agent's turn ended). ConflictError if it was already answered. */
  async cancel(requestId: string): Promise<ElicitationRequest> {
    try {
      return toRequest(
        await this.send<Record<string, unknown>>("POST", `/api/v1/requests/${encodeURIComponent(requestId)}/cancel`),
      );
    } catch (error) {
      const body = error instanceof ConflictError ? (error.body as { status?: unknown } | undefined) : undefined;
      if (body?.status === "withdrawn") return this.get(requestId); // an earlier attempt got through before a retry
      throw error;
    }
  }

  /** The out-of-band URL flow finished (MCP `notifications/elicitation/complete`); unknown ids are ignored. */
  async completeUrl(target: { elicitationId: string } | { requestId: string }): Promise<void> {
    await this.send("POST", "/api/v1/requests/url-complete", { body: target });
  }

  /** The durable feed: events with a cursor above `after`, oldest first (long-polls with `wait` seconds). */
  async events(after = 0, options: { wait?: number; signal?: AbortSignal } = {}): Promise<EventPage> {
    const wait = options.wait ?? 0;
    const data = await this.send<{ events: AgentEvent[]; cursor: number }>("GET", "/api/v1/events", {
      query: wait ? { after, wait } : { after },
      timeoutMs: wait * 1000 + this.timeoutMs,
      signal: options.signal,
    });
    return {
      events: data.events.map((event) => ({ ...event, result: event.result ? toElicitResult(event.result) : null })),
      cursor: Number(data.cursor),
    };
  }

  /** The agent's requests, newest first: `open` (default), `closed` or `all`. */
  async listRequests(status: "open" | "closed" | "all" = "open"): Promise<ElicitationRequest[]> {
    const rows = await this.send<Record<string, unknown>[]>("GET", "/api/v1/requests", { query: { status } });
    return rows.map(toRequest);
  }

  private async issueTicket(): Promise<string> {
    const data = await this.send<{ ticket: string }>("POST", "/api/v1/ws-ticket", { retry: false });
    return data.ticket;
  }

  /** Whether the wait socket is connected now (waits then listen on it instead of long-polling). */
  get socketConnected(): boolean {
    return this.socket?.connected ?? false;
  }

  /** Each event of the agent's feed that the wait socket sees, once (from its first connection on). */
  onEvent(listener: (event: AgentEvent) => void): () => void {
    return this.socket?.onEvent(listener) ?? (() => undefined);
  }

  // --- waiting -------------------------------------------------------------------------------------------

  /**
   * The human's answer, as an MCP ElicitResult (an expired request gives its queue's outcome).
   *
   * Rejects with WaitTimeout after `timeoutMs`, RequestWithdrawn if the request was withdrawn, NotFoundError for
   * an unknown id, and the signal's reason when `signal` aborts.
   */
  async wait(requestId: string, options: WaitOptions = {}): Promise<ElicitResult> {
    const { signal } = options;
    const timeoutMs = options.timeoutMs ?? null;
    const deadline = timeoutMs === null ? Infinity : Date.now() + timeoutMs;
    const socket = this.socket !== null && !this.socket.unusable ? this.socket : null;
    const answer = socket ? socket.watch(requestId) : new Deferred<Frame>();
    try {
      while (!answer.settled) {
        if (signal?.aborted) throw abortReason(signal);
        const remaining = deadline - Date.now();
        if (remaining <= 0) throw new WaitTimeout(`No answer to ${requestId} within ${timeoutMs} ms.`, requestId);
        const round = linkedController(signal); // ends this round's sleep and long-poll
        // Dropped by the server and reconnecting at its spread moment: wait for the socket (its resume brings what
        // is answered meanwhile) instead of bringing the whole herd back at once as long-polls.
        const comingBack = socket !== null && !socket.connected ? socket.backWithinMs() : 0;
        const wakers: Promise<unknown>[] = [answer.promise, sleep(Math.min(remaining, comingBack || remaining), round.signal)];
        if (socket !== null && !socket.unusable) wakers.push(socket.stateChanged());
        if ((socket === null || !socket.connected) && comingBack === 0) {
          // No socket right now: long-poll, while the socket (if any) tries to come back.
          const seconds = Math.min(remaining, this.longPollSeconds * 1000) / 1000;
          wakers.push(
            this.pollClosed(requestId, seconds, round.signal).then(
              (closed) => closed && answer.resolve(closed),
              (error: unknown) => answer.reject(error),
            ),
          );
        }
        try {
          await Promise.race(wakers);
        } finally {
          round.abort();
        }
      }
      return resultOf(requestId, await answer.promise);
    } finally {
      socket?.unwatch(requestId, answer);
    }
  }

  /** One long-poll round: the closed request's frame, or null (still open, the server unreachable, aborted). */
  private async pollClosed(requestId: string, seconds: number, signal: AbortSignal): Promise<Frame | null> {
    const wait = Math.max(1, Math.floor(seconds));
    let data: Record<string, unknown>;
    try {
      data = await this.send("GET", `/api/v1/requests/${encodeURIComponent(requestId)}`, {
        query: { wait },
        timeoutMs: wait * 1000 + this.timeoutMs,
        retry: false,
        signal,
      });
    } catch (error) {
      if (signal.aborted) return null;
      if (error instanceof ReviewHubError && error.status !== null && !RETRY_STATUSES.has(error.status)) throw error;
      await sleep(Math.min(1000, seconds * 1000), signal); // down or restarting: the caller's loop tries again
      return null;
    }
    if (OPEN_STATUSES.has(String(data.status))) return null;
    return { id: requestId, status: data.status, result: data.result };
  }

  /**
   * Create and wait. On timeout the request is withdrawn (unless `cancelOnTimeout: false`) and WaitTimeout
   * thrown; an answer that lands while withdrawing wins and is returned. An aborted wait withdraws too.
   */
  async elicit(options: ElicitOptions): Promise<ElicitResult> {
    const request = await this.create(options);
    try {
      return await this.wait(request.id, options);
    } catch (error) {
      const timedOut = error instanceof WaitTimeout;
      if (!(timedOut ? options.cancelOnTimeout !== false : options.signal?.aborted)) throw error;
      try {
        await this.cancel(request.id);
      } catch (cancelError) {
        if (!(cancelError instanceof ConflictError)) throw error;
        const late = await this.get(request.id);
        if (timedOut && late.result !== null) return late.result;
      }
      throw error;
    }
  }
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return { detail: text.slice(0, 200) };
  }
}

function resultOf(requestId: string, frame: Frame): ElicitResult {
  const result = frame.result as ElicitResult | null | undefined;
  if (frame.status === "withdrawn" || !result) {
    throw new RequestWithdrawn(`Request ${requestId} was withdrawn before it was answered.`, { code: "withdrawn" });
  }
  return toElicitResult(result);
}
