/**
 * MCP 2026-07-28 input-required round trips (SEP-2322), answered by ReviewHub reviewers, surviving a restart.
 *
 * A tool may answer `tools/call` with `{resultType: "input_required", inputRequests: {key: request}, requestState}`.
 * `resolveInputRequired` posts every elicitation of `inputRequests` to ReviewHub, each carrying the whole round in
 * `context.mcp` (`{server, method, params: {name, arguments}, requestState, inputKey, inputKeys, inputRequests,
 * round, roundId}`, the Python helper's layout), then re-issues the call — same name and arguments,
 * `inputResponses` keyed like the requests, `requestState` echoed byte for byte, a new JSON-RPC id — until the
 * server returns a complete result. More than `maxRounds` (default 5) rounds ends with `InputRoundsExceeded`.
 *
 * Calls go through the SDK `Client`'s generic `request()` (1.x, or 2.x told to leave the rounds to the caller) and
 * the result is read as sent: recognition follows the spec, not a schema's parse. A result is a round only
 * when `resultType` is `"input_required"` and it has a non-empty `inputRequests` or `requestState`; anything
 * else (no `resultType`, or a half-shaped result) is a normal result, so a server bug cannot make the client loop.
 * On 2.x a result the SDK refuses to decode (a 2026-07-28 one without `resultType`) is read off the transport, and
 * calls carry the SEP-2243 `Mcp-Param-*` headers of tools that declare them (call-v2.ts).
 *
 * A restarted agent finds its unfinished rounds with `findPendingRounds(hub, store)` (its open ReviewHub requests,
 * plus an optional local store for rounds fully answered while it was down) and finishes each with
 * `resumeInputRequired`. Aborting `signal` (the agent is stopping) leaves the round's requests open for that;
 * `withdrawRound` gives a round up for good.
 */

import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";
import type { CallToolResult, ClientRequest } from "@modelcontextprotocol/sdk/types.js";

import type { ReviewHubClient } from "../client.js";
import { ReviewHubError, isRecord } from "../errors.js";
import { abortReason, sleep } from "../timing.js";
import { callToolV2, type ToolCallParams } from "./call-v2.js";
import {
  requestBody,
  sdkGeneration,
  waitForOutcome,
  withdrawQuietly,
  type ElicitParams,
  type Logger,
  type McpClient,
} from "./elicitation.js";
import type { RoundStore } from "./round-store.js";

export const DEFAULT_MAX_ROUNDS = 5;
export const TOOLS_CALL = "tools/call";

/** A server-to-client request inside `inputRequests` (elicitation, sampling or roots). */
export interface InputRequest {
  method: string;
  params?: Record<string, unknown>;
}

/** What the client sends back for one input request: an `ElicitResult`, or a sampling/roots result. */
export type InputResponse = Record<string, unknown>;

/** The server kept asking for input past `maxRounds`. */
export class InputRoundsExceeded extends Error {
  constructor(
    readonly toolName: string,
    readonly maxRounds: number,
  ) {
    super(
      `tools/call '${toolName}': the server still asked for input after ${maxRounds} rounds; giving up ` +
        "(raise maxRounds if the tool legitimately needs more)",
    );
    this.name = "InputRoundsExceeded";
  }
}

/** A sampling or roots request of a round was refused by `answerInputRequest` (or there was none). */
export class InputRequestRefused extends Error {
  constructor(
    readonly inputKey: string,
    readonly method: string,
    reason: string,
  ) {
    super(`input request ${inputKey} (${method}) was refused: ${reason}`);
    this.name = "InputRequestRefused";
  }
}

// --- recognition -----------------------------------------------------------------------------------------------

export interface InputRound {
  inputRequests: Record<string, InputRequest>;
  requestState: string | null;
}

/** The round a wire result asks for, or null when it is a (complete or half-shaped) normal result. */
export function recognizeInputRequired(result: Record<string, unknown>): InputRound | null {
  if (result.resultType !== "input_required") return null;
  const requests = isRecord(result.inputRequests) ? (result.inputRequests as Record<string, InputRequest>) : {};
  const state = typeof result.requestState === "string" && result.requestState ? result.requestState : null;
  if (Object.keys(requests).length === 0 && state === null) return null;
  return { inputRequests: { ...requests }, requestState: state };
}

