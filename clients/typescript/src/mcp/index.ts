/**
 * ReviewHub for agents built on the official MCP TypeScript SDK (`@modelcontextprotocol/sdk`, a peer dependency):
 * an elicitation handler for its `Client`, and 2026-07-28 input-required rounds that survive a restart.
 */

export {
  ReviewHubElicitation,
  elicitationCapabilities,
  requestBody,
  toMcpResult,
  waitForOutcome,
  withdrawQuietly,
} from "./elicitation.js";
export type { ElicitParams, Logger, ReviewHubElicitationOptions, ToolCall } from "./elicitation.js";
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
export type { InputRequest, InputRequiredOptions, InputResponse, InputRound, PendingRound } from "./input-required.js";
export { JsonFileRoundStore } from "./round-store.js";
export type { RoundStore } from "./round-store.js";
