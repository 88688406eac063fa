/**
 * The client's retry policy, as pure functions so it can be tested exactly.
 *
 * What is retried, and why:
 * - network errors (connection refused/reset, a response lost mid-flight, a
 *   per-attempt timeout): the request may or may not have run; resending it
 *   under the SAME Idempotency-Key is what makes that safe;
 * - 5xx: never stored as final by the API, so a retry runs normally;
 * - 409: the first request with this key is still running; the retry gets
 *   the replay once it finishes;
 * - 408, 425, 429: the server asked us to come back later.
 * Every other 4xx (400, 401, 403, 404, 413, 415, 422, ...) is a property of
 * the request itself: resending the same bytes can only get the same answer.
 *
 * Delays are exponential with full jitter (a random delay in [0, cap]), so a
 * crowd of clients retrying after one outage spreads out instead of arriving
 * together, and never shorter than the server's Retry-After.
 */

export interface RetryOptions {
  /** Attempts in total, the first included. Default 8. */
  maxAttempts: number;
  /** Cap of the first retry's delay; doubles per retry. Default 200 ms. */
  baseDelayMs: number;
  /** Upper bound of any computed (jittered) delay. Default 10 s. */
  maxDelayMs: number;
  /** No retry starts after this much time since the first attempt. Default 60 s. */
  maxElapsedMs: number;
  /** A Retry-After longer than this ends the retries (the caller decides what to do). Default 60 s. */
  maxRetryAfterMs: number;
  /** Per attempt; a timed-out attempt counts as a network error. Default 30 s. */
  attemptTimeoutMs: number;
}

export const DEFAULT_RETRY: RetryOptions = {
  maxAttempts: 8,
  baseDelayMs: 200,
  maxDelayMs: 10_000,
  maxElapsedMs: 60_000,
  maxRetryAfterMs: 60_000,
  attemptTimeoutMs: 30_000,
};

const RETRYABLE_4XX = new Set([408, 409, 425, 429]);

export function isRetryableStatus(status: number): boolean {
  return status >= 500 || RETRYABLE_4XX.has(status);
}

/**
 * Retry-After in milliseconds from now: delta-seconds or an HTTP date (RFC 9110 10.2.3).
 * undefined when absent or unparseable; a date in the past is 0.
 */
export function parseRetryAfter(value: string | null | undefined, now = Date.now()): number | undefined {
  if (value === null || value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  // HTTP-date forms all start with a day name; Date.parse alone would take "-1" as a year.
  if (!/^[A-Za-z]{3}/.test(v)) return undefined;
  const at = Date.parse(v);
  if (Number.isNaN(at)) return undefined;
  return Math.max(0, at - now);
}

/**
 * The delay before retry number `retry` (1 = the first retry): full jitter,
 * random in [0, min(maxDelayMs, baseDelayMs * 2^(retry-1))], raised to the
 * server's Retry-After when it gave one.
 */
export function backoffDelayMs(
  retry: number,
  opts: Pick<RetryOptions, 'baseDelayMs' | 'maxDelayMs'>,
  retryAfterMs: number | undefined,
  random: () => number = Math.random,
): number {
  const cap = Math.min(opts.maxDelayMs, opts.baseDelayMs * 2 ** Math.max(0, retry - 1));
  const jittered = Math.floor(random() * cap);
  return retryAfterMs === undefined ? jittered : Math.max(retryAfterMs, jittered);
}
