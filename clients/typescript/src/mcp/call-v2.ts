/**
 * One `tools/call` of the input-required driver on an SDK 2.x `Client` (`@modelcontextprotocol/client`), through its
 * generic `request()` told to leave input-required rounds to the caller, plus two things `request()` does not do:
 *
 * - Read a result without `resultType`. On a 2026-07-28 session, 2.x decodes every result before any result schema
 *   runs, and refuses one without `resultType` (SdkError INVALID_RESULT, "missing required resultType"). The spec
 *   says a client reads such a result as complete, and some servers answer the last call of a round trip that way.
 *   A `ResultTap` on the client's transport keeps the result of each of the driver's own requests as it arrived; when
 *   2.x refuses a result that did arrive, the driver reads the kept one (the Python driver's `send_unvalidated`).
 * - Send SEP-2243 `Mcp-Param-*` headers (param-headers.ts) for tools whose `inputSchema` marks arguments with
 *   `x-mcp-header`, as `callTool()` does. The schemas come from the client's `listTools()`: listed once per client
 *   when first needed, and again when the server answers HEADER_MISMATCH (the schema changed), before one retry.
 */

import type { RequestOptions } from "@modelcontextprotocol/sdk/shared/protocol.js";

import { isRecord } from "../errors.js";
import type { InputRequiredClient } from "./input-required.js";
import { paramHeaderDeclarations, paramHeaders, type ParamHeaderDeclaration } from "./param-headers.js";

const TOOLS_CALL = "tools/call";
/** SEP-2243 HeaderMismatch: the server found an `Mcp-*` header disagreeing with the body. */
const HEADER_MISMATCH = -32020;

/** A Standard Schema that accepts any value as it is: 2.x checks a `request()` result with one. */
const WIRE_RESULT = {
  "~standard": { version: 1, vendor: "reviewhub-client", validate: (value: unknown) => ({ value }) },
} as const;

/** `tools/call` params as the driver sends them. */
export interface ToolCallParams {
  name: string;
  arguments?: Record<string, unknown>;
  [key: string]: unknown;
}

type JsonRpcId = string | number;

interface WireMessage {
  id?: JsonRpcId | null;
  result?: unknown;
  [key: string]: unknown;
}

/** 2.x's `RequestOptions` add per-request HTTP headers to 1.x's. */
type SendOptions = RequestOptions & { headers?: Record<string, string> };

/** The part of a 2.x transport the tap sits on. */
interface WireTransport {
  send(message: WireMessage, options?: { headers?: Record<string, string> }): Promise<void>;
  onmessage?: ((message: WireMessage, extra?: unknown) => void) | undefined;
}

/** What the driver uses of a 2.x `Client` beyond `InputRequiredClient`. */
interface ClientV2 extends InputRequiredClient {
  readonly transport: WireTransport | undefined;
  getProtocolEra(): "modern" | "legacy" | undefined;
  listTools(
    params?: undefined,
    options?: RequestOptions & { cacheMode?: "use" | "refresh" },
  ): Promise<{ tools: { name: string; inputSchema?: unknown }[] }>;
}

/** `tools/call` on a 2.x client, its result kept as the wire object. */
export async function callToolV2(
  client: InputRequiredClient,
  params: ToolCallParams,
  options: SendOptions,
): Promise<Record<string, unknown>> {
  const v2 = client as ClientV2;
  // SEP-2243 headers belong to 2026-07-28 sessions; a transport without per-request headers ignores them.
  const mirror = v2.getProtocolEra() === "modern";
  const send = async (): Promise<Record<string, unknown>> => {
    const declarations = mirror ? ((await toolHeaders(v2, options, false)).get(params.name) ?? []) : [];
    // A fresh object for every request: the tap knows the request by it.
    const headers = { ...options.headers, ...paramHeaders(declarations, params.arguments) };
    return await requestWire(v2, params, { ...options, headers });
  };
  try {
    return await send();
  } catch (error) {
    if (!mirror || !isRecord(error) || error.code !== HEADER_MISMATCH) throw error;
    await toolHeaders(v2, options, true); // the schema we had is stale: list again, then retry once
    return await send();
  }
}

