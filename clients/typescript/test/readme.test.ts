/** Every `ts` block of this package's README and of the TypeScript section of the MCP guide (docs/mcp.md)
 * type-checks against the built package and runs as written against a live ReviewHub, while a scripted reviewer
 * answers. */

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdir, readFile, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { after, before, test } from "node:test";

import ts from "typescript";

import { CLIENT_DIR, LiveServer, REPO, Reviewer } from "./harness.js";

// Inside the package, so that `reviewhub-client` resolves to it (self-reference) and its node_modules are found.
const SNIPPETS = join(CLIENT_DIR, "dist-test", "snippets");

function blocks(markdown: string): string[] {
  return [...markdown.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((match) => match[1] ?? "");
}

/** The `## The TypeScript client` section of the MCP guide, up to the next second-level heading. */
function typescriptSection(markdown: string): string {
  const start = markdown.search(/^## The TypeScript client\b/m);
  assert.ok(start >= 0, "docs/mcp.md has a ## The TypeScript client section");
  const rest = markdown.slice(start + 3);
  const end = rest.search(/^## /m);
  return end < 0 ? rest : rest.slice(0, end);
}

const snippets: { name: string; code: string }[] = [];

/** Type-check and compile the snippets, as a user's `tsc` would see them. */
function compile(files: string[]): void {
  const program = ts.createProgram(files, {
    target: ts.ScriptTarget.ES2022,
    module: ts.ModuleKind.NodeNext,
    moduleResolution: ts.ModuleResolutionKind.NodeNext,
    strict: true,
    skipLibCheck: true,
    types: ["node"],
    outDir: SNIPPETS,
    rootDir: SNIPPETS,
  });
  const diagnostics = [...ts.getPreEmitDiagnostics(program), ...program.emit().diagnostics];
  const messages = diagnostics.map((diagnostic) => {
    const where = diagnostic.file?.fileName.replace(SNIPPETS + "/", "") ?? "";
    return `${where}: ${ts.flattenDiagnosticMessageText(diagnostic.messageText, "\n")}`;
  });
  assert.deepEqual(messages, []);
}

function runSnippet(file: string, env: NodeJS.ProcessEnv): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [file], { cwd: CLIENT_DIR, env, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 40_000);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

let live: LiveServer;

before(async () => {
  const own = await readFile(join(CLIENT_DIR, "README.md"), "utf8");
  const guide = await readFile(join(REPO, "docs", "mcp.md"), "utf8");
  for (const [n, code] of blocks(own).entries()) snippets.push({ name: `package-readme-${n + 1}`, code });
  for (const [n, code] of blocks(typescriptSection(guide)).entries()) snippets.push({ name: `mcp-guide-${n + 1}`, code });
  await rm(SNIPPETS, { recursive: true, force: true });
  await mkdir(SNIPPETS, { recursive: true });
  live = await LiveServer.start();
});

after(async () => {
  await live?.close();
});

test("the READMEs have TypeScript examples, and they type-check", { timeout: 60_000 }, async () => {
  assert.ok(snippets.filter((snippet) => snippet.name.startsWith("package")).length >= 2);
  assert.ok(snippets.some((snippet) => snippet.name.startsWith("mcp-guide")));
  const files = [];
  for (const snippet of snippets) {
    const file = join(SNIPPETS, `${snippet.name}.ts`);
    await writeFile(file, snippet.code);
    files.push(file);
  }
  compile(files);
});

test("each README example runs as written against a live ReviewHub", { timeout: 120_000 }, async () => {
  const reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
  const answering = reviewer.answerAll("default");
  try {
    for (const snippet of snippets) {
      const env = { ...process.env, REVIEWHUB_URL: live.url, REVIEWHUB_AGENT_KEY: live.fixture.agentKey };
      const { code, stdout, stderr } = await runSnippet(join(SNIPPETS, `${snippet.name}.js`), env);
      assert.equal(code, 0, `${snippet.name} failed:\n${stdout}\n${stderr}`);
      assert.match(stdout, /accept/, `${snippet.name} printed no answer:\n${stdout}`);
    }
  } finally {
    await answering.stop();
  }
  assert.equal(answering.seen.length, snippets.length); // each example asked exactly one question
});