/** A terminal wire result as a `CallToolResult`; a half-shaped one has no `content`, so it gets none. */
export function completeResult(result: Record<string, unknown>): CallToolResult {
  return { content: [], ...result } as CallToolResult;
}

// --- a round in flight -----------------------------------------------------------------------------------------

/** One round of one call: enough to answer it and re-issue the call from any process. */
export interface PendingRound {
  roundId: string;
  /** `{name, arguments}` of the original tools/call. */
  params: { name: string; arguments: Record<string, unknown> };
  requestState: string | null;
  round: number;
  inputRequests: Record<string, InputRequest>;
  /** Input key → ReviewHub request id. */
  reviewhubIds: Record<string, string>;
  server: string | null;
  method: string;
}

/** `context.mcp` of the ReviewHub request answering `key`: the round, for a restarted agent. */
export function roundContext(pending: PendingRound, key: string): Record<string, unknown> {
  return {
    server: pending.server,
    method: pending.method,
    params: pending.params,
    requestState: pending.requestState,
    inputKey: key,
    inputKeys: Object.keys(pending.inputRequests).sort(),
    inputRequests: pending.inputRequests,
    round: pending.round,
    roundId: pending.roundId,
  };
}

export interface InputRequiredOptions {
  /** Rounds before giving up with InputRoundsExceeded (default 5). */
  maxRounds?: number;
  /** A local record of rounds in flight, for rounds fully answered while the agent was down. */
  store?: RoundStore;
  /** The MCP server's name shown to reviewers; defaults to the name it announced. */
  serverName?: string;
  /** How long to wait for each answer before answering `cancel` (and withdrawing). Default: until it closes. */
  timeoutMs?: number | null;
  priority?: number;
  /** Aborting stops waiting and leaves the round's ReviewHub requests open, to be resumed. */
  signal?: AbortSignal;
  /** Options for each `tools/call` (its timeout, ...). */
  requestOptions?: RequestOptions;
  /** Answers the sampling and roots requests of a round (they are the host's business, not a reviewer's). */
  answerInputRequest?: (key: string, request: InputRequest) => Promise<InputResponse>;
  logger?: Logger;
}

/** What the driver needs of an SDK `Client`, 1.x (`@modelcontextprotocol/sdk`) or 2.x (`@modelcontextprotocol/client`,
 * connected with `versionNegotiation` to reach a 2026-07-28 server): both are assignable to it. */
export interface InputRequiredClient extends McpClient {
  request(...args: any[]): Promise<unknown>;
}

/** One `tools/call`, its result kept as the wire object. */
export async function callToolRaw(
  client: InputRequiredClient,
  name: string,
  args: Record<string, unknown> | undefined,
  inputResponses?: Record<string, InputResponse> | null,
  requestState?: string | null,
  options: RequestOptions = {},
): Promise<Record<string, unknown>> {
  const params: ToolCallParams = { name };
  if (args !== undefined) params.arguments = args;
  if (inputResponses) params.inputResponses = inputResponses;
  if (requestState) params.requestState = requestState;
  // 2.x resolves input_required rounds inside request() unless told not to (the rounds are ours to drive), and
  // needs help with results lacking resultType and with SEP-2243 headers: call-v2.ts.
  if (sdkGeneration(client) === 2) return await callToolV2(client, params, options);
  // ResultSchema is a loose object: every field the server sent survives. Loaded here, not imported, so that
  // `reviewhub-client/mcp` loads in an application on SDK 2.x alone.
  const { ResultSchema } = await import("@modelcontextprotocol/sdk/types.js");
  const result = await client.request({ method: TOOLS_CALL, params } as ClientRequest, ResultSchema, options);
  return result as Record<string, unknown>;
}

/** Call a tool, answering every input-required round through ReviewHub, and return its final result. */
export async function resolveInputRequired(
  client: InputRequiredClient,
  name: string,
  args: Record<string, unknown> | undefined,
  hub: ReviewHubClient,
  queue: string,
  options: InputRequiredOptions = {},
): Promise<CallToolResult> {
  const first = await callToolRaw(client, name, args, null, null, requestOptions(options));
  const params = { name, arguments: { ...args } };
  const server = options.serverName ?? client.getServerVersion()?.name ?? null;
  return drive(client, first, params, 0, hub, queue, server, options);
}

