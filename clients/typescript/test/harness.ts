/**
 * A live ReviewHub for the tests: a uvicorn process on a free loopback port, on a SQLite database of its own,
 * made once per run through the management commands (`migrate`, `create_agent`, `create_reviewer --token`),
 * and a scripted reviewer that answers through the reviewer API. Nothing here mocks ReviewHub.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { copyFile, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export const CLIENT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..");
export const REPO = resolve(CLIENT_DIR, "../..");
export const PYTHON =
  process.env.RH_PYTHON ?? (existsSync(join(REPO, ".venv/bin/python")) ? join(REPO, ".venv/bin/python") : "python3");
export const QUEUES = ["default", "socket", "fallback", "restart", "forms", "urls", "cancel", "rounds", "misc", "ruled", "gateway"];

/** A request's digest computed by the server's Python (`rules.facts.request_digest`), over text and numbers where
 * JSON canonical forms part ways: non-ASCII and astral characters, keys that sort differently by code point and by
 * UTF-16 unit, escapes, -0, exponents, an integer past 2**53. */
export interface DigestSample {
  message: string;
  requestedSchema: Record<string, unknown> | null;
  context: Record<string, unknown>;
  digest: string;
}

export interface Fixture {
  /** A migrated SQLite database with the agents and the reviewer: copied for each server. */
  db: string;
  agentKey: string;
  otherAgentKey: string;
  reviewerToken: string;
  digestSample: DigestSample;
}

const SETUP = `
import io, json, os
from django.core.management import call_command

call_command("migrate", verbosity=0)

def last_line(*args):
    out = io.StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip().splitlines()[-1]

queues = os.environ["RH_TS_QUEUES"]
agent_key = last_line("create_agent", "ts-agent", "--queues", queues, "--create-queues")

from elicitation.models import Queue
from elicitation.queue import rules
from elicitation.queue.rules.facts import request_digest

# "ruled": small transfers decide themselves, so their results carry _meta["reviewhub/decision"].
rules.replace_policy(Queue.objects.get(slug="ruled"), {"rules": [{
    "name": "small transfers", "match": {"tool": "transfer", "arguments": {"amount": {"lte": 100}}},
    "action": "accept", "content": {"approve": True},
}]})
sample_context = {"mcp": {"server": "bank \\u2713", "tool": "transfer", "arguments": {
    "amount": 100, "fee": 0.5, "zero": -0.0, "huge": 1e21, "tiny": 1e-7, "big": 2**60, "pi": 3.141592653589793,
    "\\u00e9": "Zo\\u00eb", "\\U0001f600": "astral key", "\\ufb01": "ligature key", "a": [None, True, False, {"z": 1, "Z": 2}],
    "memo": "Miete \\U0001f3e0 \\"quoted\\" \\\\ back\\nnew\\u2028line\\u0001ctl\\u007f",
}}}
sample_schema = {"type": "object", "properties": {"approve": {"type": "boolean", "title": "Freigeben? \\u2705"}}}
sample_message = "\\u00dcberweisung 100 \\u20ac an Zo\\u00eb \\U0001f389"

print(json.dumps({
    "digestSample": {
        "message": sample_message, "requestedSchema": sample_schema, "context": sample_context,
        "digest": request_digest(sample_message, sample_schema, sample_context),
    },
    "agentKey": agent_key,
    "otherAgentKey": last_line("create_agent", "ts-other-agent", "--queues", queues),
    "reviewerToken": last_line("create_reviewer", "ts-reviewer", "--queues", queues, "--token"),
}))
`;

/** The environment of every ReviewHub process: the embedded deployment on one SQLite file, whatever the caller's
 * environment says about PostgreSQL or Redis. */
