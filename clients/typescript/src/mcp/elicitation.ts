/**
 * Route an MCP client's elicitations to ReviewHub reviewers: the `Client` of `@modelcontextprotocol/sdk` 1.x or of
 * `@modelcontextprotocol/client` 2.x (either one a peer dependency; `install` tells them apart).
 *
 * - Form mode: a form request is posted to the queue with `context.mcp` = the MCP server's name, the tool and
 *   its arguments (when the call went through `callTool`/`toolCall`) and the JSON-RPC request id; the
 *   reviewer's answer comes back as the `ElicitResult` (content only on accept), with ReviewHub's `_meta` (the
 *   decision's digest and the signed receipt) for the MCP server to check.
 * - URL mode: a URL request is posted (keeping `elicitationId`); the server's
 *   `notifications/elicitation/complete` is forwarded to ReviewHub so the reviewer sees the flow finished.
 *
 * Policy (the Python bridge's): when no human answer can be had — ReviewHub unreachable or refusing the
 * request, the request withdrawn, or `timeoutMs` elapsed — the handler answers `cancel` ("dismissed without a
 * choice"); it never hangs the MCP session and never throws into it. A wait abandoned early (the timeout, the
 * server cancelling its elicitation, or the caller aborting the tool call) withdraws the ReviewHub request, so
 * no reviewer answers a question nobody will read.
 */

import type { ReviewHubClient } from "../client.js";
import { RequestWithdrawn, ReviewHubError, WaitTimeout } from "../errors.js";
import type { ContentValue } from "../models.js";
import { linkedController } from "../timing.js";

type SdkV1Types = typeof import("@modelcontextprotocol/sdk/types.js");

/** The 1.x SDK's schemas, when it is installed: 1.x registers handlers by schema, 2.x by method name. Loaded, not
 * imported, so an application on 2.x alone needs no 1.x, and one on 1.x gets the copy it uses itself. */
const sdkV1: SdkV1Types | null = await import("@modelcontextprotocol/sdk/types.js").catch(() => null);

const ELICIT = "elicitation/create";
const ELICITATION_COMPLETE = "notifications/elicitation/complete";

/** What the handler needs of an SDK `Client`, 1.x or 2.x: both are assignable to it. */
export interface McpClient {
  // The two generations' overloads differ (a schema or a method name first); `install` picks the right call.
  setRequestHandler(...args: any[]): unknown;
  setNotificationHandler(...args: any[]): unknown;
  callTool(...args: any[]): Promise<unknown>;
  getServerVersion(): { name: string } | undefined;
}

/** Which SDK a client comes from: 2.x's `Client` has the public `getProtocolEra()`, 1.x's does not. */
export function sdkGeneration(client: McpClient): 1 | 2 {
  return typeof (client as { getProtocolEra?: unknown }).getProtocolEra === "function" ? 2 : 1;
}

/** `elicitation/create` params, in both SDKs' shape. */
export type ElicitParams =
  | {
      mode?: "form";
      message: string;
      requestedSchema: { type: "object"; properties: Record<string, unknown>; required?: string[] };
      _meta?: Record<string, unknown>;
    }
  | { mode: "url"; message: string; url: string; elicitationId: string; _meta?: Record<string, unknown> };

/** The MCP ElicitResult the handler answers. */
export interface McpElicitResult {
  action: "accept" | "decline" | "cancel";
  content?: Record<string, ContentValue>;
  _meta?: Record<string, unknown>;
  [key: string]: unknown;
}

/** `callTool` options both SDKs take (`signal`, `timeout`, …). */
export interface McpRequestOptions {
  signal?: AbortSignal;
  timeout?: number;
  [key: string]: unknown;
}

/** An MCP tool result, as both SDKs return it. */
export interface McpToolResult {
  content: { type: string; [key: string]: unknown }[];
  isError?: boolean;
  structuredContent?: Record<string, unknown>;
  _meta?: Record<string, unknown>;
  [key: string]: unknown;
}

/** The capabilities a `Client` must declare for ReviewHub to answer both elicitation modes. */
export const elicitationCapabilities = { elicitation: { form: {}, url: {} } } as const;

export interface Logger {
  info(message: string, ...details: unknown[]): void;
  warn(message: string, ...details: unknown[]): void;
}

const quiet: Logger = { info: () => undefined, warn: () => undefined };

export interface ReviewHubElicitationOptions {
  /** The ReviewHub queue the questions go to. */
  queue: string;
  /** The MCP server's name shown to reviewers; defaults to the name the server announced. */
  serverName?: string;
  /** How long to wait for a human before answering `cancel` and withdrawing; absent waits until the
   * request closes (its deadline ends it with the queue's expiry outcome). */
  timeoutMs?: number | null;
  priority?: number;
  /** Seconds until a request expires. */
  expiresIn?: number;
  /** Extra context for every request; `mcp` is filled in by the handler. */
  context?: Record<string, unknown>;
  /** Where the handler says why it answered `cancel`. Default: warnings to the console. */
  logger?: Logger;
}

