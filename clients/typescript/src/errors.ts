/** Errors thrown by the ReviewHub client. Every one is a `ReviewHubError`, as in the Python client. */

export interface ReviewHubErrorOptions {
  status?: number | null;
  code?: string | null;
  fields?: Record<string, string> | null;
  body?: unknown;
  cause?: unknown;
}

/** An error answered by the server (`status`, `code`, `detail`) or a failure to reach it (`status` null). */
export class ReviewHubError extends Error {
  readonly detail: string;
  readonly status: number | null;
  readonly code: string | null;
  /** Each offending field (e.g. `requestedSchema.x`) and why it was refused. */
  readonly fields: Record<string, string>;
  /** The parsed JSON error body, when there was one. */
  readonly body: unknown;

  constructor(detail: string, options: ReviewHubErrorOptions = {}) {
    const where = options.status ? `${options.status} ${options.code ?? ""}: ` : "";
    const fields = options.fields && Object.keys(options.fields).length ? ` ${JSON.stringify(options.fields)}` : "";
    super(`${where}${detail}${fields}`, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.detail = detail;
    this.status = options.status ?? null;
    this.code = options.code ?? null;
    this.fields = options.fields ?? {};
    this.body = options.body;
  }
}

/** The agent key is missing, wrong, revoked or rotated (HTTP 401/403, socket close 4401). */
export class AuthenticationError extends ReviewHubError {}

/** No such request for this agent (another agent's request looks exactly the same). */
export class NotFoundError extends ReviewHubError {}

/** The request is not in a state that allows this (e.g. cancelling a completed request), or an
 * Idempotency-Key was reused with a different body. */
export class ConflictError extends ReviewHubError {}

/** The server refused the input; `fields` maps each offending field to a reason. */
export class ValidationError extends ReviewHubError {}

/** No answer within the wait's timeout. The request is still open (unless `elicit` withdrew it). */
export class WaitTimeout extends ReviewHubError {
  readonly requestId: string;

  constructor(detail: string, requestId: string) {
    super(detail);
    this.requestId = requestId;
  }
}

/** The request was withdrawn (cancelled by the agent) before anyone answered: there is no result. */
export class RequestWithdrawn extends ConflictError {}

/** The exception for an error response and its `{code, detail, fields}` body. */
export function errorForResponse(status: number, statusText: string, body: unknown): ReviewHubError {
  const fields = isRecord(body) ? body : {};
  const detail = typeof fields.detail === "string" && fields.detail ? fields.detail : statusText || "error";
  const options: ReviewHubErrorOptions = {
    status,
    code: typeof fields.code === "string" ? fields.code : null,
    fields: isRecord(fields.fields) ? (fields.fields as Record<string, string>) : null,
    body: isRecord(body) ? body : {},
  };
  if (status === 401 || status === 403) return new AuthenticationError(detail, options);
  if (status === 404 || status === 410) return new NotFoundError(detail, options);
  if (status === 409) return new ConflictError(detail, options);
  if (status === 400 || status === 413 || status === 422) return new ValidationError(detail, options);
  return new ReviewHubError(detail, options);
}

export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
