/** Small promise primitives for waiting: a settle-from-outside promise, an abortable sleep, backoff. */

export class Deferred<T> {
  readonly promise: Promise<T>;
  settled = false;
  private resolveFn!: (value: T) => void;
  private rejectFn!: (reason: unknown) => void;

  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolveFn = resolve;
      this.rejectFn = reject;
    });
    // A deferred nobody awaits any more must not become an unhandled rejection.
    this.promise.catch(() => undefined);
  }

  resolve(value: T): void {
    if (this.settled) return;
    this.settled = true;
    this.resolveFn(value);
  }

  reject(reason: unknown): void {
    if (this.settled) return;
    this.settled = true;
    this.rejectFn(reason);
  }
}

/** Resolves after `ms` (never, for Infinity), or as soon as `signal` aborts. Never rejects. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    // setTimeout overflows past 2^31-1 ms; an infinite sleep ends only through the signal.
    const timer = Number.isFinite(ms) ? setTimeout(done, Math.max(0, Math.min(ms, 2 ** 31 - 1))) : undefined;
    signal?.addEventListener("abort", done, { once: true });
  });
}

/** Exponential backoff with jitter: attempt 0 waits about `baseMs`, doubling up to `capMs`. */
export function backoffDelay(attempt: number, baseMs = 250, capMs = 5000): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** attempt);
  return ceiling / 2 + Math.random() * (ceiling / 2);
}

/** Full jitter over `windowMs`: the first reconnect after a server drops its sockets. Every client that process
 * held saw the drop at the same instant; spread uniformly, they come back at a steady rate, not all at once. */
export function spreadDelay(windowMs: number): number {
  return Math.random() * windowMs;
}

/** The window a reconnect is spread over after `refusals` busy refusals (4013 or 1013) in a row: doubled by each, up to `capMs`, so the
 * retries of a storm thin out instead of keeping the server busy. */
export function spreadWindow(windowMs: number, refusals: number, capMs = 60_000): number {
  return Math.min(windowMs * 2 ** Math.min(Math.max(refusals - 1, 0), 16), Math.max(windowMs, capMs));
}

/** A controller whose signal also aborts when any of `parents` does (AbortSignal.any is not everywhere yet). */
export function linkedController(...parents: (AbortSignal | undefined)[]): AbortController {
  const controller = new AbortController();
  for (const parent of parents) {
    if (!parent) continue;
    if (parent.aborted) {
      controller.abort(parent.reason);
      break;
    }
    parent.addEventListener("abort", () => controller.abort(parent.reason), {
      once: true,
      signal: controller.signal,
    });
  }
  return controller;
}

export function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException("The operation was aborted.", "AbortError");
}
