/**
 * ReviewHub for agents built on the official MCP TypeScript SDK, a peer dependency: an elicitation handler for the
 * `Client` of `@modelcontextprotocol/sdk` 1.x and of `@modelcontextprotocol/client` 2.x, and 2026-07-28
 * input-required rounds that survive a restart (through either generation's generic `request()`).
 */

export {
  ReviewHubElicitation,
  elicitationCapabilities,
  requestBody,
  sdkGeneration,
  toMcpResult,
  waitForOutcome,
  withdrawQuietly,
} from "./elicitation.js";
export type {
  ElicitParams,
  Logger,
  McpClient,
  McpElicitResult,
  McpRequestOptions,
  McpToolResult,
  ReviewHubElicitationOptions,
  ToolCall,
} from "./elicitation.js";
export {
  DEFAULT_MAX_ROUNDS,
  InputRequestRefused,
  InputRoundsExceeded,
  callToolRaw,
  completeResult,
  findPendingRounds,
  recognizeInputRequired,
  resolveInputRequired,
  resumeInputRequired,
  roundContext,
  withdrawRound,
} from "./input-required.js";
export type {
  InputRequest,
  InputRequiredClient,
  InputRequiredOptions,
  InputResponse,
  InputRound,
  PendingRound,
} from "./input-required.js";
export { JsonFileRoundStore } from "./round-store.js";
export type { RoundStore } from "./round-store.js";
