/**
 * Waiting in tests: one poller for state another process, connection or
 * background loop will change, and one deferred promise for hand-offs
 * between a test and the code it holds at a hook. A test waits for the
 * condition it needs, never for a fixed time.
 */
import { inspect } from 'node:util';

export interface UntilOptions {
  /** Default 30 s; generous, since the machine running the suite may be loaded. */
  timeoutMs?: number;
  /** Pause between probes; default 50 ms. */
  intervalMs?: number;
}

type Truthy<T> = Exclude<T, undefined | null | false | 0 | ''>;

/**
 * Probes until the value is truthy (or `done` accepts it), and returns that
 * value. On timeout it throws an error naming what it waited for and the last
 * value it saw. A probe that throws ends the wait with that error.
 */
export async function until<T>(
  what: string,
  probe: () => T | Promise<T>,
  opts: UntilOptions & { done: (value: NoInfer<T>) => boolean },
): Promise<T>;
export async function until<T>(
  what: string,
  probe: () => T | Promise<T>,
  opts?: UntilOptions,
): Promise<Truthy<T>>;
export async function until<T>(
  what: string,
  probe: () => T | Promise<T>,
  opts: UntilOptions & { done?: (value: T) => boolean } = {},
): Promise<T> {
  const { done = Boolean, timeoutMs = 30_000, intervalMs = 50 } = opts;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (done(value)) return value;
    if (Date.now() > deadline) {
      const last = inspect(value, { depth: 4, breakLength: Infinity, maxStringLength: 500 });
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what} (last value: ${last})`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

export interface Deferred<T = void> {
  promise: Promise<T>;
  resolve(value: T): void;
  reject(err: unknown): void;
}

/** A promise with its resolve and reject in hand. */
export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (err: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}