async function requestWire(
  client: ClientV2,
  params: ToolCallParams,
  options: SendOptions & { headers: Record<string, string> },
): Promise<Record<string, unknown>> {
  const capture = client.transport ? ResultTap.on(client.transport).expect(options.headers) : undefined;
  try {
    const sendOptions = { ...options, allowInputRequired: true };
    return (await client.request({ method: TOOLS_CALL, params }, WIRE_RESULT, sendOptions)) as Record<string, unknown>;
  } catch (error) {
    // A result came back and 2.x refused to decode it: read it as sent (no resultType means complete).
    if (capture?.result !== undefined && !options.signal?.aborted) return capture.result;
    throw error;
  } finally {
    capture?.release();
  }
}

// --- tool schemas ----------------------------------------------------------------------------------------------

/** Per client: each listed tool's header declarations, null where its marks are invalid (no headers then). */
const listedTools = new WeakMap<ClientV2, Promise<Map<string, ParamHeaderDeclaration[] | null>>>();

function toolHeaders(
  client: ClientV2,
  options: SendOptions,
  refresh: boolean,
): Promise<Map<string, ParamHeaderDeclaration[] | null>> {
  let table = listedTools.get(client);
  if (table === undefined || refresh) {
    // Shared by every call on the client, so no caller's signal ends it. 2.x serves a fresh listing from its cache.
    const listing: Promise<Map<string, ParamHeaderDeclaration[] | null>> = client
      .listTools(undefined, {
        ...(options.timeout !== undefined ? { timeout: options.timeout } : {}),
        ...(refresh ? { cacheMode: "refresh" } : {}),
      })
      .then(({ tools }) => new Map(tools.map((tool) => [tool.name, paramHeaderDeclarations(tool.inputSchema)])))
      .catch(() => {
        // This call goes without custom headers (as for a tool never listed); the next one lists again.
        if (listedTools.get(client) === listing) listedTools.delete(client);
        return new Map();
      });
    table = listing;
    listedTools.set(client, table);
  }
  return table;
}

// --- the wire result -------------------------------------------------------------------------------------------

interface Capture {
  /** The result the server sent, once it has arrived. */
  result?: Record<string, unknown>;
  release(): void;
}

/**
 * Keeps, off one transport, the results of the requests the driver sends. Each such request goes out with a
 * `headers` object made for it: the tap's `send` learns the request's JSON-RPC id from it, and its `onmessage` keeps
 * the result that comes back under that id before handing the message on to the client, unchanged. Installed once
 * per transport (a transport serves one connection); other traffic passes through untouched.
 */
class ResultTap {
  private static readonly taps = new WeakMap<WireTransport, ResultTap>();
  private readonly expected = new WeakMap<object, Capture & { id?: JsonRpcId }>();
  private readonly awaiting = new Map<JsonRpcId, Capture>();

  static on(transport: WireTransport): ResultTap {
    let tap = ResultTap.taps.get(transport);
    if (tap === undefined) {
      tap = new ResultTap(transport);
      ResultTap.taps.set(transport, tap);
    }
    return tap;
  }

  private constructor(transport: WireTransport) {
    const send = transport.send.bind(transport);
    transport.send = (message, options) => {
      const capture = options?.headers ? this.expected.get(options.headers) : undefined;
      if (capture && (typeof message.id === "string" || typeof message.id === "number")) {
        capture.id = message.id;
        this.awaiting.set(message.id, capture);
      }
      return send(message, options);
    };
    const deliver = transport.onmessage;
    transport.onmessage = (message, extra) => {
      const id = message.id;
      const capture = typeof id === "string" || typeof id === "number" ? this.awaiting.get(id) : undefined;
      if (capture && isRecord(message.result)) capture.result = message.result;
      deliver?.(message, extra);
    };
  }

  /** Watch for the request sent with `headers`; `release()` when done with it. */
  expect(headers: Record<string, string>): Capture {
    const capture: Capture & { id?: JsonRpcId } = {
      release: () => {
        this.expected.delete(headers);
        if (capture.id !== undefined) this.awaiting.delete(capture.id);
      },
    };
    this.expected.set(headers, capture);
    return capture;
  }
}
