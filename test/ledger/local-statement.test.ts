/**
 * Local mode in one statement (Ledger.runLocalStatement) against real
 * Postgres: the business write and the record are one autocommitted
 * statement; a replay or a duplicate aborts its own business write.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool } from '../../src/db/index.ts';
import { Ledger, LedgerError, type LocalStatement, type Scope } from '../../src/ledger/index.ts';
import { businessTable, eventLog, lockWaiters, namedPool, scopeFor } from './support.ts';
import { deferred, until } from '../support/wait.ts';

let pool: Pool;
let appName: string;
const table = businessTable('ledger_stmt_biz');
const business = table.name;

beforeAll(async () => {
  ({ pool, appName } = namedPool(30));
  await table.create(pool);
});

afterAll(async () => {
  if (pool) await table.drop(pool);
  await pool?.end();
});

const businessRows = (scope: Scope) => table.rows(pool, scope);

/** Inserts a business row labelled `label` and stores `{ label }`; `skip` writes and stores nothing. */
function insertBusiness(scope: Scope, label: string, opts: { skip?: boolean } = {}): LocalStatement {
  return {
    name: `test_${business.replace(/\W/g, '').toLowerCase()}`,
    ctes: `biz as (
             insert into ${business} (tenant_id, key, label)
             select $1, $2, $3 where exists (select from ledger_wait) and not $4::boolean
             returning label),
           ledger_result as (select json_build_object('label', label) as result from biz)`,
    values: [scope.tenantId, scope.key, label, opts.skip ?? false],
  };
}

const input = (value: unknown) => ({ schemaVersion: 1, value });

