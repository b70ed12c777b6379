/**
 * What an MCP server checks on its own, without trusting the client in between (docs/approvals.md): the argument
 * digest a decision is bound to, and ReviewHub's signed receipt (`_meta["reviewhub/receipt"]`), verified offline
 * against the published JWK Set. WebCrypto only (`crypto.subtle`), so it runs in Node and in browsers alike.
 *
 *     const jwks = await fetchReceiptKeys("https://reviewhub.example.com"); // cache it (an hour)
 *     const digest = await argumentDigest({ message, requestedSchema, server: "bank", tool: "transfer", arguments });
 *     const receipt = await verifyReceipt(result._meta?.["reviewhub/receipt"], jwks, digest);
 */

import canonicalize from "canonicalize";

import { isRecord } from "./errors.js";

export const RECEIPT_META = "reviewhub/receipt";
export const DECISION_META = "reviewhub/decision";
export const RECEIPT_TYPE = "reviewhub-receipt+jwt";
export const RECEIPT_KEYS_PATH = "/.well-known/reviewhub-receipts.json";
const REQUIRED_CLAIMS = ["iss", "iat", "request", "digest", "action", "approvers"] as const;

/** The five members a digest covers; `server`, `tool` null and `arguments` {} when the call names none. */
export interface DigestObject {
  message: string;
  requestedSchema: Record<string, unknown> | null;
  server: unknown;
  tool: unknown;
  arguments: Record<string, unknown>;
}

export interface JsonWebKeySet {
  keys: (JsonWebKey & { kid?: string })[];
}

export interface Receipt {
  issuer: string;
  requestId: string;
  digest: string;
  action: string;
  /** Usernames of who decided; empty when a rule or a scripted queue did. */
  approvers: string[];
  /** The rule that answered, if one did. */
  rule: string | null;
  issuedAt: Date;
  kid: string;
  /** Every claim as signed. */
  claims: Record<string, unknown>;
}

/** The receipt cannot be trusted: bad signature, unknown key, wrong type, or not for the expected digest. */
export class ReceiptInvalid extends Error {
  override name = "ReceiptInvalid";
}

/** Python's `_first(a, ...) or _first(b, ...) or ...`, as the server reads a context: in each source the first key
 * present and not null gives its value; a falsy one (`""`, `0`, `false`, `{}`, `[]`) falls through to the next
 * source, and the last source's value stands even when falsy. */
function firstPresent(...candidates: [unknown, string[]][]): unknown {
  let value: unknown = null;
  for (const [source, keys] of candidates) {
    value = null;
    if (isRecord(source)) {
      const key = keys.find((name) => Object.hasOwn(source, name) && source[name] !== null && source[name] !== undefined);
      if (key !== undefined) value = source[key];
    }
    if (truthy(value)) return value;
  }
  return value;
}

function truthy(value: unknown): boolean {
  if (isRecord(value)) return Object.keys(value).length > 0;
  if (Array.isArray(value)) return value.length > 0;
  return Boolean(value);
}

/** `server`, `tool` and `arguments` read from a request's `context` the documented way (docs/approvals.md):
 * `context.mcp.*`, then `context.mcp.params.*` (tool and arguments), then the flat keys. */
export function contextCall(context: unknown): Pick<DigestObject, "server" | "tool" | "arguments"> {
  if (!isRecord(context)) return { server: null, tool: null, arguments: {} };
  const mcp = isRecord(context.mcp) ? context.mcp : {};
  const params = isRecord(mcp.params) ? mcp.params : {};
  const server = firstPresent([mcp, ["server"]], [context, ["server", "mcpServer", "serverName", "mcp_server"]]);
  const tool = firstPresent([mcp, ["tool"]], [params, ["name"]], [context, ["tool", "toolName", "tool_name"]]);
  const args = firstPresent(
    [mcp, ["arguments"]],
    [params, ["arguments"]],
    [context, ["arguments", "args", "toolArguments"]],
  );
  return { server, tool, arguments: isRecord(args) ? args : {} };
}

/** The RFC 8785 (JCS) canonical form of a JSON value, as UTF-8 bytes. Numbers are doubles, as JSON.parse reads
 * them; NaN, infinities and lone surrogates are refused (they have no canonical form). */
