/**
 * Passkey step-up (docs/approvals.md): a receipt whose `stepUp` claim carries each approver's WebAuthn assertion
 * over the request and its digest, checked offline with each approver's own public key, so a server that pins its
 * reviewers' passkeys need not trust ReviewHub (nor its receipt key) for who approved. WebCrypto only, as
 * receipts.ts, so it runs in Node and in browsers alike. Mirrors the Python client's
 * `reviewhub_client.receipts.verify_step_up`.
 *
 *     const receipt = await verifyReceipt(result._meta?.["reviewhub/receipt"], jwks, digest);
 *     const approvals = await verifyStepUp(receipt, { rpId, origin });
 */

import { isRecord } from "./errors.js";
import { ReceiptInvalid, type Receipt } from "./receipts.js";

/** What every step-up challenge starts with; then `<request id>\n<digest>\n<nonce>`. */
export const STEP_UP_PREFIX = "reviewhub-step-up/1\n";
const FLAG_USER_PRESENT = 0x01;
const FLAG_USER_VERIFIED = 0x04;
// rpIdHash (32) + flags (1) + signCount (4): the shortest authenticatorData there is.
const MIN_AUTHENTICATOR_DATA = 37;
const P256_FIELD_BYTES = 32;

/** One approver's assertion, as the receipt's `stepUp` claim carries it. */
export interface StepUpEntry {
  by: string;
  /** base64url */
  credentialId: string;
  /** The passkey's public JWK with its `alg`: ES256 (EC P-256), EdDSA (OKP Ed25519) or RS256 (RSA). */
  publicKey: JsonWebKey;
  /** base64url, as the authenticator returned it. */
  authenticatorData: string;
  /** base64url, the exact bytes the browser signed over. */
  clientDataJSON: string;
  /** base64url; ES256 is DER-encoded, as WebAuthn signs. */
  signature: string;
}

/** One approver whose passkey signed this receipt's request and digest. */
export interface StepUpApproval {
  /** The approver's username, as the receipt names them. */
  by: string;
  /** base64url, the passkey's id. */
  credentialId: string;
  /** The passkey's public JWK: pin it to trust a reviewer's key, not ReviewHub. */
  publicKey: JsonWebKey;
  /** Where the browser signed (clientDataJSON's origin). */
  origin: string;
}

export interface StepUpOptions {
  /** ReviewHub's host (PUBLIC_URL's): each assertion's rpIdHash must be its SHA-256. Unchecked when absent. */
  rpId?: string;
  /** ReviewHub's origin (`https://host[:port]`): each clientDataJSON's origin must be it. Unchecked when absent. */
  origin?: string;
}

/** What the check reads of a receipt: what `verifyReceipt` returns, or the same members built by hand. */
export type StepUpReceipt = Pick<Receipt, "requestId" | "digest" | "approvers" | "claims">;

function base64UrlBytes(value: unknown): Uint8Array {
  if (typeof value !== "string") throw new ReceiptInvalid("a step-up field is not base64url text");
  const text = value.replace(/={1,2}$/, "");
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) {
    throw new ReceiptInvalid("a step-up field is not base64url");
  }
  const padded = text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4);
  return Uint8Array.from(atob(padded), (char) => char.charCodeAt(0));
}

async function sha256(bytes: Uint8Array): Promise<Uint8Array> {
  return new Uint8Array(await crypto.subtle.digest("SHA-256", bytes as BufferSource));
}

function concat(...parts: Uint8Array[]): Uint8Array {
  const joined = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let at = 0;
  for (const part of parts) {
    joined.set(part, at);
    at += part.length;
  }
  return joined;
}

function equalBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && a.every((byte, index) => byte === b[index]);
}

/** A DER `SEQUENCE { INTEGER r, INTEGER s }` (what WebAuthn's ES256 signs) as the 64-byte r || s WebCrypto
 * verifies; null when it is not strict DER for P-256. */