describe('runLocalStatement', () => {
  it('runs once, then replays the stored result; the replay’s own write is undone with its statement', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('stmt-replay');
    const first = await ledger.runLocalStatement(scope, input({ n: 1 }), insertBusiness(scope, 'first'));
    const second = await ledger.runLocalStatement(scope, input({ n: 1 }), insertBusiness(scope, 'second'));
    expect(first).toEqual({ result: { label: 'first' }, replayed: false });
    expect(second).toEqual({ result: { label: 'first' }, replayed: true });
    expect(await businessRows(scope)).toEqual(['first']);
    expect(log.count('claim')).toBe(1);
    expect(log.count('complete')).toBe(1);
    expect(log.count('replay')).toBe(1);
    const record = await ledger.get(scope);
    expect(record).toMatchObject({
      state: 'succeeded',
      ownerToken: null,
      leaseExpiresAt: null,
      attempts: 1,
      result: { label: 'first' },
    });
    expect(record?.completedAt).toBeInstanceOf(Date);
  });

  it('stores nothing and returns null when the body yields no result row', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-none');
    expect(
      await ledger.runLocalStatement(scope, input({}), insertBusiness(scope, 'x', { skip: true })),
    ).toBeNull();
    expect(await ledger.get(scope)).toBeNull();
    expect(await businessRows(scope)).toEqual([]);
    // Nothing stored, so a later run is a first run.
    expect(await ledger.runLocalStatement(scope, input({}), insertBusiness(scope, 'y'))).toEqual({
      result: { label: 'y' },
      replayed: false,
    });
  });

  it('another input under the same key is a conflict, and its write is undone', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-conflict');
    await ledger.runLocalStatement(scope, input({ amount: 1 }), insertBusiness(scope, 'a'));
    const err = await ledger
      .runLocalStatement(scope, input({ amount: 2 }), insertBusiness(scope, 'b'))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LedgerError);
    expect((err as LedgerError).code).toBe('conflict');
    expect(await businessRows(scope)).toEqual(['a']);
  });

  it('20 same-input calls on 20 connections: one write, every caller gets its result', async () => {
    const ledger = new Ledger(pool, { localWaitMs: 30_000 });
    const scope = scopeFor('stmt-twenty');
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        ledger.runLocalStatement(scope, input({ sku: 'a' }), insertBusiness(scope, `call-${i}`)),
      ),
    );
    const rows = await businessRows(scope);
    expect(rows).toHaveLength(1);
    for (const outcome of outcomes) expect(outcome?.result).toEqual({ label: rows[0] });
    expect(outcomes.filter((o) => o?.replayed === false)).toHaveLength(1);
  });

  it('waits for a duplicate’s uncommitted record up to localWaitMs, then gives in_progress; later replays it', async () => {
    const scope = scopeFor('stmt-wait');
    const hold = deferred();
    const claimed = deferred();
    // A runLocal of the same operation holds its uncommitted claim until released.
    const holder = new Ledger(pool).runLocal(scope, input({ sku: 'a' }), async () => {
      claimed.resolve();
      await hold.promise;
      return { label: 'holder' };
    });
    await claimed.promise;
    const ledger = new Ledger(pool, { localWaitMs: 300 });
    const waiting = ledger
      .runLocalStatement(scope, input({ sku: 'a' }), insertBusiness(scope, 'waiter'))
      .catch((e: unknown) => e);
    await until(
      'the statement to wait on the held claim',
      async () => (await lockWaiters(pool, appName)) > 0,
    );
    const err = await waiting;
    expect(err).toBeInstanceOf(LedgerError);
    expect((err as LedgerError).code).toBe('in_progress');
    expect((err as LedgerError).retryAfterMs).toBeGreaterThan(0);
    hold.resolve();
    await holder;
    expect(await businessRows(scope)).toEqual([]);
    expect(
      await ledger.runLocalStatement(scope, input({ sku: 'a' }), insertBusiness(scope, 'again')),
    ).toEqual({
      result: { label: 'holder' },
      replayed: true,
    });
    expect(await businessRows(scope)).toEqual([]);
  });

  it('a duplicate that rolls back lets the waiting statement run', async () => {
    const scope = scopeFor('stmt-rollback');
    const hold = deferred();
    const claimed = deferred();
    const holder = new Ledger(pool)
      .runLocal(scope, input({ sku: 'a' }), async () => {
        claimed.resolve();
        await hold.promise;
        throw new Error('the first attempt failed');
      })
      .catch((e: unknown) => e);
    await claimed.promise;
    const waiting = new Ledger(pool, { localWaitMs: 30_000 }).runLocalStatement(
      scope,
      input({ sku: 'a' }),
      insertBusiness(scope, 'second'),
    );
    await until(
      'the statement to wait on the held claim',
      async () => (await lockWaiters(pool, appName)) > 0,
    );
    hold.resolve();
    expect(await holder).toBeInstanceOf(Error);
    expect(await waiting).toEqual({ result: { label: 'second' }, replayed: false });
    expect(await businessRows(scope)).toEqual(['second']);
  });

  it('an external claim on the key: in_progress, and the write is undone', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-external');
    const claim = await ledger.claim(scope, input({ sku: 'a' }));
    expect(claim.kind).toBe('claimed');
    const err = await ledger
      .runLocalStatement(scope, input({ sku: 'a' }), insertBusiness(scope, 'beside'))
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LedgerError);
    expect((err as LedgerError).code).toBe('in_progress');
    expect(await businessRows(scope)).toEqual([]);
  });

  it('a failing body stores nothing and throws its error', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-error');
    const failing: LocalStatement = {
      name: 'test_failing_body',
      ctes: `ledger_result as (select json_build_object('n', 1 / $1::int) as result from ledger_wait)`,
      values: [0],
    };
    await expect(ledger.runLocalStatement(scope, input({}), failing)).rejects.toMatchObject({
      code: '22012',
    });
    expect(await ledger.get(scope)).toBeNull();
  });

  it('refuses a statement name Postgres would truncate or that is not a plain identifier', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-name');
    for (const name of ['x'.repeat(51), 'Bad-Name', '']) {
      const err = await ledger
        .runLocalStatement(scope, input({}), { ...insertBusiness(scope, 'x'), name })
        .catch((e: unknown) => e);
      expect((err as LedgerError).code).toBe('invalid_input');
    }
    expect(await businessRows(scope)).toEqual([]);
  });

  it('leaves the connection’s lock_timeout as it was', async () => {
    const single = namedPool(1).pool;
    try {
      const ledger = new Ledger(single, { localWaitMs: 1234 });
      const scope = scopeFor('stmt-locktimeout');
      await ledger.runLocalStatement(scope, input({}), insertBusiness(scope, 'x'));
      const { rows } = await single.query<{ lock_timeout: string }>('show lock_timeout');
      expect(rows[0]?.lock_timeout).toBe('0');
    } finally {
      await single.end();
    }
  });
});
