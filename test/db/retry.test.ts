/**
 * The one retry helper (src/db/retry.ts): its policy on its own, and what
 * it does for withTransaction against a real serialization failure.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SQLSTATE, isSqlState, withTransaction, type Pool } from '../../src/db/index.ts';
import { retryDelayMs, withRetry, type RetryPolicy } from '../../src/db/retry.ts';
import { testPool, uniq } from '../support/env.ts';
import { deferred } from '../support/wait.ts';

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

  it('backs off exponentially from 10 ms, with up to 20 ms of jitter', async () => {
    expect([0, 1, 2].map((n) => retryDelayMs(n, () => 0))).toEqual([10, 20, 40]);
    expect([0, 1, 2].map((n) => retryDelayMs(n, () => 0.999))).toEqual([
      10 + 0.999 * 20,
      20 + 0.999 * 20,
      40 + 0.999 * 20,
    ]);
    const { waits, wait } = recordedWaits();
    await withRetry(
      policy(2),
      async (n) => {
        if (n < 2) throw new Transient('again');
      },
      wait,
    );
    expect(waits[0]).toBeGreaterThanOrEqual(10);
    expect(waits[0]).toBeLessThan(30);
    expect(waits[1]).toBeGreaterThanOrEqual(20);
    expect(waits[1]).toBeLessThan(40);
  });
});

describe('withTransaction: a real serialization failure', () => {
  let pool: Pool;
  const table = `retry_${uniq('t').replace(/\W/g, '_').toLowerCase()}`;

  beforeAll(async () => {
    pool = testPool(4);
    await pool.query(`create table ${table} (id int primary key, n int not null)`);
    await pool.query(`insert into ${table} values (1, 0)`);
  });
  afterAll(async () => {
    await pool?.query(`drop table if exists ${table}`);
    await pool?.end();
  });

  /**
   * A REPEATABLE READ transaction that read the row, then updates it after
   * another transaction changed it in between: 40001 on the first attempt
   * (the test commits its update while `cb` waits), none after.
   */
  async function racedOnce(retries: number): Promise<{ attempts: number; outcome: unknown }> {
    let attempts = 0;
    const read = deferred();
    const changed = deferred();
    const running = withTransaction(
      pool,
      async (tx) => {
        attempts++;
        await tx.query('set transaction isolation level repeatable read');
        await tx.query(`select n from ${table} where id = 1`); // takes the snapshot
        if (attempts === 1) {
          read.resolve();
          await changed.promise;
        }
        await tx.query(`update ${table} set n = n + 1 where id = 1`);
        return attempts;
      },
      { retries },
    ).catch((e: unknown) => e);
    await read.promise;
    await pool.query(`update ${table} set n = n + 100 where id = 1`);
    changed.resolve();
    return { attempts, outcome: await running };
  }

  it('is retried and commits once', async () => {
    const before = (await pool.query<{ n: number }>(`select n from ${table} where id = 1`)).rows[0]!.n;
    const { outcome } = await racedOnce(3);
    expect(outcome).toBe(2);
    const after = (await pool.query<{ n: number }>(`select n from ${table} where id = 1`)).rows[0]!.n;
    expect(after).toBe(before + 101);
  });

  it('with retries: 0, surfaces as 40001 and leaves nothing', async () => {
    const before = (await pool.query<{ n: number }>(`select n from ${table} where id = 1`)).rows[0]!.n;
    const { outcome } = await racedOnce(0);
    expect(isSqlState(outcome, SQLSTATE.serializationFailure)).toBe(true);
    const after = (await pool.query<{ n: number }>(`select n from ${table} where id = 1`)).rows[0]!.n;
    expect(after).toBe(before + 100);
  });
});
