/** The agent API's JSON shapes, in MCP terms (`ElicitResult`). Times are ISO 8601 strings, as on the wire. */

import { isRecord } from "./errors.js";

export type RequestStatus = "pending" | "claimed" | "completed" | "expired" | "withdrawn";
export type ElicitAction = "accept" | "decline" | "cancel";
export type ContentValue = string | number | boolean | string[];

/** MCP ElicitResult: `content` only on an accepted form. `_meta` is ReviewHub's, passed on to MCP servers as
 * is: `reviewhub/decision` (the rule or quorum that decided, and the argument digest) and `reviewhub/receipt` (the
 * signed receipt, see `verifyReceipt`); docs/approvals.md. */
export interface ElicitResult {
  action: ElicitAction;
  content?: Record<string, ContentValue>;
  _meta?: Record<string, unknown>;
}

/** The flat MCP elicitation schema subset (`requestedSchema`). */
export interface RequestedSchema {
  type: "object";
  properties: Record<string, Record<string, unknown>>;
  required?: string[];
  [key: string]: unknown;
}

export interface ElicitationRequest {
  id: string;
  status: RequestStatus;
  queue: string;
  mode: "form" | "url";
  message: string;
  requestedSchema: RequestedSchema | null;
  url: string;
  elicitationId: string;
  priority: number;
  context: Record<string, unknown>;
  createdAt: string | null;
  deadline: string | null;
  closedAt: string | null;
  result: ElicitResult | null;
}

/** One entry of the agent's durable feed: `cursor` orders them, gap-free per agent. */
export interface AgentEvent {
  type: "completed" | "expired" | "withdrawn";
  id: string;
  cursor: number;
  status: RequestStatus;
  result?: ElicitResult | null;
}

export interface EventPage {
  events: AgentEvent[];
  /** Pass as `after` to continue. */
  cursor: number;
}

export const OPEN_STATUSES: ReadonlySet<string> = new Set(["pending", "claimed"]);

export function isOpen(request: Pick<ElicitationRequest, "status">): boolean {
  return OPEN_STATUSES.has(request.status);
}

/** The request as the API sent it, with the optional fields filled in like the Python client's model. */
export function toRequest(data: Record<string, unknown>): ElicitationRequest {
  const result = data.result as ElicitResult | null | undefined;
  return {
    id: String(data.id),
    status: String(data.status) as RequestStatus,
    queue: String(data.queue ?? ""),
    mode: data.mode === "url" ? "url" : "form",
    message: String(data.message ?? ""),
    requestedSchema: (data.requestedSchema as RequestedSchema | null | undefined) ?? null,
    url: typeof data.url === "string" ? data.url : "",
    elicitationId: typeof data.elicitationId === "string" ? data.elicitationId : "",
    priority: Number(data.priority ?? 0),
    context: (data.context as Record<string, unknown> | null | undefined) ?? {},
    createdAt: (data.createdAt as string | null | undefined) ?? null,
    deadline: (data.deadline as string | null | undefined) ?? null,
    closedAt: (data.closedAt as string | null | undefined) ?? null,
    result: result ? toElicitResult(result) : null,
  };
}

/** `action`, on accept `content`, and ReviewHub's `_meta` when it sent one: what an MCP peer expects back. */
export function toElicitResult(data: { action: string; content?: unknown; _meta?: unknown }): ElicitResult {
  const action = data.action as ElicitAction;
  const result: ElicitResult =
    action === "accept" && data.content != null
      ? { action, content: data.content as Record<string, ContentValue> }
      : { action };
  if (isRecord(data._meta)) result._meta = data._meta;
  return result;
}