function p256SignatureFromDer(der: Uint8Array): Uint8Array | null {
  // 72 bytes at most (two 33-byte integers and their headers), so every length is DER's one-byte short form.
  if (der[0] !== 0x30 || der[1] !== der.length - 2 || der.length > 72) return null;
  const raw = new Uint8Array(2 * P256_FIELD_BYTES);
  let at = 2;
  for (const offset of [0, P256_FIELD_BYTES]) {
    const length = der[at + 1];
    if (der[at] !== 0x02 || length === undefined || length < 1 || at + 2 + length > der.length) return null;
    let integer = der.subarray(at + 2, at + 2 + length);
    at += 2 + length;
    const [first = 0, second = 0] = integer;
    if (first & 0x80) return null; // negative
    if (first === 0 && integer.length > 1 && !(second & 0x80)) return null; // a needless leading zero
    if (first === 0) integer = integer.subarray(1);
    if (integer.length > P256_FIELD_BYTES) return null;
    raw.set(integer, offset + P256_FIELD_BYTES - integer.length);
  }
  return at === der.length ? raw : null;
}

interface StepUpKey {
  importParams: EcKeyImportParams | RsaHashedImportParams | Algorithm;
  verifyParams: EcdsaParams | Algorithm;
  /** The key's public members only: a JWK with a private part must not become a signing key here. */
  publicJwk: JsonWebKey;
  signature: (raw: Uint8Array) => Uint8Array | null;
}

/** How the key verifies, from its own `alg` (never from anything the assertion says). */
function stepUpKey(jwk: Record<string, unknown>): StepUpKey {
  const { alg, kty, crv, x, y, n, e } = jwk as JsonWebKey;
  const unusable = (why: string): ReceiptInvalid =>
    new ReceiptInvalid(`a step-up public key is not a usable JWK: ${why}`);
  if (alg === "ES256") {
    if (kty !== "EC" || crv !== "P-256") throw unusable("ES256 needs an EC P-256 key");
    return {
      importParams: { name: "ECDSA", namedCurve: "P-256" },
      verifyParams: { name: "ECDSA", hash: "SHA-256" },
      publicJwk: { kty, crv, x, y },
      signature: p256SignatureFromDer,
    };
  }
  if (alg === "EdDSA") {
    if (kty !== "OKP" || crv !== "Ed25519") throw unusable("EdDSA needs an OKP Ed25519 key");
    return {
      importParams: { name: "Ed25519" },
      verifyParams: { name: "Ed25519" },
      publicJwk: { kty, crv, x },
      signature: (raw) => raw,
    };
  }
  if (alg === "RS256") {
    if (kty !== "RSA") throw unusable("RS256 needs an RSA key");
    return {
      importParams: { name: "RSASSA-PKCS1-v1_5", hash: "SHA-256" },
      verifyParams: { name: "RSASSA-PKCS1-v1_5" },
      publicJwk: { kty, n, e },
      signature: (raw) => raw,
    };
  }
  throw new ReceiptInvalid(`step-up key algorithm ${JSON.stringify(alg)} is not ES256, EdDSA or RS256`);
}

/** The WebAuthn signature over authenticatorData || SHA-256(clientDataJSON), with the key's own algorithm. */
async function checkSignature(jwk: Record<string, unknown>, signature: Uint8Array, signed: Uint8Array): Promise<void> {
  const use = stepUpKey(jwk);
  let key: CryptoKey;
  try {
    key = await crypto.subtle.importKey("jwk", use.publicJwk, use.importParams, false, ["verify"]);
  } catch (error) {
    throw new ReceiptInvalid(`a step-up public key is not a usable JWK: ${String(error)}`);
  }
  const raw = use.signature(signature);
  let valid = false;
  if (raw !== null) {
    try {
      valid = await crypto.subtle.verify(use.verifyParams, key, raw as BufferSource, signed as BufferSource);
    } catch {
      valid = false;
    }
  }
  if (!valid) throw new ReceiptInvalid("a step-up signature does not verify");
}

function clientData(bytes: Uint8Array, by: string): { data: Record<string, unknown>; challenge: Uint8Array } {
  let data: unknown;
  try {
    data = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes));
  } catch {
    throw new ReceiptInvalid(`${by}'s clientDataJSON is not valid`);
  }
  if (!isRecord(data) || typeof data.challenge !== "string") {
    throw new ReceiptInvalid(`${by}'s clientDataJSON is not valid`);
  }
  return { data, challenge: base64UrlBytes(data.challenge) };
}

