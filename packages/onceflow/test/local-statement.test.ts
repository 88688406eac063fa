/**
 * Local mode in one statement (Ledger.runLocalStatement) against real
 * Postgres: the business write and the record are one autocommitted
 * statement; a replay or a duplicate aborts its own business write.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Ledger,
  LedgerError,
  LocalStatement,
  type LocalStatementBody,
  type Pool,
  type Scope,
} from '../src/index.ts';
import { LOCAL_STATEMENT } from '../src/local-statement.ts';
import { businessTable, eventLog, lockWaiters, namedPool, scopeFor } from './support/ledger.ts';
import { deferred, until } from './support/wait.ts';

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
  return new LocalStatement({
    name: `test_${business.replace(/\W/g, '').toLowerCase()}`,
    ctes: `biz as (
             insert into ${business} (tenant_id, key, label)
             select $1, $2, $3 where exists (select from ledger_wait) and not $4::boolean
             returning label),
           ledger_result as (select json_build_object('label', label) as result from biz)`,
    values: [scope.tenantId, scope.key, label, opts.skip ?? false],
  });
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

  it('readFirst replays a stored record even when the statement would now yield no row', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-read-first');
    await ledger.runLocalStatement(scope, input({ n: 1 }), insertBusiness(scope, 'first'));
    // Without reading first, a statement that yields no row stores nothing and finds nothing.
    expect(
      await ledger.runLocalStatement(scope, input({ n: 1 }), insertBusiness(scope, 'x', { skip: true })),
    ).toBeNull();
    expect(
      await ledger.runLocalStatement(scope, input({ n: 1 }), insertBusiness(scope, 'x', { skip: true }), {
        readFirst: true,
      }),
    ).toEqual({ result: { label: 'first' }, replayed: true });
    // Reading first still checks the input.
    const err = await ledger
      .runLocalStatement(scope, input({ n: 2 }), insertBusiness(scope, 'y'), { readFirst: true })
      .catch((e: unknown) => e);
    expect((err as LedgerError).code).toBe('conflict');
    // And with nothing stored, it runs the statement.
    const fresh = scopeFor('stmt-read-first-fresh');
    expect(
      await ledger.runLocalStatement(fresh, input({}), insertBusiness(fresh, 'z'), { readFirst: true }),
    ).toEqual({ result: { label: 'z' }, replayed: false });
    expect(await businessRows(scope)).toEqual(['first']);
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
    const failing = new LocalStatement({
      name: 'test_failing_body',
      ctes: `ledger_result as (select json_build_object('n', 1 / $1::int) as result from ledger_wait)`,
      values: [0],
    });
    await expect(ledger.runLocalStatement(scope, input({}), failing)).rejects.toMatchObject({
      code: '22012',
    });
    expect(await ledger.get(scope)).toBeNull();
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
  it('runs only a body built (and so checked) by LocalStatement', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-handmade');
    const built = insertBusiness(scope, 'x');
    // The same fields by hand: the type refuses it, and so does the ledger at run time.
    const handmade = {
      name: built.name,
      text: built.text,
      values: built.values,
    } as unknown as LocalStatement;
    const err = await ledger.runLocalStatement(scope, input({}), handmade).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LedgerError);
    expect((err as LedgerError).code).toBe('invalid_input');
    expect((err as LedgerError).message).toMatch(/new LocalStatement/);
    expect(await ledger.get(scope)).toBeNull();
    expect(await businessRows(scope)).toEqual([]);
  });

  it('refuses a readFirst that is not true or false, as runLocal does, and stores nothing', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('stmt-bad-read-first');
    const readFirst = 'yes' as unknown as boolean;
    await expect(
      ledger.runLocalStatement(scope, input({}), insertBusiness(scope, 'x'), { readFirst }),
    ).rejects.toMatchObject({ code: 'invalid_input', message: /readFirst/ });
    expect(await ledger.get(scope)).toBeNull();
    expect(await businessRows(scope)).toEqual([]);
  });
});

describe('LocalStatement: the body’s contract is checked when it is built', () => {
  const result = `ledger_result as (select json_build_object('n', $1::int) as result from ledger_wait)`;
  const wrong: [string, LocalStatementBody, RegExp][] = [
    ['a name Postgres would truncate', { name: 'x'.repeat(51), ctes: result, values: [1] }, /name is 1-50/],
    [
      'a name that is not a plain identifier',
      { name: 'Bad-Name', ctes: result, values: [1] },
      /name is 1-50/,
    ],
    ['an empty name', { name: '', ctes: result, values: [1] }, /name is 1-50/],
    [
      'no ledger_result',
      { name: 't_no_result', ctes: `other as (select 1 as result)`, values: [] },
      /must define ledger_result/,
    ],
    [
      'ledger_result mentioned only in a comment and a string',
      {
        name: 't_result_in_comment',
        ctes: `other as (select 'ledger_result as (' as result) -- ledger_result as (select 1 as result)`,
        values: [],
      },
      /must define ledger_result/,
    ],
    [
      'ledger_result defined twice',
      { name: 't_twice', ctes: `${result}, ledger_result as (select 1 as result)`, values: [1] },
      /defined twice/,
    ],
    [
      'no result column',
      {
        name: 't_no_column',
        ctes: `ledger_result as (select json_build_object('a', 1) as outcome)`,
        values: [],
      },
      /name its one column result/,
    ],
    [
      'a column list that is not (result)',
      { name: 't_column_list', ctes: `ledger_result (outcome) as (select '{}'::json)`, values: [] },
      /name its one column result/,
    ],
    [
      'ledger_result that writes',
      {
        name: 't_result_writes',
        ctes: `ledger_result as (insert into t (x) select 1 from ledger_wait returning '{}'::json as result)`,
        values: [],
      },
      /must be a select/,
    ],
    [
      "the ledger's own CTE name",
      { name: 't_reserved', ctes: `ledger_wait as (select 1), ${result}`, values: [1] },
      /ledger_wait is the ledger's name/,
    ],
    ['a leading with', { name: 't_with', ctes: `with ${result}`, values: [1] }, /without `with`/],
    [
      'a parameter past its values (it would read the ledger’s own)',
      { name: 't_past', ctes: result.replace('$1::int', '$2::int'), values: [1] },
      /\$2 has no value \(1 given\)/,
    ],
    [
      'a value no parameter uses',
      { name: 't_unused', ctes: result, values: [1, 2] },
      /\$2 is given a value but never used/,
    ],
    [
      'a write that never references ledger_wait',
      {
        name: 't_unbounded',
        ctes: `biz as (update orders set status = status where id = $1 returning id),
               ledger_result as (select json_build_object('id', id) as result from biz)`,
        values: ['o1'],
      },
      /biz writes or locks rows but references neither ledger_wait/,
    ],
    [
      'values that are not an array',
      { name: 't_values', ctes: result, values: 1 as never },
      /values must be an array/,
    ],
  ];
  for (const [what, body, message] of wrong) {
    it(`refuses ${what}`, () => {
      let err: unknown;
      try {
        new LocalStatement(body);
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(LedgerError);
      expect((err as LedgerError).code).toBe('invalid_input');
      expect((err as LedgerError).message).toMatch(message);
    });
  }

  it('accepts a body that keeps the contract (a `$2` inside a string literal is no parameter), and it runs', async () => {
    const statement = new LocalStatement({
      name: 't_ok_literal',
      ctes: `ledger_result (result) as (select json_build_object('price', 'US$2', 'n', $1::int) from ledger_wait)`,
      values: [7],
    });
    // The ledger's parameters follow the body's.
    expect(statement.text).toContain(`set_config('lock_timeout', $2::int::text, true)`);
    expect(statement.text).toContain(`from ${LOCAL_STATEMENT.result} r, ${LOCAL_STATEMENT.wait}`);
    const scope = scopeFor('stmt-literal');
    expect(await new Ledger(pool).runLocalStatement(scope, input({}), statement)).toEqual({
      result: { price: 'US$2', n: 7 },
      replayed: false,
    });
  });

  it('keeps one text per name, and the same number of values for it', () => {
    const body = { name: 't_one_text', ctes: result, values: [1] };
    expect(new LocalStatement(body).values).toEqual([1]);
    expect(new LocalStatement({ ...body, values: [2] }).values).toEqual([2]);
    expect(() => new LocalStatement({ ...body, ctes: `${result} ` })).toThrow(
      /already used for another text/,
    );
    expect(() => new LocalStatement({ ...body, values: [1, 2] })).toThrow(/takes 1 values, got 2/);
  });
});
