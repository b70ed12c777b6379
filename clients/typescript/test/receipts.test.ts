/** The argument digest computed in TypeScript equals the server's (Python's), and receipts a live ReviewHub issued
 * verify offline against its published key set; altered, re-keyed or mislabelled ones are refused. */

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  ReceiptInvalid,
  ReviewHubClient,
  argumentDigest,
  canonicalBytes,
  fetchReceiptKeys,
  requestDigest,
  verifyReceipt,
  type JsonWebKeySet,
} from "reviewhub-client";

import { LiveServer, Reviewer } from "./harness.js";

let live: LiveServer;
let hub: ReviewHubClient;
let reviewer: Reviewer;
let jwks: JsonWebKeySet;

before(async () => {
  live = await LiveServer.start();
  hub = new ReviewHubClient({ baseUrl: live.url, apiKey: live.fixture.agentKey });
  reviewer = new Reviewer(live.url, live.fixture.reviewerToken);
  jwks = await fetchReceiptKeys(live.url);
});

after(async () => {
  try {
    await hub.close();
  } finally {
    await live.close();
  }
});

const SCHEMA = {
  type: "object" as const,
  properties: { approve: { type: "boolean", title: "Überweisung freigeben? ✅" } },
  required: ["approve"],
};

function base64url(text: string): string {
  return Buffer.from(text, "utf8").toString("base64url");
}

function parts(receipt: string): { header: Record<string, unknown>; claims: Record<string, unknown>; signature: string } {
  const [header, payload, signature] = receipt.split(".") as [string, string, string];
  return {
    header: JSON.parse(Buffer.from(header, "base64url").toString("utf8")) as Record<string, unknown>,
    claims: JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as Record<string, unknown>,
    signature,
  };
}

/** A compact JWS signed with a key of the test's own (WebCrypto), for what ReviewHub never issues. */
async function sign(header: Record<string, unknown>, claims: Record<string, unknown>, key: CryptoKey): Promise<string> {
  const input = `${base64url(JSON.stringify(header))}.${base64url(JSON.stringify(claims))}`;
  const params = key.algorithm.name === "Ed25519" ? { name: "Ed25519" } : { name: "ECDSA", hash: "SHA-256" };
  const signature = Buffer.from(await crypto.subtle.sign(params, key, new TextEncoder().encode(input)));
  return `${input}.${signature.toString("base64url")}`;
}

/** A request a rule decides at once ("ruled": transfers up to 100 are accepted), with non-ASCII text. */
async function ruledTransfer(amount: number): Promise<{ result: Awaited<ReturnType<ReviewHubClient["wait"]>>; context: Record<string, unknown> }> {
  const context = {
    mcp: { server: "bank", tool: "transfer", arguments: { amount, currency: "EUR", to: "Zoë", memo: "Miete 🏠" } },
  };
  const created = await hub.create({ queue: "ruled", message: "Überweisung 100 € an Zoë 🎉", requestedSchema: SCHEMA, context });
  return { result: await hub.wait(created.id, { timeoutMs: 20_000 }), context };
}

describe("the argument digest", { timeout: 60_000 }, () => {
  test("the docs' worked example gives the digest the docs print", async () => {
    const digest = await argumentDigest({
      message: "Überweisung 100 €",
      requestedSchema: { type: "object", properties: { approve: { type: "boolean" } }, required: ["approve"] },
      server: "bank",
      tool: "transfer",
      arguments: { amount: 100, currency: "EUR", to: "Zoë", memo: "Miete 🏠" },
    });
    assert.equal(digest, "sha256:4fd55940012df75b072d45d1740b585e794ac52985401addf9d1fb488188c068");
  });

  test("equals the server's own, computed in Python, where canonical forms differ", async () => {
    const sample = live.fixture.digestSample;
    assert.equal(await requestDigest(sample.message, sample.requestedSchema, sample.context), sample.digest);
    // Not JSON.stringify with sorted keys: RFC 8785 orders keys by UTF-16 unit, so an astral key sorts before "ﬁ".
    const canonical = new TextDecoder().decode(canonicalBytes({ "ﬁ": 1, "😀": 2, é: 3 }));
    assert.equal(canonical, '{"é":3,"😀":2,"ﬁ":1}');
  });

  test("a rule's digest, computed by the server, is what the MCP server recomputes from its own call", async () => {
    const { result, context } = await ruledTransfer(100);
    const decision = result._meta?.["reviewhub/decision"] as { digest: string; rule: { name: string } };
    assert.equal(decision.rule.name, "small transfers");
    const mine = await argumentDigest({
      message: "Überweisung 100 € an Zoë 🎉",
      requestedSchema: SCHEMA,
      server: "bank",
      tool: "transfer",
      arguments: (context.mcp as { arguments: Record<string, unknown> }).arguments,
    });
    assert.equal(decision.digest, mine);
    const other = await argumentDigest({
      message: "Überweisung 100 € an Zoë 🎉",
      requestedSchema: SCHEMA,
      server: "bank",
      tool: "transfer",
      arguments: { amount: 100, currency: "EUR", to: "Zoe", memo: "Miete 🏠" },
    });
    assert.notEqual(decision.digest, other);
  });
});