/** The second argument an SDK passes a request handler: 1.x's `extra`, or 2.x's context. */
interface HandlerExtra {
  signal?: AbortSignal;
  requestId?: string | number;
  mcpReq?: { signal?: AbortSignal; id?: string | number };
}

export interface ToolCall {
  name: string;
  arguments: Record<string, unknown>;
  /** Aborts when the caller gives the call up: the call's ReviewHub requests are withdrawn. */
  signal: AbortSignal;
}

/** The outcome of one posted request, in MCP shape: content only on accept, and ReviewHub's `_meta` as it came
 * (`reviewhub/decision`, `reviewhub/receipt`), so the MCP server can check what was approved. */
export function toMcpResult(result: { action: string; content?: unknown; _meta?: unknown }): McpElicitResult {
  const mcp: McpElicitResult =
    result.action === "accept" && result.content != null
      ? { action: "accept", content: result.content as McpElicitResult["content"] }
      : { action: result.action as McpElicitResult["action"] };
  if (typeof result._meta === "object" && result._meta !== null && !Array.isArray(result._meta)) {
    mcp._meta = result._meta as Record<string, unknown>;
  }
  return mcp;
}

/** Best effort: the request may have closed meanwhile, or ReviewHub be down. */
export async function withdrawQuietly(hub: ReviewHubClient, requestId: string, logger: Logger = quiet): Promise<void> {
  try {
    await hub.cancel(requestId);
  } catch (error) {
    logger.info(`could not withdraw ReviewHub request ${requestId}: ${String(error)}`);
  }
}

/** Wait for a posted request, answering `cancel` (and withdrawing) when no human answer can be had. An aborted
 * wait withdraws too, unless the caller keeps the request for a later resume, and rethrows the abort. */
export async function waitForOutcome(
  hub: ReviewHubClient,
  requestId: string,
  options: { timeoutMs?: number | null; signal?: AbortSignal; withdrawOnAbort?: boolean; logger?: Logger } = {},
): Promise<McpElicitResult> {
  const logger = options.logger ?? quiet;
  try {
    return toMcpResult(await hub.wait(requestId, { timeoutMs: options.timeoutMs ?? null, signal: options.signal }));
  } catch (error) {
    if (options.signal?.aborted) {
      if (options.withdrawOnAbort !== false) await withdrawQuietly(hub, requestId, logger);
      throw error;
    }
    if (error instanceof RequestWithdrawn) return { action: "cancel" };
    if (error instanceof WaitTimeout) {
      logger.info(`no answer to ReviewHub request ${requestId} in time; answering cancel`);
    } else {
      logger.warn(`lost ReviewHub request ${requestId}; answering cancel: ${String(error)}`);
    }
  }
  await withdrawQuietly(hub, requestId, logger);
  return { action: "cancel" };
}

/** The `POST /api/v1/requests` fields for one MCP elicitation. */
export function requestBody(
  params: ElicitParams,
  options: { queue: string; context: Record<string, unknown>; priority?: number; expiresIn?: number },
): Parameters<ReviewHubClient["create"]>[0] {
  const body: Parameters<ReviewHubClient["create"]>[0] = {
    queue: options.queue,
    message: params.message,
    context: options.context,
  };
  if (params.mode === "url") {
    body.mode = "url";
    body.url = params.url;
    if (params.elicitationId) body.elicitationId = params.elicitationId;
  } else {
    body.mode = "form";
    body.requestedSchema = params.requestedSchema as NonNullable<typeof body.requestedSchema>;
  }
  if (options.priority) body.priority = options.priority;
  if (options.expiresIn !== undefined) body.expiresIn = options.expiresIn;
  return body;
}

/**
 * The elicitation handler for an SDK `Client`: `new ReviewHubElicitation(hub, { queue }).install(client)`.
 * The client must declare the elicitation capability (`elicitationCapabilities`).
 */
export class ReviewHubElicitation {
  private readonly inFlight = new Set<ToolCall>();
  private readonly logger: Logger;

  constructor(
    readonly hub: ReviewHubClient,
    readonly options: ReviewHubElicitationOptions,
  ) {
    this.logger = options.logger ?? { info: () => undefined, warn: (...args) => console.warn(...args) };
  }

