/** `verifyStepUp`, the offline check of a passkey step-up receipt's bundle (docs/approvals.md), against what the
 * Python verifier's tests hold (tests/security/test_step_up.py): a quorum's bundle made by ReviewHub's own code from
 * real WebAuthn assertions (tests/security/passkey_authenticator.py signs them; the server verifies them with
 * py_webauthn and signs the receipt) verifies, and tampering with it is refused; then assertions made here the way
 * that authenticator makes them, with node's crypto, each wrong in one way only. */

import assert from "node:assert/strict";
import { createHash, generateKeyPairSync, randomBytes, sign, type KeyObject } from "node:crypto";
import { before, describe, test } from "node:test";

import {
  ReceiptInvalid,
  STEP_UP_PREFIX,
  requestDigest,
  verifyReceipt,
  verifyStepUp,
  type JsonWebKeySet,
  type Receipt,
  type StepUpEntry,
  type StepUpReceipt,
} from "reviewhub-client";

import { djangoShell } from "./harness.js";

const PUBLIC_URL = "https://reviewhub.example";
const RP_ID = "reviewhub.example";

/** ReviewHub's own code makes a step-up quorum's receipt: two reviewers register passkeys (the Preferences page's
 * functions), each signs the challenge the request page issues, `transitions.respond` verifies and records both.
 * A second request, approved by alice alone, gives a genuine assertion for another request. The Python verifier's
 * view of the same receipt comes along, to compare. */
const MAKE_BUNDLE = `
import json
from django.contrib.auth.models import User
from elicitation.models import Queue
from elicitation.queue import accounts, receipts, rules, step_up, transitions
from reviewhub_client.receipts import verify_receipt, verify_step_up
from tests.security.passkey_authenticator import SoftAuthenticator, b64url

RULE = {"name": "payments need a passkey", "match": {"tool": "pay"}, "action": "set", "step_up": "passkey"}
SCHEMA = {"type": "object", "properties": {"approve": {"type": "boolean"}}, "required": ["approve"]}
CONTEXT = {"mcp": {"server": "bank", "tool": "pay", "arguments": {"amount": 5000, "to": "Zoë"}}}

quorum = Queue.objects.create(slug="step-up-quorum", name="Step-up quorum")
single = Queue.objects.create(slug="step-up-single", name="Step-up single")
rules.replace_policy(quorum, {"rules": [{**RULE, "action": "require_quorum", "quorum": {"approvals": 2}}]})
rules.replace_policy(single, {"rules": [RULE]})
agent, _ = accounts.create_agent("step-up-agent", queue_slugs=[quorum.slug, single.slug])
rp_id, origin = step_up.relying_party()
users, keys = {}, {}
for name in ("alice", "bob"):
    user = User.objects.create_user(name)
    quorum.members.add(user)
    single.members.add(user)
    key = SoftAuthenticator(rp_id=rp_id, origin=origin)
    step_up.register_passkey(user, key.register(step_up.registration_options(user)), "laptop")
    users[name], keys[name] = user, key

def ask(queue):
    request, _ = transitions.create_request(
        agent=agent, queue_slug=queue.slug, message="Pay 5000 EUR to Zoë?", mode="form",
        requested_schema=SCHEMA, context=CONTEXT,
    )
    return request

def signed(request, name):
    return keys[name].sign(step_up.authentication_options(request, users[name]))

request = ask(quorum)
transitions.claim_request(request.pk, user=users["alice"])
first = transitions.respond(
    request.pk, user=users["alice"], action="accept", content={"approve": True}, assertion=signed(request, "alice")
)
done = transitions.respond(request.pk, user=users["bob"], action="accept", assertion=signed(first, "bob"))
other = ask(single)
transitions.claim_request(other.pk, user=users["alice"])
other_done = transitions.respond(
    other.pk, user=users["alice"], action="accept", content={"approve": True}, assertion=signed(other, "alice")
)

jwks = receipts.public_jwks()
receipt = done.result_meta[receipts.RECEIPT_META]
digest = request.policy["digest"]
python_signers = [
    approval.by
    for approval in verify_step_up(verify_receipt(receipt, jwks, expected_digest=digest), rp_id=rp_id, origin=origin)
]

def pinned(key):
    numbers = key.key.public_key().public_numbers()
    x, y = numbers.x.to_bytes(32, "big"), numbers.y.to_bytes(32, "big")
    return {"credentialId": b64url(key.credential_id), "x": b64url(x), "y": b64url(y)}

print(json.dumps({
    "rpId": rp_id,
    "origin": origin,
    "jwks": jwks,
    "receipt": receipt,
    "request": {
        "message": request.message, "requestedSchema": request.requested_schema, "context": request.context,
    },
    "otherReceipt": other_done.result_meta[receipts.RECEIPT_META],
    "otherDigest": other.policy["digest"],
    "passkeys": {name: pinned(key) for name, key in keys.items()},
    "pythonSigners": python_signers,
}))
`;

