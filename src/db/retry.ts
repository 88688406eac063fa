/**
 * The one retry loop for database work that may be run again as a whole: a
 * transaction that lost a serialization race or a deadlock, or a ledger
 * step whose record changed between two of its statements. Every caller
 * states its policy (which errors, how many times); the backoff is shared.
 */

export interface RetryPolicy {
  /** Runs after the first, at most; so at most `retries + 1` attempts in all. */
  retries: number;
  /** True for an error that means "run it again", not "wrong". Any other error surfaces at once. */
  retryable(err: unknown): boolean;
}

/**
 * Backoff before retry number `retry` (0 for the first retry): 10 ms doubling
 * each time, plus up to 20 ms of jitter so that the transactions that just
 * collided do not collide again in lockstep. With the callers' 3 retries the
 * worst case is 10 + 20 + 40 ms plus jitter: a step waits at most ~130 ms
 * in all before the last error surfaces.
 */
export function retryDelayMs(retry: number, random: () => number = Math.random): number {
  return 10 * 2 ** retry + random() * 20;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * Runs `attempt` (passing its 0-based number) until it returns, an error the
 * policy does not retry is thrown (it surfaces unchanged, at once), or the
 * retries are used up (the last error surfaces unchanged). Each attempt must
 * leave nothing behind when it throws: the backoff starts only after it has
 * returned its connection. `wait` exists for tests that count the backoffs.
 */
export async function withRetry<T>(
  policy: RetryPolicy,
  attempt: (n: number) => Promise<T>,
  wait: (ms: number) => Promise<void> = sleep,
): Promise<T> {
  for (let n = 0; ; n++) {
    try {
      return await attempt(n);
    } catch (err) {
      if (n >= policy.retries || !policy.retryable(err)) throw err;
    }
    await wait(retryDelayMs(n));
  }
}
