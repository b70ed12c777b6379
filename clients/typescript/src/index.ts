/**
 * ReviewHub's agent API for TypeScript: ask a human reviewer, get an MCP ElicitResult back.
 *
 *     const hub = new ReviewHubClient({ baseUrl: "http://127.0.0.1:8000", apiKey: "rh_..." });
 *     const result = await hub.elicit({ message: "Deploy?", requestedSchema, queue: "default" });
 *
 * Browser-safe: only `fetch`, `WebSocket` and WebCrypto. Receipts and the argument digest: `verifyReceipt`,
 * `argumentDigest` (docs/approvals.md). The MCP integrations are in `reviewhub-client/mcp`.
 */

export { ReviewHubClient, DEFAULT_URL } from "./client.js";
export type { CreateRequestOptions, ElicitOptions, ReviewHubClientOptions, WaitOptions } from "./client.js";
export {
  AuthenticationError,
  ConflictError,
  NotFoundError,
  RequestWithdrawn,
  ReviewHubError,
  ValidationError,
  WaitTimeout,
} from "./errors.js";
export type { ReviewHubErrorOptions } from "./errors.js";
export { OPEN_STATUSES, isOpen } from "./models.js";
export type {
  AgentEvent,
  ContentValue,
  ElicitAction,
  ElicitResult,
  ElicitationRequest,
  EventPage,
  RequestStatus,
  RequestedSchema,
} from "./models.js";
export {
  DECISION_META,
  RECEIPT_KEYS_PATH,
  RECEIPT_META,
  ReceiptInvalid,
  argumentDigest,
  canonicalBytes,
  contextCall,
  fetchReceiptKeys,
  requestDigest,
  verifyReceipt,
} from "./receipts.js";
export type { DigestObject, JsonWebKeySet, Receipt } from "./receipts.js";
export { STEP_UP_PREFIX, verifyStepUp } from "./step_up.js";
export type { StepUpApproval, StepUpEntry, StepUpOptions, StepUpReceipt } from "./step_up.js";
export type { WebSocketConstructor, WebSocketLike } from "./socket.js";
export { CLOSE_RESUME, CLOSE_TRY_AGAIN_LATER, RECONNECT_SPREAD_MS } from "./socket.js";
export { spreadDelay, spreadWindow } from "./timing.js";