/** Continue a round another process started (see `findPendingRounds`): wait for its answers, re-issue the call
 * with the stored `requestState`, and carry on until the result is complete. */
export async function resumeInputRequired(
  client: InputRequiredClient,
  pending: PendingRound,
  hub: ReviewHubClient,
  queue: string,
  options: InputRequiredOptions = {},
): Promise<CallToolResult> {
  const responses = await answers(pending, hub, queue, options);
  const raw = await retry(client, pending, responses, options);
  await options.store?.discard(pending.roundId);
  return drive(client, raw, pending.params, pending.round, hub, queue, pending.server, options);
}

/** The rounds this agent left unfinished: from its open ReviewHub requests, and from `store` if given. */
export async function findPendingRounds(hub: ReviewHubClient, store?: RoundStore): Promise<PendingRound[]> {
  const rounds = new Map<string, PendingRound>();
  for (const pending of (await store?.load()) ?? []) rounds.set(pending.roundId, pending);
  const incomplete = new Set<string>();
  for (const row of await hub.listRequests("open")) {
    const mcp = roundOf(row.context);
    if (mcp === null) continue;
    let pending = rounds.get(mcp.roundId);
    if (pending === undefined) {
      pending = {
        roundId: mcp.roundId,
        params: mcp.params,
        requestState: mcp.requestState,
        round: mcp.round,
        inputRequests: mcp.inputRequests,
        reviewhubIds: {},
        server: mcp.server,
        method: mcp.method,
      };
      rounds.set(pending.roundId, pending);
      incomplete.add(pending.roundId);
    }
    pending.reviewhubIds[mcp.inputKey] = row.id;
  }
  if (incomplete.size) {
    // Some of those rounds' questions may have been answered already: they are closed, not open.
    for (const row of await hub.listRequests("all")) {
      const mcp = roundOf(row.context);
      const pending = mcp && incomplete.has(mcp.roundId) ? rounds.get(mcp.roundId) : undefined;
      if (mcp && pending && !(mcp.inputKey in pending.reviewhubIds)) pending.reviewhubIds[mcp.inputKey] = row.id;
    }
  }
  return [...rounds.values()].sort((a, b) => a.roundId.localeCompare(b.roundId) || a.round - b.round);
}

/** Give a round up: withdraw its open requests (reviewers see them vanish) and forget it. */
export async function withdrawRound(hub: ReviewHubClient, pending: PendingRound, store?: RoundStore): Promise<void> {
  for (const requestId of Object.values(pending.reviewhubIds)) await withdrawQuietly(hub, requestId);
  await store?.discard(pending.roundId);
}

interface RoundContext {
  roundId: string;
  inputKey: string;
  params: PendingRound["params"];
  requestState: string | null;
  round: number;
  inputRequests: Record<string, InputRequest>;
  server: string | null;
  method: string;
}

function roundOf(context: Record<string, unknown>): RoundContext | null {
  const mcp = context.mcp;
  if (!isRecord(mcp) || !mcp.roundId || mcp.method !== TOOLS_CALL || !("inputKey" in mcp)) return null;
  const keys = Array.isArray(mcp.inputKeys) ? (mcp.inputKeys as string[]) : [];
  return {
    roundId: String(mcp.roundId),
    inputKey: String(mcp.inputKey),
    params: mcp.params as PendingRound["params"],
    requestState: typeof mcp.requestState === "string" ? mcp.requestState : null,
    round: Number(mcp.round),
    inputRequests: isRecord(mcp.inputRequests)
      ? (mcp.inputRequests as Record<string, InputRequest>)
      : Object.fromEntries(keys.map((key) => [key, { method: "" }])),
    server: typeof mcp.server === "string" ? mcp.server : null,
    method: TOOLS_CALL,
  };
}

function requestOptions(options: InputRequiredOptions): RequestOptions {
  return { ...options.requestOptions, ...(options.signal ? { signal: options.signal } : {}) };
}