/**
 * Every approver's passkey assertion in the receipt, checked without trusting ReviewHub: each signature verifies
 * with the public key it names, over authenticatorData || SHA-256(clientDataJSON); clientDataJSON is a
 * `webauthn.get` whose challenge is `reviewhub-step-up/1\n<request>\n<digest>\n<nonce>` for this receipt's request
 * and digest; the authenticator saw the user present and verified; each approver named in `approvers` signed, each
 * with a different passkey. `rpId` and `origin`, when given, are checked too. Throws ReceiptInvalid otherwise.
 *
 * Verify the receipt itself first (`verifyReceipt`, against the digest you computed): this reads its `request`,
 * `digest`, `approvers` and `stepUp` claims as they are.
 */
export async function verifyStepUp(receipt: StepUpReceipt, options: StepUpOptions = {}): Promise<StepUpApproval[]> {
  const claimed = receipt.claims?.stepUp;
  const entries = (Array.isArray(claimed) ? claimed : []).filter(isRecord);
  if (entries.length === 0) throw new ReceiptInvalid("the receipt carries no passkey step-up");
  const encoder = new TextEncoder();
  const expected = encoder.encode(`${STEP_UP_PREFIX}${receipt.requestId}\n${receipt.digest}\n`);
  const rpIdHash = options.rpId === undefined ? null : await sha256(encoder.encode(options.rpId));
  const approvals: StepUpApproval[] = [];
  for (const entry of entries) {
    const { by, publicKey } = entry;
    if (typeof by !== "string" || !isRecord(publicKey)) {
      throw new ReceiptInvalid("a step-up entry names no approver or no public key");
    }
    const authenticatorData = base64UrlBytes(entry.authenticatorData);
    const clientDataJson = base64UrlBytes(entry.clientDataJSON);
    const { data, challenge } = clientData(clientDataJson, by);
    if (data.type !== "webauthn.get") throw new ReceiptInvalid(`${by}'s assertion is not a webauthn.get`);
    const nonce = challenge.subarray(expected.length);
    if (!equalBytes(challenge.subarray(0, expected.length), expected) || nonce.length === 0 || nonce.includes(0x0a)) {
      throw new ReceiptInvalid(`${by}'s passkey signed another request or other arguments`);
    }
    if (options.origin !== undefined && data.origin !== options.origin) {
      const where = `${JSON.stringify(data.origin)}, not ${JSON.stringify(options.origin)}`;
      throw new ReceiptInvalid(`${by}'s passkey signed on ${where}`);
    }
    if (authenticatorData.length < MIN_AUTHENTICATOR_DATA) {
      throw new ReceiptInvalid(`${by}'s authenticatorData is too short`);
    }
    if (rpIdHash !== null && !equalBytes(authenticatorData.subarray(0, 32), rpIdHash)) {
      throw new ReceiptInvalid(`${by}'s passkey is for another relying party than ${JSON.stringify(options.rpId)}`);
    }
    const flags = authenticatorData[32] ?? 0;
    if (!(flags & FLAG_USER_PRESENT) || !(flags & FLAG_USER_VERIFIED)) {
      throw new ReceiptInvalid(`${by}'s authenticator did not verify the user`);
    }
    const signed = concat(authenticatorData, await sha256(clientDataJson));
    await checkSignature(publicKey, base64UrlBytes(entry.signature), signed);
    approvals.push({
      by,
      credentialId: String(entry.credentialId ?? ""),
      publicKey: publicKey as JsonWebKey,
      origin: String(data.origin),
    });
  }
  const signers = approvals.map((approval) => approval.by);
  const credentials = new Set(approvals.map((approval) => approval.credentialId));
  if (new Set(signers).size !== signers.length || credentials.size !== approvals.length) {
    throw new ReceiptInvalid("one approver or one passkey is counted twice");
  }
  const approvers = receipt.approvers.map(String);
  const unsigned = approvers.filter((name) => !signers.includes(name));
  if (unsigned.length || signers.some((name) => !approvers.includes(name))) {
    throw new ReceiptInvalid(`approvers and passkey signers differ (unsigned: ${unsigned.join(", ") || "none"})`);
  }
  return approvals;
}
