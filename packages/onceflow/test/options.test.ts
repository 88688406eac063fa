/**
 * Ledger options are validated when the ledger is built, and no ledger call
 * can leave a poisoned connection in the pool: an unrelated later call on the
 * same one-connection pool still works.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger, LedgerError, type Pool } from '../src/index.ts';
import { withClient } from '../src/db.ts';
import { MAX_TIMER_MS } from '../src/ledger.ts';
import { testPool, uniq } from './support/env.ts';

let pool: Pool;
beforeAll(() => {
  pool = testPool(1);
});
afterAll(async () => {
  await pool?.end();
});

const invalid = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(LedgerError);
    expect((err as LedgerError).code).toBe('invalid_input');
    return;
  }
  throw new Error('expected LedgerError invalid_input');
};

describe('ledger options', () => {
  it('rejects timer options above 2^31-1 ms (Node timers and lock_timeout stop there) as invalid_input', () => {
    invalid(() => new Ledger(pool, { localWaitMs: MAX_TIMER_MS + 1 }));
    invalid(() => new Ledger(pool, { leaseMs: MAX_TIMER_MS + 1 }));
    invalid(() => new Ledger(pool, { localWaitMs: 0 }));
    invalid(() => new Ledger(pool, { leaseMs: 1.5 }));
    expect(new Ledger(pool, { localWaitMs: MAX_TIMER_MS, leaseMs: MAX_TIMER_MS })).toBeInstanceOf(Ledger);
  });

  it('rejects a per-call lease above 2^31-1 ms as invalid_input', async () => {
    const ledger = new Ledger(pool);
    const scope = { tenantId: 'acme', operationType: 'test.options', key: uniq('k') };
    await expect(
      ledger.claim(scope, { schemaVersion: 1, value: {} }, { leaseMs: MAX_TIMER_MS + 1 }),
    ).rejects.toMatchObject({ code: 'invalid_input' });
  });

  it('a statement failing between BEGIN and the rollback path leaves no aborted transaction in the pool', async () => {
    // What localWaitMs above 2^31-1 used to do: `begin; ...; set local lock_timeout = <too big>`
    // fails after BEGIN, before the ledger's try/rollback.
    await expect(
      withClient(pool, async (c) => {
        await c.query('begin');
        await c.query(`set local lock_timeout = ${MAX_TIMER_MS + 1}`);
      }),
    ).rejects.toThrow();
    const ledger = new Ledger(pool);
    const scope = { tenantId: 'acme', operationType: 'test.options', key: uniq('k') };
    const run = await ledger.runLocal(scope, { schemaVersion: 1, value: { n: 1 } }, async (tx) => {
      const { rows } = await tx.query<{ n: number }>('select 1 as n');
      return rows[0]!.n;
    });
    expect(run).toEqual({ result: 1, replayed: false });
  });
});