async function drive(
  client: InputRequiredClient,
  first: Record<string, unknown>,
  params: PendingRound["params"],
  roundsDone: number,
  hub: ReviewHubClient,
  queue: string,
  server: string | null,
  options: InputRequiredOptions,
): Promise<CallToolResult> {
  const maxRounds = options.maxRounds ?? DEFAULT_MAX_ROUNDS;
  let raw = first;
  let roundNo = roundsDone;
  for (let asked = recognizeInputRequired(raw); asked !== null; asked = recognizeInputRequired(raw)) {
    roundNo += 1;
    if (roundNo > maxRounds) throw new InputRoundsExceeded(params.name, maxRounds);
    const pending: PendingRound = {
      roundId: crypto.randomUUID(),
      params,
      requestState: asked.requestState,
      round: roundNo,
      inputRequests: asked.inputRequests,
      reviewhubIds: {},
      server,
      method: TOOLS_CALL,
    };
    if (Object.keys(asked.inputRequests).length === 0) {
      // State only: the server is working; come back after a short pause, carrying the state.
      await sleep(Math.min(50 * 2 ** (roundNo - 1), 1000), options.signal);
      if (options.signal?.aborted) throw abortReason(options.signal);
      raw = await retry(client, pending, null, options);
      continue;
    }
    const responses = await answers(pending, hub, queue, options);
    raw = await retry(client, pending, responses, options);
    await options.store?.discard(pending.roundId);
  }
  return completeResult(raw);
}

function retry(
  client: InputRequiredClient,
  pending: PendingRound,
  responses: Record<string, InputResponse> | null,
  options: InputRequiredOptions,
): Promise<Record<string, unknown>> {
  return callToolRaw(
    client,
    pending.params.name,
    pending.params.arguments,
    responses,
    pending.requestState,
    requestOptions(options),
  );
}

/** Post the round's elicitations (those not posted yet), record the round, and collect every answer. */
async function answers(
  pending: PendingRound,
  hub: ReviewHubClient,
  queue: string,
  options: InputRequiredOptions,
): Promise<Record<string, InputResponse>> {
  // Written ahead of posting: a crash between the two is repaired on resume, where posting again under the same
  // Idempotency-Keys returns the requests already made.
  await options.store?.save(pending);
  for (const [key, request] of Object.entries(pending.inputRequests)) {
    if (request.method !== "elicitation/create" || key in pending.reviewhubIds) continue;
    const body = requestBody(request.params as ElicitParams, {
      queue,
      context: { mcp: roundContext(pending, key) },
      priority: options.priority ?? 0,
    });
    try {
      const created = await hub.create({ ...body, idempotencyKey: `mcp-round:${pending.roundId}:${key}` });
      pending.reviewhubIds[key] = created.id;
    } catch (error) {
      if (!(error instanceof ReviewHubError)) throw error;
      options.logger?.warn(`ReviewHub could not take input ${key}; answering cancel: ${error.message}`);
    }
  }
  await options.store?.save(pending);

  const answered = await Promise.allSettled(
    Object.entries(pending.inputRequests).map(async ([key, request]): Promise<[string, InputResponse]> => {
      const requestId = pending.reviewhubIds[key];
      if (requestId !== undefined) {
        // A stopping process (aborted wait) keeps the request: resuming is the point of this module.
        const outcome = await waitForOutcome(hub, requestId, {
          timeoutMs: options.timeoutMs ?? null,
          ...(options.signal ? { signal: options.signal } : {}),
          withdrawOnAbort: false,
          ...(options.logger ? { logger: options.logger } : {}),
        });
        return [key, outcome];
      }
      if (request.method === "elicitation/create" || !request.method) return [key, { action: "cancel" }]; // never reached a reviewer
      if (!options.answerInputRequest) throw new InputRequestRefused(key, request.method, "no answerInputRequest given");
      return [key, await options.answerInputRequest(key, request)];
    }),
  );
  const failed = answered.find((outcome): outcome is PromiseRejectedResult => outcome.status === "rejected");
  if (failed) {
    if (!options.signal?.aborted) {
      for (const requestId of Object.values(pending.reviewhubIds)) await withdrawQuietly(hub, requestId);
    }
    throw failed.reason;
  }
  return Object.fromEntries(answered.map((outcome) => (outcome as PromiseFulfilledResult<[string, InputResponse]>).value));
}
