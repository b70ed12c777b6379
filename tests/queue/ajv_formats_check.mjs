// Whether the official TypeScript MCP SDK accepts a string answer of a given format: the check `Server.elicitInput`
// runs on accepted content, through the SDK's own `AjvJsonSchemaValidator` (ajv + ajv-formats, configured by the
// SDK). The SDK is the one the TypeScript client installs (`cd clients/typescript && npm ci`).
//
// Protocol: first line out {"ready": true, "sdk": version}; then, per JSON line {"format", "value"} in, one JSON
// line {"accepted", "error"} out. tests/queue/test_answer_formats_sdks.py drives it.
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath, pathToFileURL } from "node:url";

const clientDir = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "clients", "typescript");
const sdkDir = join(clientDir, "node_modules", "@modelcontextprotocol", "sdk");

let sdkPackage;
try {
  sdkPackage = JSON.parse(readFileSync(join(sdkDir, "package.json"), "utf8"));
} catch (error) {
  console.error(`@modelcontextprotocol/sdk is not installed in ${clientDir}/node_modules (${error.message}).`);
  console.error("Install it with `make clients/typescript/node_modules/.installed` (npm ci in clients/typescript).");
  process.exit(2);
}
// The ESM build, as the (ESM) TypeScript client loads it, found through the package's own export map.
const entry = sdkPackage.exports["./validation/ajv"].import;
const { AjvJsonSchemaValidator } = await import(pathToFileURL(join(sdkDir, entry)).href);

const validator = new AjvJsonSchemaValidator();
const validatorsByFormat = new Map();

function check(format, value) {
  if (!validatorsByFormat.has(format)) {
    // The requestedSchema ReviewHub forwards for a one-question form asking for this format.
    const requestedSchema = {
      type: "object",
      properties: { answer: { type: "string", format } },
      required: ["answer"],
    };
    validatorsByFormat.set(format, validator.getValidator(requestedSchema));
  }
  const result = validatorsByFormat.get(format)({ answer: value });
  return { accepted: result.valid, error: result.errorMessage ?? null };
}

process.stdout.write(JSON.stringify({ ready: true, sdk: sdkPackage.version }) + "\n");
for await (const line of createInterface({ input: process.stdin })) {
  const { format, value } = JSON.parse(line);
  process.stdout.write(JSON.stringify(check(format, value)) + "\n");
}