interface ServerBundle {
  rpId: string;
  origin: string;
  jwks: JsonWebKeySet;
  receipt: string;
  request: { message: string; requestedSchema: unknown; context: unknown };
  otherReceipt: string;
  otherDigest: string;
  passkeys: Record<string, { credentialId: string; x: string; y: string }>;
  pythonSigners: string[];
}

function entriesOf(receipt: StepUpReceipt): StepUpEntry[] {
  return (receipt.claims.stepUp as StepUpEntry[]).map((entry) => ({ ...entry }));
}

function withEntries<R extends StepUpReceipt>(receipt: R, entries: StepUpEntry[]): R {
  return { ...receipt, claims: { ...receipt.claims, stepUp: entries } };
}

function flipLastByte(text: string): string {
  const bytes = Buffer.from(text, "base64url");
  bytes.writeUInt8(bytes.readUInt8(bytes.length - 1) ^ 0x01, bytes.length - 1);
  return bytes.toString("base64url");
}

/** Refused with ReceiptInvalid, its message matching `reason`. */
async function refused(check: Promise<unknown>, reason: RegExp): Promise<void> {
  await assert.rejects(check, (error: unknown) => {
    assert.ok(error instanceof ReceiptInvalid, `not a ReceiptInvalid: ${String(error)}`);
    assert.match(error.message, reason);
    return true;
  });
}

