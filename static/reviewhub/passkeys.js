// @ts-check
/* Passkeys: the WebAuthn JSON the server speaks (py_webauthn's options, base64url bytes) to and from the browser's
 * ArrayBuffers, and the Preferences page's "Passkeys" section (templates/review/_passkeys.html): register one with
 * navigator.credentials.create, whose answer the server verifies before keeping it. The list and Remove are the
 * server's (plain forms); the page reloads to show a new passkey. The request page's step-up (request/step-up.js)
 * signs with one through the same helpers. */

/** @param {ArrayBuffer | ArrayBufferView} buffer @returns {string} */
export function toBase64url(buffer) {
  const bytes =
    buffer instanceof ArrayBuffer ? new Uint8Array(buffer) : new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  let text = "";
  bytes.forEach((byte) => {
    text += String.fromCharCode(byte);
  });
  return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** @param {string} text @returns {Uint8Array<ArrayBuffer>} */
export function fromBase64url(text) {
  const padded = (text + "===".slice((text.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
  return Uint8Array.from(atob(padded), (c) => c.charCodeAt(0));
}

/** @typedef {{id: string, type: string, transports?: string[]}} DescriptorJSON */

/** @param {DescriptorJSON[] | undefined} list @returns {PublicKeyCredentialDescriptor[] | undefined} */
function descriptors(list) {
  return list
    ? list.map((item) => ({
        id: fromBase64url(item.id),
        type: "public-key",
        transports: /** @type {AuthenticatorTransport[] | undefined} */ (item.transports),
      }))
    : undefined;
}

/** navigator.credentials.create's options from the server's JSON. @param {any} json @returns {PublicKeyCredentialCreationOptions} */
export function creationOptions(json) {
  return {
    ...json,
    challenge: fromBase64url(json.challenge),
    user: { ...json.user, id: fromBase64url(json.user.id) },
    excludeCredentials: descriptors(json.excludeCredentials),
  };
}

/** navigator.credentials.get's options from the server's JSON. @param {any} json @returns {PublicKeyCredentialRequestOptions} */
export function requestOptions(json) {
  return { ...json, challenge: fromBase64url(json.challenge), allowCredentials: descriptors(json.allowCredentials) };
}

/** A new or used credential as the JSON py_webauthn parses. @param {PublicKeyCredential} credential */
export function credentialJSON(credential) {
  const response = credential.response;
  /** @type {Record<string, unknown>} */
  const body = { clientDataJSON: toBase64url(response.clientDataJSON) };
  if (response instanceof AuthenticatorAttestationResponse) {
    body.attestationObject = toBase64url(response.attestationObject);
    body.transports = response.getTransports ? response.getTransports() : [];
  } else if (response instanceof AuthenticatorAssertionResponse) {
    body.authenticatorData = toBase64url(response.authenticatorData);
    body.signature = toBase64url(response.signature);
    if (response.userHandle) body.userHandle = toBase64url(response.userHandle);
  }
  return {
    id: credential.id,
    rawId: toBase64url(credential.rawId),
    type: credential.type,
    response: body,
    clientExtensionResults: credential.getClientExtensionResults(),
    authenticatorAttachment: credential.authenticatorAttachment || undefined,
  };
}

/** POST JSON with the page's CSRF token; the parsed body and status, never throws on a 4xx. @param {string} url @param {unknown} body */
export async function postJSON(url, body) {
  /** @type {HTMLInputElement | null} */
  const token = document.querySelector("input[name=csrfmiddlewaretoken]");
  const response = await fetch(url, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": token ? token.value : "" },
    body: JSON.stringify(body),
  });
  /** @type {any} */
  let data = {};
  try {
    data = await response.json();
  } catch (error) {
    data = { detail: `The server answered ${response.status}.` };
  }
  return { ok: response.ok, status: response.status, data };
}

/** A refusal's words: the detail and, when given, the step_up or credential field's reason. @param {any} data */
export function refusalText(data) {
  const fields = data && data.fields ? data.fields : {};
  const reason = fields.step_up || fields.credential || fields.name || "";
  return [data && data.detail, reason].filter(Boolean).join(" ");
}

function wirePreferences() {
  const section = document.getElementById("passkeys");
  if (!section) return;
  const adder = /** @type {HTMLElement} */ (document.getElementById("passkey-add"));
  const button = /** @type {HTMLButtonElement} */ (document.getElementById("passkey-register"));
  const nameField = /** @type {HTMLInputElement} */ (document.getElementById("passkey-name"));
  const status = /** @type {HTMLElement} */ (document.getElementById("passkey-status"));
  if (!window.PublicKeyCredential || !navigator.credentials) {
    status.textContent = "This browser cannot use passkeys.";
    return;
  }
  adder.hidden = false;
  button.addEventListener("click", async () => {
    button.disabled = true;
    status.textContent = "Asking this browser for a new passkey…";
    try {
      const options = await postJSON(String(section.dataset.options), {});
      if (!options.ok) throw new Error(refusalText(options.data));
      const created = /** @type {PublicKeyCredential | null} */ (
        await navigator.credentials.create({ publicKey: creationOptions(options.data.publicKey) })
      );
      if (!created) throw new Error("No passkey was made.");
      const saved = await postJSON(String(section.dataset.register), {
        name: nameField.value,
        credential: credentialJSON(created),
      });
      if (!saved.ok) throw new Error(refusalText(saved.data));
      status.textContent = `Registered “${saved.data.name}”.`;
      section.dataset.state = "registered";
      location.reload();
    } catch (error) {
      status.textContent = `Not registered: ${error instanceof Error ? error.message : String(error)}`;
      section.dataset.state = "refused";
      button.disabled = false;
    }
  });
}

wirePreferences();
