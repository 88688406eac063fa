/**
 * A per-address throttle on failed credential checks: past `max` failures in a fixed window the
 * check is skipped and refused, so a guesser learns nothing and costs nothing. Bounded memory: when
 * full, the oldest window (the Map's first entry) is forgotten. Per process.
 */
export interface FailureThrottleOptions {
  /** Failures one address may make per window; the next attempt is refused. */
  max: number;
  windowMs: number;
  maxTrackedAddresses?: number;
  now?: () => number;
}

export class FailureThrottle {
  readonly #failures = new Map<string, { count: number; resetAt: number }>();
  readonly #max: number;
  readonly #windowMs: number;
  readonly #maxTracked: number;
  readonly #now: () => number;

  constructor(opts: FailureThrottleOptions) {
    if (!Number.isSafeInteger(opts.max) || opts.max < 1) throw new Error('FailureThrottle: max must be >= 1');
    if (!(opts.windowMs > 0)) throw new Error('FailureThrottle: windowMs must be > 0');
    this.#max = opts.max;
    this.#windowMs = opts.windowMs;
    this.#maxTracked = opts.maxTrackedAddresses ?? 50_000;
    this.#now = opts.now ?? Date.now;
  }

  /** Whole seconds until `address` may try again, or 0 if it may try now. */
  retryAfterSeconds(address: string): number {
    const entry = this.#failures.get(address);
    if (!entry) return 0;
    const now = this.#now();
    if (entry.resetAt <= now) {
      this.#failures.delete(address);
      return 0;
    }
    return entry.count >= this.#max ? Math.max(1, Math.ceil((entry.resetAt - now) / 1000)) : 0;
  }

  /** Counts one failed attempt from `address`. */
  fail(address: string): void {
    const now = this.#now();
    const entry = this.#failures.get(address);
    if (entry && entry.resetAt > now) {
      entry.count += 1;
      return;
    }
    this.#failures.delete(address);
    if (this.#failures.size >= this.#maxTracked) this.#failures.delete(this.#failures.keys().next().value!);
    this.#failures.set(address, { count: 1, resetAt: now + this.#windowMs });
  }

  /**
   * Takes back a failure counted before an async check, so concurrent attempts can't all slip past the
   * limit.
   */
  forgive(address: string): void {
    const entry = this.#failures.get(address);
    if (!entry) return;
    if (entry.count <= 1) this.#failures.delete(address);
    else entry.count -= 1;
  }

  /** Addresses currently tracked (for tests of the memory bound). */
  get size(): number {
    return this.#failures.size;
  }
}