export function canonicalBytes(value: unknown): Uint8Array {
  const text = canonicalize(value);
  if (text === undefined) throw new TypeError("the value has no JSON form");
  return new TextEncoder().encode(text);
}

async function sha256Hex(bytes: Uint8Array): Promise<string> {
  const hash = new Uint8Array(await crypto.subtle.digest("SHA-256", bytes as BufferSource));
  return Array.from(hash, (byte) => byte.toString(16).padStart(2, "0")).join("");
}

/** `sha256:` and the lowercase hex SHA-256 of the RFC 8785 form of the five members: what an MCP server computes
 * from the call it is about to make, to compare with the receipt's (or the decision's) `digest`. */
export async function argumentDigest(object: DigestObject): Promise<string> {
  const body = {
    arguments: object.arguments,
    message: object.message,
    requestedSchema: object.requestedSchema,
    server: object.server ?? null,
    tool: object.tool ?? null,
  };
  return `sha256:${await sha256Hex(canonicalBytes(body))}`;
}

/** The digest of a request as ReviewHub computes it: its message, its form's schema (null for URL mode) and the
 * server, tool and arguments its `context` names. */
export async function requestDigest(message: string, requestedSchema: unknown, context: unknown): Promise<string> {
  return argumentDigest({
    message,
    requestedSchema: (requestedSchema ?? null) as DigestObject["requestedSchema"],
    ...contextCall(context),
  });
}

/** ReviewHub's published receipt keys (`/.well-known/reviewhub-receipts.json`). Cache them; refetch once when a
 * receipt names a `kid` the cached set lacks (a rotation). */
export async function fetchReceiptKeys(
  reviewhubUrl: string,
  options: { fetch?: typeof fetch; signal?: AbortSignal } = {},
): Promise<JsonWebKeySet> {
  const url = new URL(RECEIPT_KEYS_PATH, reviewhubUrl);
  const response = await (options.fetch ?? fetch)(url, {
    headers: { Accept: "application/json" },
    ...(options.signal ? { signal: options.signal } : {}),
  });
  if (!response.ok) throw new Error(`GET ${url.href}: HTTP ${response.status}`);
  const data: unknown = await response.json();
  if (!isRecord(data) || !Array.isArray(data.keys)) throw new Error(`GET ${url.href}: not a JWK Set`);
  return data as unknown as JsonWebKeySet;
}

function base64UrlBytes(text: string, what: string): Uint8Array {
  if (!/^[A-Za-z0-9_-]*$/.test(text)) throw new ReceiptInvalid(`not a compact JWS: ${what} is not base64url`);
  const padded = text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4);
  let binary: string;
  try {
    binary = atob(padded);
  } catch {
    throw new ReceiptInvalid(`not a compact JWS: ${what} is not base64url`);
  }
  return Uint8Array.from(binary, (char) => char.charCodeAt(0));
}

function jsonPart(text: string, what: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(base64UrlBytes(text, what)));
  } catch (error) {
    if (error instanceof ReceiptInvalid) throw error;
    throw new ReceiptInvalid(`not a compact JWS: the ${what} is not JSON`);
  }
  if (!isRecord(value)) throw new ReceiptInvalid(`not a compact JWS: the ${what} is not a JSON object`);
  return value;
}

/** The algorithm a JWK verifies with, read from the key itself (never from the receipt's header). */
function keyAlgorithm(jwk: JsonWebKey): { alg: "ES256" | "EdDSA"; params: EcKeyImportParams | Algorithm } | null {
  if (jwk.kty === "EC" && jwk.crv === "P-256" && (jwk.alg === undefined || jwk.alg === "ES256")) {
    return { alg: "ES256", params: { name: "ECDSA", namedCurve: "P-256" } };
  }
  // "Ed25519" is the fully-specified name (RFC 9864) some exporters write for the same key.
  if (jwk.kty === "OKP" && jwk.crv === "Ed25519" && [undefined, "EdDSA", "Ed25519"].includes(jwk.alg)) {
    return { alg: "EdDSA", params: { name: "Ed25519" } };
  }
  return null;
}

