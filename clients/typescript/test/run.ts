/**
 * `npm test`: prepare one ReviewHub database for the run (Django starts once), then node's test runner over every
 * compiled test file. Each file starts its own server (uvicorn) on a free loopback port; the whole run is bounded.
 */

import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

import { prepareFixture, writeJson } from "./harness.js";

// A guard against a hang, not a speed target: a loaded machine runs the suite slower, never red.
const RUN_LIMIT_MS = 900_000;

const here = dirname(fileURLToPath(import.meta.url));
const dir = await mkdtemp(join(tmpdir(), "reviewhub-ts-"));
let code = 1;
try {
  const fixturePath = join(dir, "fixture.json");
  await writeJson(fixturePath, await prepareFixture(dir));
  const files = readdirSync(here)
    .filter((name) => name.endsWith(".test.js"))
    .sort()
    .map((name) => join(here, name));
  // Node 20 has a WebSocket only behind this flag (22 has it by default); the test processes inherit it.
  const nodeOptions = typeof WebSocket === "undefined" ? "--experimental-websocket" : "";
  const child = spawn(process.execPath, ["--test", "--test-concurrency=2", "--test-reporter=spec", ...files], {
    stdio: "inherit",
    env: {
      ...process.env,
      RH_TS_FIXTURE: fixturePath,
      NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ""} ${nodeOptions}`.trim(),
    },
  });
  const limit = setTimeout(() => {
    console.error(`test run exceeded ${RUN_LIMIT_MS / 1000} s; stopping it`);
    child.kill("SIGKILL");
  }, RUN_LIMIT_MS);
  code = await new Promise<number>((resolve) => child.on("exit", (exit) => resolve(exit ?? 1)));
  clearTimeout(limit);
} finally {
  await rm(dir, { recursive: true, force: true });
}
process.exit(code);