function reviewhubEnv(db: string, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    ...process.env,
    DJANGO_SETTINGS_MODULE: "reviewhub.settings",
    PYTHONUNBUFFERED: "1",
    DEBUG: "true",
    SQLITE_PATH: db,
    DATABASE_URL: "",
    REDIS_URL: "",
    PERIODIC_SWEEPS_IN_PROCESS: "false",
    LOG_LEVEL: "WARNING",
    // Short rechecks: a lost push or a revocation is found quickly.
    AGENT_SOCKET_RECHECK_SECONDS: "2",
    LONG_POLL_RECHECK_SECONDS: "1",
    ...extra,
  };
}

function run(command: string, args: string[], env: NodeJS.ProcessEnv, timeoutMs: number): Promise<string> {
  return new Promise((resolvePromise, reject) => {
    const child = spawn(command, args, { cwd: REPO, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.on("error", reject);
    child.on("close", (code) => {
      clearTimeout(timer);
      if (code === 0) resolvePromise(stdout);
      else reject(new Error(`${command} ${args.join(" ")} exited ${code}:\n${stderr.slice(-3000)}`));
    });
  });
}

/** Migrate a database and create the test's agents and reviewer (one Python process: Django starts once). */
export async function prepareFixture(dir: string): Promise<Fixture> {
  const db = join(dir, "template.sqlite3");
  const output = await run(
    PYTHON,
    ["manage.py", "shell", "-c", SETUP],
    reviewhubEnv(db, { RH_TS_QUEUES: QUEUES.join(",") }),
    120_000,
  );
  const lines = output.trim().split("\n");
  return { db, ...(JSON.parse(lines[lines.length - 1] ?? "{}") as Omit<Fixture, "db">) };
}

let prepared: Promise<Fixture> | null = null;

/** The run's fixture (made by run.ts), or one made now when a test file runs on its own. */
export function fixture(): Promise<Fixture> {
  if (prepared === null) {
    const path = process.env.RH_TS_FIXTURE;
    prepared = path
      ? readFile(path, "utf8").then((text) => JSON.parse(text) as Fixture)
      : mkdtemp(join(tmpdir(), "reviewhub-ts-")).then(prepareFixture);
  }
  return prepared;
}

/** Python run by ReviewHub's own code (`manage.py shell -c`) on a throwaway copy of the fixture database, for data
 * only the server can make (e.g. a receipt signed over real passkey assertions); its last output line, as JSON. */
export async function djangoShell<T>(code: string, env: Record<string, string> = {}): Promise<T> {
  const data = await fixture();
  const dir = await mkdtemp(join(tmpdir(), "reviewhub-ts-shell-"));
  try {
    const db = join(dir, "reviewhub.sqlite3");
    await copyFile(data.db, db);
    for (const suffix of ["-wal", "-shm"]) {
      if (existsSync(data.db + suffix)) await copyFile(data.db + suffix, db + suffix);
    }
    const output = await run(PYTHON, ["manage.py", "shell", "-c", code], reviewhubEnv(db, env), 120_000);
    const lines = output.trim().split("\n");
    return JSON.parse(lines[lines.length - 1] ?? "null") as T;
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export function freePort(): Promise<number> {
  return new Promise((resolvePromise, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      server.close(() => resolvePromise(typeof address === "object" && address ? address.port : 0));
    });
  });
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolvePromise) => setTimeout(resolvePromise, ms));
}

/** A result's answer, without ReviewHub's `_meta` (the receipt differs every time). */
export function answerOf<T extends { _meta?: unknown }>(result: T | null | undefined): Omit<T, "_meta"> | null | undefined {
  if (result == null) return result;
  const { _meta, ...answer } = result;
  return answer;
}

