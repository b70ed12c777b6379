/** The SDK is a peer: an application on `@modelcontextprotocol/client` 2.x alone, with no
 * `@modelcontextprotocol/sdk` to be found, loads `reviewhub-client/mcp` and installs the handler. */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { join } from "node:path";
import { test } from "node:test";

import { CLIENT_DIR } from "./harness.js";

const FIXTURES = join(CLIENT_DIR, "dist-test", "fixtures");

test("reviewhub-client/mcp loads and installs on SDK 2.x without SDK 1.x installed", { timeout: 30_000 }, async () => {
  const child = spawn(process.execPath, ["--import", join(FIXTURES, "hide-sdk-v1.js"), join(FIXTURES, "v2-only-agent.js")], {
    cwd: CLIENT_DIR,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  assert.equal(code, 0, stderr);
  const found = JSON.parse(stdout.trim().split("\n").pop() ?? "{}") as Record<string, unknown>;
  assert.equal(found.sdkV1Hidden, true);
  assert.equal(found.generation, 2);
  assert.equal(found.installed, true);
  assert.match(String(found.v1Refusal), /1\.x Client, but that package cannot be imported/);
});
