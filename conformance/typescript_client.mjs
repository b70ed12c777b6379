// Client under test for @modelcontextprotocol/conformance: ReviewHub's TypeScript MCP client (clients/typescript,
// built to dist/) on the SDK 2.x `Client` (@modelcontextprotocol/client), against the suite's scenario server.
//
//     node conformance/typescript_client.mjs driver|handler <server-url>
//
// `driver` calls every tool through `resolveInputRequired` (rounds driven by hand, `callToolRaw`); `handler`
// through the SDK's own `client.callTool()`, whose input-required loop hands each elicitation to the installed
// `ReviewHubElicitation`. Either way each question goes to a reviewer: here `AutoReviewer`, a stand-in for
// `ReviewHubClient` that accepts every question at once (the suite checks the MCP wire).

import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const TS = join(dirname(fileURLToPath(import.meta.url)), "..", "clients", "typescript");
const load = (path) => import(pathToFileURL(join(TS, path)).href);
const { Client, StreamableHTTPClientTransport } = await load(
  "node_modules/@modelcontextprotocol/client-v2/dist/index.mjs",
);
const { ReviewHubElicitation, callToolRaw, elicitationCapabilities, resolveInputRequired } = await load(
  "dist/mcp/index.js",
);

const QUEUE = "conformance";
const SAMPLE = { boolean: true, string: "ok", number: 1, integer: 1 };

/** The calls the handler and driver make on a `ReviewHubClient`, answered at once with "accept" and content
 * filled from the requested schema. `onQuestion` runs (once) while a question is open. */
class AutoReviewer {
  questions = new Map();
  onQuestion = null;

  async create(body) {
    const id = crypto.randomUUID();
    this.questions.set(id, body);
    if (this.onQuestion) {
      const hook = this.onQuestion;
      this.onQuestion = null;
      await hook();
    }
    return { id, status: "pending" };
  }

  async wait(id) {
    const properties = this.questions.get(id)?.requestedSchema?.properties ?? {};
    const content = Object.fromEntries(Object.entries(properties).map(([key, spec]) => [key, SAMPLE[spec.type] ?? "ok"]));
    return { action: "accept", content };
  }

  async cancel(id) {
    this.questions.delete(id);
  }

  async completeUrl() {}

  async listRequests() {
    return [];
  }
}

function argumentsFor(schema) {
  const properties = schema?.properties ?? {};
  return Object.fromEntries((schema?.required ?? []).map((key) => [key, SAMPLE[properties[key]?.type] ?? "ok"]));
}

async function main(mode, url) {
  const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? "";
  const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT || "{}");
  const reviewer = new AutoReviewer();
  const client = new Client(
    { name: "reviewhub-conformance", version: "1.0.0" },
    { capabilities: elicitationCapabilities, versionNegotiation: { mode: "auto" } },
  );
  new ReviewHubElicitation(reviewer, { queue: QUEUE }).install(client);
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const call = (name, args) =>
    mode === "driver" ? resolveInputRequired(client, name, args, reviewer, QUEUE) : client.callTool({ name, arguments: args });
  try {
    if (scenario === "sep-2322-client-request-state") {
      // A call made while another call's round is open carries none of that round's state.
      reviewer.onQuestion = async () => void (await callToolRaw(client, "test_mrtr_unrelated", {}));
      for (const name of ["test_mrtr_echo_state", "test_mrtr_no_state", "test_mrtr_no_result_type"]) {
        console.log(name, JSON.stringify(await call(name, {})));
      }
    } else {
      const { tools } = await client.listTools();
      const calls = context.toolCalls ?? tools.map((tool) => ({ name: tool.name, arguments: argumentsFor(tool.inputSchema) }));
      for (const { name, arguments: args } of calls) {
        let result;
        try {
          result = await call(name, args ?? {});
        } catch (error) {
          if (typeof error?.code !== "number") throw error; // a JSON-RPC error answer, not an SDK failure
          console.log(name, "refused:", String(error)); // some scenario servers only list their tools
          continue;
        }
        console.log(name, result.isError ? "isError" : "ok");
      }
    }
  } finally {
    await client.close();
  }
  console.log("done"); // conformance/run.py tells a finished client from one that crashed
}

const [mode, url] = process.argv.slice(2);
if (!["driver", "handler"].includes(mode) || !url) {
  console.error("usage: node conformance/typescript_client.mjs driver|handler <server-url>");
  process.exit(2);
}
await main(mode, url);