describe("receipts verified offline", { timeout: 60_000 }, () => {
  test("a rule's receipt verifies with the published keys and names the rule, no approvers", async () => {
    const { result, context } = await ruledTransfer(42);
    const digest = await requestDigest("Überweisung 100 € an Zoë 🎉", SCHEMA, context);
    const receipt = await verifyReceipt(result._meta?.["reviewhub/receipt"], jwks, digest);
    assert.equal(receipt.action, "accept");
    assert.equal(receipt.rule, "small transfers");
    assert.deepEqual(receipt.approvers, []);
    assert.equal(receipt.digest, digest);
    assert.equal(receipt.issuer.length > 0, true);
    assert.equal(jwks.keys.some((key) => key.kid === receipt.kid), true);
  });

  test("a reviewer's answer carries a receipt naming the reviewer", async () => {
    const context = { mcp: { server: "deploys", tool: "deploy", arguments: { version: "1.4", note: "größer" } } };
    const created = await hub.create({ queue: "misc", message: "Deploy 1.4?", requestedSchema: SCHEMA, context });
    const asked = await reviewer.nextRequest("misc");
    assert.equal(asked.id, created.id);
    await reviewer.respond(asked.id, "decline");
    const result = await hub.wait(created.id, { timeoutMs: 20_000 });
    assert.equal(result.action, "decline");
    const receipt = await verifyReceipt(
      result._meta?.["reviewhub/receipt"],
      jwks,
      await requestDigest("Deploy 1.4?", SCHEMA, context),
    );
    assert.equal(receipt.action, "decline");
    assert.deepEqual(receipt.approvers, ["ts-reviewer"]);
    assert.equal(receipt.rule, null);
    assert.equal(receipt.requestId, created.id);
  });

  test("altered, re-keyed, mislabelled and mismatched receipts are refused", async () => {
    const { result, context } = await ruledTransfer(7);
    const digest = await requestDigest("Überweisung 100 € an Zoë 🎉", SCHEMA, context);
    const good = result._meta?.["reviewhub/receipt"] as string;
    await verifyReceipt(good, jwks, digest); // the untouched one verifies
    const { header, claims, signature } = parts(good);
    const [headerPart, payloadPart] = good.split(".") as [string, string];
    const refused = (receipt: unknown, pattern: RegExp, keys: JsonWebKeySet = jwks, expected = digest) =>
      assert.rejects(verifyReceipt(receipt, keys, expected), (error: unknown) => {
        assert.ok(error instanceof ReceiptInvalid, String(error));
        assert.match(error.message, pattern);
        return true;
      });

    // The payload altered (a decline turned into an accept, another approver), the signature kept.
    await refused(`${headerPart}.${base64url(JSON.stringify({ ...claims, action: "decline" }))}.${signature}`, /signature/);
    await refused(`${headerPart}.${base64url(JSON.stringify({ ...claims, approvers: ["mallory"] }))}.${signature}`, /signature/);
    // The signature altered, or missing.
    const flipped = Buffer.from(signature, "base64url");
    flipped[0] = (flipped[0] ?? 0) ^ 1;
    await refused(`${headerPart}.${payloadPart}.${flipped.toString("base64url")}`, /signature/);
    await refused(`${headerPart}.${payloadPart}.`, /signature/);
    // Good, but for other arguments.
    await refused(good, /digest mismatch/, jwks, await requestDigest("Überweisung 100 € an Zoë 🎉", SCHEMA, { mcp: { tool: "transfer" } }));
    // Not one of ReviewHub's: unsigned, HMAC, another type, unknown key, garbage.
    await refused(`${base64url(JSON.stringify({ ...header, alg: "none" }))}.${payloadPart}.`, /algorithm "none"/);
    await refused(`${base64url(JSON.stringify({ ...header, alg: "HS256" }))}.${payloadPart}.${signature}`, /algorithm "HS256"/);
    await refused(`${base64url(JSON.stringify({ ...header, typ: "JWT" }))}.${payloadPart}.${signature}`, /typ/);
    await refused(good, /unknown key/, { keys: jwks.keys.map((key) => ({ ...key, kid: `${key.kid}-rotated` })) });
    await refused("not.a.jws!", /not a compact JWS/);
    await refused(`${headerPart}.${payloadPart}.${signature}!`, /signature is not base64url/);
    await refused(undefined, /no receipt/);

    // Signed by another P-256 key published under ReviewHub's kid: the published key refuses it.
    const other = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, true, ["sign", "verify"]);
    await refused(await sign(header, claims, other.privateKey), /signature/);
    // An Ed25519 key named by an ES256 header: the key's own algorithm decides, no confusion.
    const ed = await crypto.subtle.generateKey({ name: "Ed25519" }, true, ["sign", "verify"]);
    const edJwk = { ...(await crypto.subtle.exportKey("jwk", ed.publicKey)), kid: "ed" };
    await refused(await sign({ ...header, kid: "ed" }, claims, ed.privateKey), /is for EdDSA/, { keys: [edJwk] });
    // Ed25519 (EdDSA) receipts, which RECEIPT_SIGNING_KEYS may configure, verify with their key.
    const edReceipt = await sign({ ...header, alg: "EdDSA", kid: "ed" }, claims, ed.privateKey);
    assert.equal((await verifyReceipt(edReceipt, { keys: [edJwk] }, digest)).kid, "ed");
  });
});
