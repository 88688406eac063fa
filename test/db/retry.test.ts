/**
 * withTransaction (the core's retry loop, packages/onceflow/test/retry.test.ts)
 * against a real serialization failure.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SQLSTATE, isSqlState, withTransaction, type Pool } from '../../src/db/index.ts';
import { testPool, uniq } from '../support/env.ts';
import { deferred } from '../support/wait.ts';

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