  /** Answer the client's `elicitation/create` requests through ReviewHub, and forward URL completions. Takes a
   * `Client` of either SDK generation (see `sdkGeneration`). */
  install(client: McpClient): this {
    const onRequest = (request: { params: ElicitParams }, extra?: HandlerExtra): Promise<McpElicitResult> => {
      // 1.x passes `extra.{signal, requestId}`; 2.x a context with `mcpReq.{signal, id}`.
      const signal = extra?.mcpReq?.signal ?? extra?.signal;
      const requestId = extra?.mcpReq?.id ?? extra?.requestId;
      return this.handle(request.params, {
        ...(signal ? { signal } : {}),
        ...(requestId !== undefined ? { requestId } : {}),
        client,
      });
    };
    const complete = async (notification: { params: { elicitationId: string } }): Promise<void> => {
      try {
        await this.hub.completeUrl({ elicitationId: notification.params.elicitationId });
      } catch (error) {
        this.logger.info(`could not report URL flow ${notification.params.elicitationId} complete: ${String(error)}`);
      }
    };
    if (sdkGeneration(client) === 2) {
      client.setRequestHandler(ELICIT, onRequest);
      client.setNotificationHandler(ELICITATION_COMPLETE, complete);
    } else {
      if (sdkV1 === null) {
        throw new Error("a @modelcontextprotocol/sdk 1.x Client, but that package cannot be imported from here");
      }
      client.setRequestHandler(sdkV1.ElicitRequestSchema, onRequest);
      client.setNotificationHandler(sdkV1.ElicitationCompleteNotificationSchema, complete);
    }
    return this;
  }

  /** One elicitation: post it, wait for the reviewer, answer in MCP shape. */
  async handle(
    params: ElicitParams,
    extra: { signal?: AbortSignal; requestId?: string | number; client?: McpClient } = {},
  ): Promise<McpElicitResult> {
    const call = this.currentCall();
    const body = requestBody(params, {
      queue: this.options.queue,
      context: { ...this.options.context, mcp: this.mcpContext(extra, call) },
      priority: this.options.priority ?? 0,
      ...(this.options.expiresIn === undefined ? {} : { expiresIn: this.options.expiresIn }),
    });
    // Either the server cancelling its request or the caller abandoning the tool call ends the wait.
    const abandoned = linkedController(extra.signal, call?.signal);
    try {
      let requestId: string;
      try {
        requestId = (await this.hub.create({ ...body, idempotencyKey: `mcp-elicit:${crypto.randomUUID()}` })).id;
      } catch (error) {
        if (!(error instanceof ReviewHubError)) throw error;
        this.logger.warn(`ReviewHub refused or could not take the elicitation; answering cancel: ${error.message}`);
        return { action: "cancel" };
      }
      return await waitForOutcome(this.hub, requestId, {
        timeoutMs: this.options.timeoutMs ?? null,
        signal: abandoned.signal,
        logger: this.logger,
      });
    } catch (error) {
      if (abandoned.signal.aborted) throw error; // nobody reads the answer; the request is withdrawn
      // A bug here must not become an error inside the MCP session: as if the human never answered.
      this.logger.warn(`ReviewHub elicitation handler failed; answering cancel: ${String(error)}`);
      return { action: "cancel" };
    } finally {
      abandoned.abort();
    }
  }

  /** `client.callTool(...)` with the tool named in every request it causes; aborting `options.signal`
   * withdraws them. */
  async callTool(
    client: McpClient,
    name: string,
    args: Record<string, unknown> = {},
    options: McpRequestOptions = {},
  ): Promise<McpToolResult> {
    const params = { name, arguments: args };
    return this.toolCall(
      name,
      args,
      async (signal) =>
        (sdkGeneration(client) === 2
          ? await client.callTool(params, { ...options, signal }) // 2.x: (params, options)
          : await client.callTool(params, undefined, { ...options, signal })) as McpToolResult, // 1.x: (params, resultSchema, options)
      options.signal,
    );
  }

  /** Run `body` as the tool call `name(args)`: elicitations arriving meanwhile carry it in their context. */
  async toolCall<T>(
    name: string,
    args: Record<string, unknown>,
    body: (signal: AbortSignal) => Promise<T>,
    signal?: AbortSignal,
  ): Promise<T> {
    const controller = linkedController(signal);
    const call: ToolCall = { name, arguments: { ...args }, signal: controller.signal };
    this.inFlight.add(call);
    try {
      return await body(controller.signal);
    } finally {
      this.inFlight.delete(call);
      if (!controller.signal.aborted) controller.abort();
    }
  }

  /** The tool call an elicitation belongs to: the only one in flight (requests arrive on the transport, not
   * in the caller's async context); unknown when several are. */
  currentCall(): ToolCall | undefined {
    return this.inFlight.size === 1 ? [...this.inFlight][0] : undefined;
  }

  private mcpContext(extra: { requestId?: string | number; client?: McpClient }, call: ToolCall | undefined): Record<string, unknown> {
    const mcp: Record<string, unknown> = {
      server: this.options.serverName ?? extra.client?.getServerVersion()?.name ?? null,
    };
    if (extra.requestId !== undefined) mcp.requestId = extra.requestId;
    if (call) {
      mcp.tool = call.name;
      mcp.arguments = call.arguments;
    }
    return mcp;
  }
}