/**
 * The receipt's claims, once its signature checks against the key its `kid` names in `jwks` and its digest is
 * `expectedDigest` (what the server computed itself, `argumentDigest`); throws ReceiptInvalid otherwise. Mirrors
 * the Python client's `reviewhub_client.receipts.verify_receipt`.
 */
export async function verifyReceipt(receipt: unknown, jwks: JsonWebKeySet, expectedDigest: string): Promise<Receipt> {
  if (typeof receipt !== "string") throw new ReceiptInvalid("no receipt: expected a compact JWS string");
  const parts = receipt.split(".");
  if (parts.length !== 3) throw new ReceiptInvalid("not a compact JWS: expected three dot-separated parts");
  const [headerPart, payloadPart, signaturePart] = parts as [string, string, string];
  const header = jsonPart(headerPart, "header");
  if (header.typ !== RECEIPT_TYPE) throw new ReceiptInvalid(`not a ReviewHub receipt (typ ${JSON.stringify(header.typ)})`);
  if (header.alg !== "ES256" && header.alg !== "EdDSA") {
    throw new ReceiptInvalid(`algorithm ${JSON.stringify(header.alg)} is not one ReviewHub signs with`);
  }
  if ("crit" in header) throw new ReceiptInvalid("the header names critical extensions this verifier does not know");
  const kid = header.kid;
  const jwk = (Array.isArray(jwks?.keys) ? jwks.keys : []).find((key) => isRecord(key) && key.kid === kid);
  if (typeof kid !== "string" || jwk === undefined) {
    throw new ReceiptInvalid(`unknown key ${JSON.stringify(kid)}: not in the published key set`);
  }
  const algorithm = keyAlgorithm(jwk);
  if (algorithm === null) throw new ReceiptInvalid(`key ${kid} is not a P-256 (ES256) or Ed25519 (EdDSA) public key`);
  if (algorithm.alg !== header.alg) {
    throw new ReceiptInvalid(`key ${kid} is for ${algorithm.alg}, the receipt says ${String(header.alg)}`);
  }
  let key: CryptoKey;
  try {
    // Only the public members: a published private `d` must not turn into a signing key here.
    const { kty, crv, x, y } = jwk;
    key = await crypto.subtle.importKey("jwk", { kty, crv, x, ...(y ? { y } : {}) }, algorithm.params, false, ["verify"]);
  } catch (error) {
    throw new ReceiptInvalid(`key ${kid} cannot be read: ${String(error)}`);
  }
  const signature = base64UrlBytes(signaturePart, "signature");
  const signed = new TextEncoder().encode(`${headerPart}.${payloadPart}`);
  const verifyParams = algorithm.alg === "ES256" ? { name: "ECDSA", hash: "SHA-256" } : { name: "Ed25519" };
  let valid: boolean;
  try {
    valid = await crypto.subtle.verify(verifyParams, key, signature as BufferSource, signed as BufferSource);
  } catch {
    valid = false;
  }
  if (!valid) throw new ReceiptInvalid("signature refused: the receipt was altered or signed by another key");
  const claims = jsonPart(payloadPart, "payload");
  const missing = REQUIRED_CLAIMS.filter((name) => !(name in claims));
  if (missing.length) throw new ReceiptInvalid(`claims missing: ${missing.join(", ")}`);
  if (typeof claims.iat !== "number" || !Number.isFinite(claims.iat)) throw new ReceiptInvalid("iat is not a number");
  if (!Array.isArray(claims.approvers)) throw new ReceiptInvalid("approvers is not a list");
  if (typeof claims.digest !== "string" || claims.digest !== expectedDigest) {
    throw new ReceiptInvalid("the receipt is for other arguments (digest mismatch)");
  }
  return {
    issuer: String(claims.iss),
    requestId: String(claims.request),
    digest: claims.digest,
    action: String(claims.action),
    approvers: claims.approvers.map(String),
    rule: claims.rule === undefined || claims.rule === null ? null : String(claims.rule),
    issuedAt: new Date(claims.iat * 1000),
    kid,
    claims,
  };
}