/** Poll `check` until it returns something truthy; fail after `timeoutMs`. */
export async function eventually<T>(check: () => T | Promise<T>, what: string, timeoutMs = 20_000): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as NonNullable<T>;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs} ms`);
    await delay(50);
  }
}

const running = new Set<ChildProcess>();
// However the test process ends (normally, or stopped by the runner), no server outlives it.
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
  process.once(signal, () => process.exit(128 + (signal === "SIGINT" ? 2 : signal === "SIGHUP" ? 1 : 15)));
}

/** One uvicorn process on its own copy of the fixture database. `restart()` keeps the port and the data; `env` is
 * added to the server's environment (e.g. `MCP_GATEWAY_UPSTREAMS`). */
export class LiveServer {
  private process: ChildProcess | null = null;
  private log = "";

  private constructor(
    readonly fixture: Fixture,
    readonly port: number,
    readonly db: string,
    private readonly dir: string,
    private readonly env: Record<string, string>,
  ) {}

  static async start(env: Record<string, string> = {}): Promise<LiveServer> {
    const data = await fixture();
    const dir = await mkdtemp(join(tmpdir(), "reviewhub-ts-server-"));
    const db = join(dir, "reviewhub.sqlite3");
    await copyFile(data.db, db);
    for (const suffix of ["-wal", "-shm"]) {
      if (existsSync(data.db + suffix)) await copyFile(data.db + suffix, db + suffix);
    }
    const server = new LiveServer(data, await freePort(), db, dir, env);
    await server.launch();
    return server;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  async launch(): Promise<void> {
    const args = ["-m", "uvicorn", "reviewhub.asgi:application", "--host", "127.0.0.1", "--port", String(this.port)];
    const child = spawn(PYTHON, args, { cwd: REPO, env: reviewhubEnv(this.db, this.env), stdio: ["ignore", "pipe", "pipe"] });
    this.process = child;
    running.add(child);
    child.once("exit", () => running.delete(child));
    child.stdout?.on("data", (chunk: Buffer) => (this.log = (this.log + chunk.toString()).slice(-8000)));
    child.stderr?.on("data", (chunk: Buffer) => (this.log = (this.log + chunk.toString()).slice(-8000)));
    // Wait for readiness, not a deadline: a loaded machine starts it later, and a server that cannot start exits
    // (the test runner's own timeout bounds a hang).
    for (;;) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error(`the server exited early:\n${this.log}`);
      try {
        await fetch(`${this.url}/healthz`, { signal: AbortSignal.timeout(1000) });
        return;
      } catch {
        await delay(100);
      }
    }
  }

  /** Die like a crashed process: no graceful shutdown. */
  async kill(): Promise<void> {
    await this.end("SIGKILL");
  }

  async stop(): Promise<void> {
    await this.end("SIGTERM");
  }

  async restart(): Promise<void> {
    await this.kill();
    await this.launch();
  }

  async close(): Promise<void> {
    await this.stop();
    await rm(this.dir, { recursive: true, force: true });
  }

  private async end(signal: NodeJS.Signals): Promise<void> {
    const child = this.process;
    if (child === null || child.exitCode !== null || child.signalCode !== null) return;
    const exited = new Promise<void>((resolvePromise) => child.once("exit", () => resolvePromise()));
    child.kill(signal);
    const timer = setTimeout(() => child.kill("SIGKILL"), 3000);
    await exited;
    clearTimeout(timer);
  }
}

export interface ReviewRequest {
  id: string;
  status: string;
  mode: "form" | "url";
  message: string;
  url: string;
  elicitationId: string;
  requestedSchema: { properties: Record<string, Record<string, unknown>>; required?: string[] } | null;
  context: Record<string, unknown>;
  questions: { id: string; kind: string }[];
}

/** A scripted reviewer: the reviewer API, as the browser pages use it, with a reviewer token. */
export class Reviewer {
  constructor(
    readonly baseUrl: string,
    private readonly token: string,
  ) {}

  async call(method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
    const response = await fetch(this.baseUrl + path, {
      method,
      headers: { Authorization: `Bearer ${this.token}`, ...(body === undefined ? {} : { "Content-Type": "application/json" }) },
      body: body === undefined ? undefined : JSON.stringify(body),
      signal: AbortSignal.timeout(10_000),
    });
    const text = await response.text();
    return { status: response.status, json: text ? JSON.parse(text) : null };
  }

  async claimNext(queue: string): Promise<ReviewRequest | null> {
    const { status, json } = await this.call("POST", `/api/v1/review/queues/${queue}/claim-next`);
    return status === 200 ? (json as ReviewRequest) : null;
  }

  /** Wait for the next request in `queue` and claim it. */
  nextRequest(queue: string, timeoutMs = 20_000): Promise<ReviewRequest> {
    return eventually(() => this.claimNext(queue), `a request in queue ${queue}`, timeoutMs);
  }

  async pending(queue: string): Promise<{ id: string; status: string }[]> {
    const { json } = await this.call("GET", `/api/v1/review/queues/${queue}/requests`);
    const rows = Array.isArray(json) ? json : ((json as { results?: unknown[] }).results ?? []);
    return rows as { id: string; status: string }[];
  }

  async respond(requestId: string, action: string, content?: Record<string, unknown>): Promise<void> {
    const { status, json } = await this.call("POST", `/api/v1/review/requests/${requestId}/respond`, {
      action,
      ...(content === undefined ? {} : { content }),
    });
    if (status !== 200) throw new Error(`respond ${requestId}: ${status} ${JSON.stringify(json)}`);
  }

  /** Claim, then respond. */
  async answer(requestId: string, action: string, content?: Record<string, unknown>): Promise<void> {
    const { status, json } = await this.call("POST", `/api/v1/review/requests/${requestId}/claim`);
    if (status !== 200) throw new Error(`claim ${requestId}: ${status} ${JSON.stringify(json)}`);
    await this.respond(requestId, action, content);
  }

  /** Answer every request arriving in `queue` with `decide(request)` until the returned function is called. */
  answerAll(
    queue: string,
    decide: (request: ReviewRequest) => { action: string; content?: Record<string, unknown> } = acceptWithDefaults,
  ): { seen: ReviewRequest[]; stop: () => Promise<void> } {
    const seen: ReviewRequest[] = [];
    let running = true;
    const loop = (async () => {
      while (running) {
        const request = await this.claimNext(queue).catch(() => null);
        if (request === null) {
          await delay(50);
          continue;
        }
        seen.push(request);
        const { action, content } = decide(request);
        await this.respond(request.id, action, content);
      }
    })();
    return {
      seen,
      stop: async () => {
        running = false;
        await loop;
      },
    };
  }
}

/** Accept a request with a valid value for every property of its schema (URL mode: accept, no content). */
export function acceptWithDefaults(request: ReviewRequest): { action: string; content?: Record<string, unknown> } {
  if (request.mode === "url" || !request.requestedSchema) return { action: "accept" };
  const content: Record<string, unknown> = {};
  for (const [name, property] of Object.entries(request.requestedSchema.properties)) {
    content[name] = sampleValue(property);
  }
  return { action: "accept", content };
}

function sampleValue(property: Record<string, unknown>): unknown {
  const options = (list: unknown): unknown[] => (Array.isArray(list) ? list : []);
  if (property.type === "boolean") return true;
  if (property.type === "number" || property.type === "integer") return (property.minimum as number | undefined) ?? 1;
  if (property.type === "array") {
    const items = (property.items ?? {}) as Record<string, unknown>;
    const first = options(items.enum)[0] ?? (options(items.anyOf)[0] as { const?: unknown } | undefined)?.const;
    return [first];
  }
  if (options(property.enum).length) return options(property.enum)[0];
  if (options(property.oneOf).length) return (options(property.oneOf)[0] as { const: unknown }).const;
  const samples: Record<string, string> = {
    email: "ops@example.com",
    uri: "https://example.com/",
    date: "2026-01-02",
    "date-time": "2026-01-02T03:04:05Z",
  };
  return samples[String(property.format)] ?? "ok";
}

export async function writeJson(path: string, value: unknown): Promise<void> {
  await writeFile(path, JSON.stringify(value));
}
