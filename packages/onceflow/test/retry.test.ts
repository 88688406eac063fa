/**
 * The one retry loop (withRetry) and the one backoff (backoffMs), on their
 * own; test/db/retry.test.ts runs withTransaction into a real serialization failure.
 */
import { describe, expect, it } from 'vitest';
import { backoffMs, withRetry, type RetryPolicy } from '../src/db.ts';

class Transient extends Error {}
const policy = (retries: number): RetryPolicy => ({ retries, retryable: (e) => e instanceof Transient });

/** Records the backoffs instead of sleeping them. */
function recordedWaits(): { waits: number[]; wait: (ms: number) => Promise<void> } {
  const waits: number[] = [];
  return { waits, wait: async (ms) => void waits.push(ms) };
}

describe('withRetry', () => {
  it('runs again after a retryable error and returns the first success', async () => {
    const { waits, wait } = recordedWaits();
    const seen: number[] = [];
    const result = await withRetry(
      policy(3),
      async (n) => {
        seen.push(n);
        if (n < 2) throw new Transient(`attempt ${n}`);
        return 'done';
      },
      wait,
    );
    expect(result).toBe('done');
    expect(seen).toEqual([0, 1, 2]);
    expect(waits).toHaveLength(2);
  });

  it('surfaces an error the policy does not retry at once, unchanged', async () => {
    const { waits, wait } = recordedWaits();
    const wrong = new Error('wrong, not transient');
    let attempts = 0;
    const err = await withRetry(
      policy(3),
      async () => {
        attempts++;
        throw wrong;
      },
      wait,
    ).catch((e: unknown) => e);
    expect(err).toBe(wrong);
    expect(attempts).toBe(1);
    expect(waits).toEqual([]);
  });

  it('gives up after `retries` retries with the last error', async () => {
    const { waits, wait } = recordedWaits();
    let attempts = 0;
    const err = await withRetry(
      policy(3),
      async (n) => {
        attempts++;
        throw new Transient(`attempt ${n}`);
      },
      wait,
    ).catch((e: unknown) => e);
    expect(attempts).toBe(4);
    expect((err as Error).message).toBe('attempt 3');
    expect(waits).toHaveLength(3);
  });

  it('retries: 0 runs once', async () => {
    let attempts = 0;
    await expect(
      withRetry(policy(0), async () => {
        attempts++;
        throw new Transient('once');
      }),
    ).rejects.toThrow('once');
    expect(attempts).toBe(1);
  });

  it('waits 10-20, then 20-40 ms between attempts', async () => {
    const { waits, wait } = recordedWaits();
    await withRetry(
      policy(2),
      async (n) => {
        if (n < 2) throw new Transient('again');
      },
      wait,
    );
    expect(waits[0]).toBeGreaterThanOrEqual(10);
    expect(waits[0]).toBeLessThanOrEqual(20);
    expect(waits[1]).toBeGreaterThanOrEqual(20);
    expect(waits[1]).toBeLessThanOrEqual(40);
  });
});

describe('backoffMs', () => {
  const b = { initialMs: 100, maxMs: 1_000, jitter: 0 };

  it('doubles from initialMs and stops at maxMs', () => {
    expect([0, 1, 2, 3, 4, 40].map((n) => backoffMs(b, n))).toEqual([100, 200, 400, 800, 1_000, 1_000]);
  });

  it('takes up to `jitter` of each delay off its top, never above the cap', () => {
    const equal = { ...b, jitter: 0.5 };
    expect(backoffMs(equal, 1, () => 0)).toBe(200);
    expect(backoffMs(equal, 1, () => 1)).toBe(100);
    expect(backoffMs({ ...b, jitter: 1 }, 9, () => 1)).toBe(0);
    for (let i = 0; i < 100; i++) expect(backoffMs({ ...b, jitter: 0.2 }, 9)).toBeLessThanOrEqual(1_000);
  });
});