describe("a quorum's step-up receipt made by ReviewHub", () => {
  let bundle: ServerBundle;
  let receipt: Receipt;

  before(async () => {
    bundle = await djangoShell<ServerBundle>(MAKE_BUNDLE, { PUBLIC_URL });
    // The MCP server's own digest of the call, then the receipt: what verifyStepUp is given.
    const { message, requestedSchema, context } = bundle.request;
    receipt = await verifyReceipt(bundle.receipt, bundle.jwks, await requestDigest(message, requestedSchema, context));
  });

  test("verifies offline: both approvers signed, each with the passkey they registered", async () => {
    assert.deepEqual(receipt.approvers, ["alice", "bob"]);
    const approvals = await verifyStepUp(receipt, { rpId: RP_ID, origin: PUBLIC_URL });
    assert.deepEqual(
      approvals.map((approval) => approval.by),
      bundle.pythonSigners,
    );
    assert.deepEqual(bundle.pythonSigners, ["alice", "bob"]);
    for (const approval of approvals) {
      // The keys the authenticators hold, not what ReviewHub says they are: what a server pins.
      const passkey = bundle.passkeys[approval.by];
      assert.equal(approval.credentialId, passkey?.credentialId);
      const { kty, crv, x, y, alg } = approval.publicKey;
      assert.deepEqual([kty, crv, x, y, alg], ["EC", "P-256", passkey?.x, passkey?.y, "ES256"]);
      assert.equal(approval.origin, PUBLIC_URL);
    }
    assert.equal(bundle.rpId, RP_ID);
  });

  test("signatures swapped between the approvers, or a forged one, do not verify", async () => {
    const swapped = entriesOf(receipt);
    const [alice, bob] = swapped as [StepUpEntry, StepUpEntry];
    [alice.signature, bob.signature] = [bob.signature, alice.signature];
    await refused(verifyStepUp(withEntries(receipt, swapped)), /does not verify/);
    const forged = entriesOf(receipt);
    forged[1]!.signature = flipLastByte(forged[1]!.signature);
    await refused(verifyStepUp(withEntries(receipt, forged)), /does not verify/);
  });

  test("a bundle that lost an approver's assertion is refused, naming who did not sign", async () => {
    await refused(verifyStepUp(withEntries(receipt, entriesOf(receipt).slice(0, 1))), /unsigned: bob/);
  });

  test("another relying party, another origin, or a receipt for other arguments is refused", async () => {
    await refused(verifyStepUp(receipt, { rpId: "elsewhere.example" }), /another relying party/);
    await refused(verifyStepUp(receipt, { origin: "https://evil.example" }), /signed on "https:\/\/reviewhub\.example"/);
    await refused(verifyStepUp({ ...receipt, digest: "sha256:" + "0".repeat(64) }), /other arguments/);
  });

  test("a genuine assertion of the same passkey for another request is refused", async () => {
    const other = await verifyReceipt(bundle.otherReceipt, bundle.jwks, bundle.otherDigest);
    const [foreign] = entriesOf(other) as [StepUpEntry];
    assert.equal(foreign.by, "alice");
    assert.equal(foreign.credentialId, bundle.passkeys.alice?.credentialId);
    await verifyStepUp(other, { rpId: RP_ID, origin: PUBLIC_URL }); // good where it belongs
    const transplanted = [foreign, entriesOf(receipt)[1]!];
    await refused(verifyStepUp(withEntries(receipt, transplanted)), /alice's passkey signed another request/);
  });

  test("one approver's assertion replayed as another's counts once", async () => {
    const [alice] = entriesOf(receipt) as [StepUpEntry];
    await refused(verifyStepUp(withEntries(receipt, [alice, { ...alice, by: "bob" }])), /counted twice/);
    await refused(verifyStepUp(withEntries(receipt, [alice, alice])), /counted twice/);
  });

  test("a receipt without a step-up bundle is refused", async () => {
    const { stepUp: _dropped, ...claims } = receipt.claims;
    await refused(verifyStepUp({ ...receipt, claims }), /carries no passkey step-up/);
    await refused(verifyStepUp(withEntries(receipt, [])), /carries no passkey step-up/);
  });
});

// --- assertions made here, the way tests/security/passkey_authenticator.py makes them --------------------------------

const REQUEST_ID = "5f0c2f4e-8d8b-4f7e-9a51-3c2d1e0f9a7b";
const DIGEST = `sha256:${"ab".repeat(32)}`;
const FLAGS_UP_UV = 0x01 | 0x04;

function sha256(bytes: Buffer | string): Buffer {
  return createHash("sha256").update(bytes).digest();
}

function challenge(requestId = REQUEST_ID, digest = DIGEST, nonce = randomBytes(16).toString("base64url")): Buffer {
  return Buffer.from(`${STEP_UP_PREFIX}${requestId}\n${digest}\n${nonce}`);
}

interface Signing {
  challenge?: Buffer;
  flags?: number;
  origin?: string;
  rpId?: string;
  type?: string;
}

/** A passkey: navigator.credentials.get's answer, as the receipt's bundle entry for `by`. */
class SoftPasskey {
  readonly credentialId = randomBytes(32);
  readonly publicKey: JsonWebKey;
  private readonly privateKey: KeyObject;
  private signCount = 0;

  constructor(readonly alg: "ES256" | "EdDSA" | "RS256" = "ES256") {
    const pair =
      alg === "ES256"
        ? generateKeyPairSync("ec", { namedCurve: "P-256" })
        : alg === "EdDSA"
          ? generateKeyPairSync("ed25519")
          : generateKeyPairSync("rsa", { modulusLength: 2048 });
    this.privateKey = pair.privateKey;
    this.publicKey = { ...(pair.publicKey.export({ format: "jwk" }) as JsonWebKey), alg };
  }

  sign(by: string, options: Signing = {}): StepUpEntry {
    this.signCount += 1;
    const count = Buffer.alloc(4);
    count.writeUInt32BE(this.signCount);
    const flags = Buffer.from([options.flags ?? FLAGS_UP_UV]);
    const authenticatorData = Buffer.concat([sha256(options.rpId ?? RP_ID), flags, count]);
    const clientData = Buffer.from(
      JSON.stringify({
        type: options.type ?? "webauthn.get",
        challenge: (options.challenge ?? challenge()).toString("base64url"),
        origin: options.origin ?? PUBLIC_URL,
        crossOrigin: false,
      }),
    );
    const signed = Buffer.concat([authenticatorData, sha256(clientData)]);
    // ECDSA comes out DER-encoded, as WebAuthn signs; Ed25519 takes no separate hash.
    const signature = sign(this.alg === "EdDSA" ? null : "sha256", signed, this.privateKey);
    return {
      by,
      credentialId: this.credentialId.toString("base64url"),
      publicKey: this.publicKey,
      authenticatorData: authenticatorData.toString("base64url"),
      clientDataJSON: clientData.toString("base64url"),
      signature: signature.toString("base64url"),
    };
  }
}

function receiptOf(entries: StepUpEntry[], approvers = entries.map((entry) => entry.by)): StepUpReceipt {
  return { requestId: REQUEST_ID, digest: DIGEST, approvers, claims: { stepUp: entries } };
}

describe("assertions made with node's crypto, each wrong in one way", () => {
  const alice = new SoftPasskey();
  const bob = new SoftPasskey();
  const strict = { rpId: RP_ID, origin: PUBLIC_URL };

  test("each key type a passkey may have verifies: ES256, EdDSA, RS256", async () => {
    const keys = [alice, new SoftPasskey("EdDSA"), new SoftPasskey("RS256")];
    const entries = keys.map((key, index) => key.sign(`reviewer-${index}`));
    const approvals = await verifyStepUp(receiptOf(entries), strict);
    assert.deepEqual(
      approvals.map((approval) => [approval.by, approval.credentialId, approval.publicKey.alg, approval.origin]),
      keys.map((key, index) => [`reviewer-${index}`, key.credentialId.toString("base64url"), key.alg, PUBLIC_URL]),
    );
  });

  test("a forged signature is refused, whatever the key type", async () => {
    for (const key of [alice, new SoftPasskey("EdDSA"), new SoftPasskey("RS256")]) {
      const entry = key.sign("alice");
      await refused(verifyStepUp(receiptOf([{ ...entry, signature: flipLastByte(entry.signature) }])), /does not verify/);
    }
    // An ES256 signature that is not strict DER (a byte appended) is no signature either.
    const entry = alice.sign("alice");
    const padded = Buffer.concat([Buffer.from(entry.signature, "base64url"), Buffer.from([0])]).toString("base64url");
    await refused(verifyStepUp(receiptOf([{ ...entry, signature: padded }])), /does not verify/);
  });

  test("a signature over other bytes than this entry's is refused", async () => {
    const entry = alice.sign("alice");
    const other = alice.sign("alice");
    await refused(verifyStepUp(receiptOf([{ ...entry, signature: other.signature }])), /does not verify/);
  });

  test("a challenge for another request, other arguments, or without a single-line nonce is refused", async () => {
    const cases = [
      challenge("00000000-0000-4000-8000-000000000000"),
      challenge(REQUEST_ID, `sha256:${"cd".repeat(32)}`),
      challenge(REQUEST_ID, DIGEST, ""),
      challenge(REQUEST_ID, DIGEST, "one\ntwo"),
      Buffer.from(`reviewhub-passkey-registration/1\n${REQUEST_ID}\n${DIGEST}\nnonce`),
    ];
    for (const signedChallenge of cases) {
      const entry = alice.sign("alice", { challenge: signedChallenge });
      await refused(verifyStepUp(receiptOf([entry]), strict), /alice's passkey signed another request or other/);
    }
  });

  test("an authenticator that did not verify the user, or did not see them, is refused", async () => {
    for (const flags of [0x01, 0x04, 0x00]) {
      await refused(verifyStepUp(receiptOf([alice.sign("alice", { flags })])), /alice's authenticator did not verify/);
    }
  });

  test("another origin or relying party is refused when the verifier names its own, unchecked otherwise", async () => {
    const elsewhere = alice.sign("alice", { origin: "https://evil.example" });
    const named = /signed on "https:\/\/evil\.example", not "https:\/\/reviewhub\.example"/;
    await refused(verifyStepUp(receiptOf([elsewhere]), strict), named);
    const otherParty = alice.sign("alice", { rpId: "evil.example" });
    await refused(verifyStepUp(receiptOf([otherParty]), strict), /another relying party than "reviewhub\.example"/);
    // As the Python verifier: rpId and origin are the caller's to give.
    assert.equal((await verifyStepUp(receiptOf([elsewhere]))).length, 1);
    assert.equal((await verifyStepUp(receiptOf([otherParty]))).length, 1);
  });

  test("a registration's client data is not an assertion", async () => {
    await refused(verifyStepUp(receiptOf([alice.sign("alice", { type: "webauthn.create" })])), /not a webauthn\.get/);
  });

  test("one passkey for two approvers, or one approver twice, counts once", async () => {
    const first = alice.sign("alice");
    await refused(verifyStepUp(receiptOf([first, alice.sign("bob")])), /counted twice/);
    await refused(verifyStepUp(receiptOf([first, new SoftPasskey().sign("alice")])), /counted twice/);
  });

  test("the signers must be exactly the receipt's approvers", async () => {
    const entries = [alice.sign("alice"), bob.sign("bob")];
    await refused(verifyStepUp(receiptOf(entries.slice(0, 1), ["alice", "bob"])), /differ \(unsigned: bob\)/);
    await refused(verifyStepUp(receiptOf(entries, ["alice"])), /differ \(unsigned: none\)/);
    assert.equal((await verifyStepUp(receiptOf(entries, ["alice", "bob"]))).length, 2);
  });

  test("a key of another algorithm, or labelled with one it is not, is refused", async () => {
    const entry = alice.sign("alice");
    const { alg: _alg, ...unlabelled } = entry.publicKey;
    for (const publicKey of [unlabelled, { ...entry.publicKey, alg: "ES384" }, { ...entry.publicKey, alg: "none" }]) {
      await refused(verifyStepUp(receiptOf([{ ...entry, publicKey }])), /is not ES256, EdDSA or RS256/);
    }
    const edwards = new SoftPasskey("EdDSA").sign("alice");
    const mislabelled = { ...edwards, publicKey: { ...edwards.publicKey, alg: "ES256" } };
    await refused(verifyStepUp(receiptOf([mislabelled])), /not a usable JWK/);
    // A well-formed key that is not the one that signed.
    await refused(verifyStepUp(receiptOf([{ ...entry, publicKey: bob.publicKey }])), /does not verify/);
  });

  test("malformed entries are refused, never thrown as anything but ReceiptInvalid", async () => {
    const entry = alice.sign("alice");
    const short = Buffer.from(entry.authenticatorData, "base64url").subarray(0, 36).toString("base64url");
    const cases: [Record<string, unknown>, RegExp][] = [
      [{ ...entry, by: undefined }, /names no approver or no public key/],
      [{ ...entry, publicKey: "a key" }, /names no approver or no public key/],
      [{ ...entry, authenticatorData: short }, /authenticatorData is too short/],
      [{ ...entry, signature: "not base64url!" }, /not base64url/],
      [{ ...entry, clientDataJSON: 42 }, /not base64url text/],
      [{ ...entry, clientDataJSON: Buffer.from("{not json").toString("base64url") }, /clientDataJSON is not valid/],
      [{ ...entry, clientDataJSON: Buffer.from('{"type": "webauthn.get"}').toString("base64url") }, /is not valid/],
    ];
    for (const [bad, reason] of cases) {
      await refused(verifyStepUp(receiptOf([bad as unknown as StepUpEntry], ["alice"])), reason);
    }
  });
});
