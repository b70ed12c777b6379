/**
 * SEP-2243 custom headers (MCP 2026-07-28, Streamable HTTP). A tool's `inputSchema` may mark a property with
 * `"x-mcp-header": "Region"`; a `tools/call` of that tool then also carries the argument in an `Mcp-Param-Region`
 * header, so that an intermediary can route on it without reading the body. The transport specification's rules:
 *
 * - a mark sits on a property reached from the root through `properties` alone, at any depth; a mark anywhere else
 *   (under `items`, `additionalProperties`, `anyOf`, `if`, `$defs`, ...), a name that is not an RFC 9110 token, two
 *   names equal but for case, or a mark on a property whose type is not `string`, `integer` or `boolean` makes the
 *   tool definition invalid (a client excludes it; no header is sent for it);
 * - a null or absent argument sends no header;
 * - strings go as they are, integers in decimal, booleans as `true`/`false`;
 * - a value that is not plain visible ASCII (0x20-0x7E), has leading or trailing whitespace, or already looks like
 *   the sentinel goes as `=?base64?{Base64 of its UTF-8 bytes}?=`.
 *
 * SDK 2.x `Client.callTool()` sends these itself, but does not export how; the input-required driver sends its calls
 * through `request()`, so it builds them here.
 */

export const MCP_PARAM_PREFIX = "Mcp-Param-";

/** One marked property: where its value sits in `arguments`, and the header it goes in. */
export interface ParamHeaderDeclaration {
  path: string[];
  header: string;
}

const MARK = "x-mcp-header";
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const MARKABLE_TYPES = new Set(["string", "integer", "boolean"]);
// Keywords whose values are data, not subschemas: a key spelled `x-mcp-header` inside them marks nothing.
const DATA_KEYWORDS = new Set(["const", "default", "enum", "examples", MARK]);
const SENTINEL_PREFIX = "=?base64?";
const SENTINEL_SUFFIX = "?=";

class InvalidMark extends Error {}

/** The header declarations of a tool's `inputSchema` (empty when it marks nothing), or null when a mark breaks a
 * rule: the tool definition is invalid and none of its headers can be sent. */
export function paramHeaderDeclarations(inputSchema: unknown): ParamHeaderDeclaration[] | null {
  const found: ParamHeaderDeclaration[] = [];
  const seen = new Set<string>();
  const visit = (node: unknown, path: string[], reachable: boolean): void => {
    if (Array.isArray(node)) {
      for (const item of node) visit(item, path, false);
      return;
    }
    if (node === null || typeof node !== "object") return;
    const schema = node as Record<string, unknown>;
    if (MARK in schema) {
      const header = schema[MARK];
      if (!reachable || path.length === 0) throw new InvalidMark();
      if (typeof header !== "string" || !TOKEN.test(header)) throw new InvalidMark();
      if (typeof schema.type !== "string" || !MARKABLE_TYPES.has(schema.type)) throw new InvalidMark();
      if (seen.has(header.toLowerCase())) throw new InvalidMark();
      seen.add(header.toLowerCase());
      found.push({ path, header });
    }
    for (const [key, value] of Object.entries(schema)) {
      if (DATA_KEYWORDS.has(key)) continue;
      if (key === "properties" && value !== null && typeof value === "object" && !Array.isArray(value)) {
        for (const [name, child] of Object.entries(value)) visit(child, [...path, name], reachable);
      } else {
        visit(value, path, false); // every other subschema is off the `properties` chain
      }
    }
  };
  try {
    visit(inputSchema, [], true);
  } catch (error) {
    if (error instanceof InvalidMark) return null;
    throw error;
  }
  return found;
}

/** The `Mcp-Param-*` headers of one call with `args`. */
export function paramHeaders(
  declarations: readonly ParamHeaderDeclaration[],
  args: Record<string, unknown> | undefined,
): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const { path, header } of declarations) {
    let value: unknown = args;
    for (const key of path) value = isObject(value) ? value[key] : undefined;
    const text = headerText(value);
    if (text !== null) headers[`${MCP_PARAM_PREFIX}${header}`] = encodeParamValue(text);
  }
  return headers;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object";
}

/** A primitive argument as header text; null (no header) for null, absent, or a value no header can carry. */
function headerText(value: unknown): string | null {
  if (typeof value === "string") return value;
  if (typeof value === "boolean") return value ? "true" : "false";
  if (typeof value === "number" && Number.isFinite(value)) {
    return Number.isInteger(value) && !Number.isSafeInteger(value) ? null : String(value);
  }
  return null;
}

/** A header value: as it is when it is plain visible ASCII without surrounding whitespace, else the sentinel. */
export function encodeParamValue(value: string): string {
  let plain = value === value.trim() && !(value.startsWith(SENTINEL_PREFIX) && value.endsWith(SENTINEL_SUFFIX));
  for (let index = 0; plain && index < value.length; index += 1) {
    const code = value.charCodeAt(index);
    plain = code >= 0x20 && code <= 0x7e;
  }
  if (plain) return value;
  let binary = "";
  for (const byte of new TextEncoder().encode(value)) binary += String.fromCharCode(byte);
  return `${SENTINEL_PREFIX}${btoa(binary)}${SENTINEL_SUFFIX}`;
}
