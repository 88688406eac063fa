/**
 * Local mode against real Postgres: the business write and the completion
 * commit in one transaction; concurrent duplicates on separate connections.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  FinalFailure,
  Ledger,
  LedgerError,
  type Json,
  type Pool,
  type PoolClient,
  type Scope,
} from '../src/index.ts';
import { LOCAL_CLAIM_VANISHED } from '../src/sql.ts';
import {
  businessTable,
  eventLog,
  lockWaiters,
  namedPool,
  scopeFor,
  statementRecorder,
  tableName,
} from './support/ledger.ts';
import { deferred, until } from './support/wait.ts';

let pool: Pool;
let appName: string;
const table = businessTable('ledger_biz');
const business = table.name;

beforeAll(async () => {
  ({ pool, appName } = namedPool(55));
  await table.create(pool);
});

afterAll(async () => {
  if (pool) await table.drop(pool);
  await pool?.end();
});

const businessRows = (scope: Scope) => table.rows(pool, scope);

/** This file's connections left inside a transaction (a clean rollback or commit leaves none). */
async function openTransactions(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where application_name = $1 and state like 'idle in transaction%'`,
    [appName],
  );
  return rows[0]!.n;
}

function insertBusiness(tx: PoolClient, scope: Scope, label: string) {
  return tx.query(`insert into ${business} (tenant_id, key, label) values ($1, $2, $3)`, [
    scope.tenantId,
    scope.key,
    label,
  ]);
}

const input = (value: unknown) => ({ schemaVersion: 1, value });

describe('runLocal', () => {
  it('runs once, then replays the stored result without running the body', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('replay');
    let calls = 0;
    const body = async (tx: PoolClient) => {
      calls++;
      await insertBusiness(tx, scope, 'only');
      return { orderId: 'o1', amount: 1250 };
    };
    const first = await ledger.runLocal(scope, input({ amount: 1250 }), body);
    const second = await ledger.runLocal(scope, input({ amount: 1250 }), body);
    expect(first).toEqual({ result: { orderId: 'o1', amount: 1250 }, replayed: false });
    expect(second).toEqual({ result: { orderId: 'o1', amount: 1250 }, replayed: true });
    expect(calls).toBe(1);
    expect(await businessRows(scope)).toEqual(['only']);
    expect(log.count('claim')).toBe(1);
    expect(log.count('complete')).toBe(1);
    expect(log.count('replay')).toBe(1);
    const record = await ledger.get(scope);
    expect(record).toMatchObject({ state: 'succeeded', ownerToken: null, leaseExpiresAt: null, attempts: 1 });
    expect(record?.completedAt).toBeInstanceOf(Date);
  });

  it('50 same-input calls on 50 connections: one runs, 49 wait behind its claim and replay', async () => {
    const ledger = new Ledger(pool, { localWaitMs: 30_000 });
    const scope = scopeFor('fifty');
    const hold = deferred();
    let calls = 0;
    const runs = Array.from({ length: 50 }, () =>
      ledger.runLocal(scope, input({ sku: 'a', qty: 1 }), async (tx) => {
        calls++;
        await insertBusiness(tx, scope, 'winner');
        await hold.promise;
        return { done: true };
      }),
    );
    // Every duplicate is now blocked on the winner's uncommitted claim row.
    await until(
      '49 duplicates blocked on the claim',
      async () => calls === 1 && (await lockWaiters(pool, appName)) === 49,
    );
    hold.resolve();
    const settled = await Promise.allSettled(runs);
    expect(calls).toBe(1);
    const values = settled.map((s) => (s.status === 'fulfilled' ? s.value : s.reason));
    expect(values.filter((v) => v.replayed === false)).toEqual([{ result: { done: true }, replayed: false }]);
    expect(values.filter((v) => v.replayed === true)).toHaveLength(49);
    for (const v of values) expect(v).toMatchObject({ result: { done: true } });
    expect(await businessRows(scope)).toEqual(['winner']);
  });

  it('50 same-input calls with a short wait: the others get the typed in_progress error, nothing else', async () => {
    const ledger = new Ledger(pool, { localWaitMs: 200 });
    const scope = scopeFor('fifty-short');
    const hold = deferred();
    let calls = 0;
    let finished = 0;
    // Settle each call as soon as it ends (a rejection must not sit unhandled while we wait).
    const runs = Array.from({ length: 50 }, () =>
      ledger
        .runLocal(scope, input({ sku: 'a' }), async (tx) => {
          calls++;
          await insertBusiness(tx, scope, 'winner');
          await hold.promise;
          return 'ok';
        })
        .then(
          (value) => ({ value }),
          (error: unknown) => ({ error }),
        )
        .finally(() => finished++),
    );
    await until('49 duplicates gave up waiting', () => finished === 49);
    hold.resolve();
    const outcomes = await Promise.all(runs);
    expect(calls).toBe(1);
    const errors = outcomes.flatMap((o) => ('error' in o ? [o.error] : []));
    expect(errors).toHaveLength(49);
    for (const err of errors) {
      expect(err).toBeInstanceOf(LedgerError);
      expect((err as LedgerError).code).toBe('in_progress');
      expect((err as LedgerError).retryAfterMs).toBeGreaterThan(0);
    }
    expect(outcomes.flatMap((o) => ('value' in o ? [o.value] : []))).toEqual([
      { result: 'ok', replayed: false },
    ]);
    expect(await businessRows(scope)).toEqual(['winner']);
    // The session's own lock_timeout is back to normal for later users of these connections.
    const { rows } = await pool.query<{ lock_timeout: string }>('show lock_timeout');
    expect(rows[0]?.lock_timeout).toBe('0');
  });

  it('50 same-input calls racing freely: exactly one run; every result is the stored one or in_progress', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('fifty-free');
    let calls = 0;
    const settled = await Promise.allSettled(
      Array.from({ length: 50 }, () =>
        ledger.runLocal(scope, input({ n: 1 }), async (tx) => {
          calls++;
          await insertBusiness(tx, scope, 'winner');
          return { n: 1 };
        }),
      ),
    );
    expect(calls).toBe(1);
    for (const s of settled) {
      if (s.status === 'fulfilled') expect(s.value.result).toEqual({ n: 1 });
      else expect(s.reason).toMatchObject({ code: 'in_progress' });
    }
    expect(settled.filter((s) => s.status === 'fulfilled' && !s.value.replayed)).toHaveLength(1);
    expect(await businessRows(scope)).toEqual(['winner']);
  });

  describe('with a last statement sent along with the completion (withCommit)', () => {
    const lastInsert = (scope: Scope, label: string) => ({
      text: `insert into ${business} (tenant_id, key, label) values ($1, $2, $3)`,
      values: [scope.tenantId, scope.key, label],
    });

    it('commits it with the body and the record, after the body; a replay sends nothing', async () => {
      const ledger = new Ledger(pool);
      const scope = scopeFor('with-commit');
      let calls = 0;
      const run = () =>
        ledger.runLocal(scope, input({ n: 1 }), async (tx, _first, withCommit) => {
          calls++;
          await insertBusiness(tx, scope, 'body');
          withCommit(lastInsert(scope, 'last'));
          return { n: 1 };
        });
      expect(await run()).toEqual({ result: { n: 1 }, replayed: false });
      expect(await run()).toEqual({ result: { n: 1 }, replayed: true });
      expect(calls).toBe(1);
      expect(await businessRows(scope)).toEqual(['body', 'last']);
    });

    it('its error rolls back the body and the record and is thrown; a retry runs again', async () => {
      const ledger = new Ledger(pool);
      const scope = scopeFor('with-commit-fails');
      await expect(
        ledger.runLocal(scope, input({ n: 1 }), async (tx, _first, withCommit) => {
          await insertBusiness(tx, scope, 'body');
          withCommit({ text: 'select 1 / 0' });
          return { n: 1 };
        }),
      ).rejects.toMatchObject({ code: '22012' });
      expect(await ledger.get(scope)).toBeNull();
      expect(await businessRows(scope)).toEqual([]);
      const retry = await ledger.runLocal(scope, input({ n: 1 }), async (_tx, _first, withCommit) => {
        withCommit(lastInsert(scope, 'retry'));
        return 'ok';
      });
      expect(retry).toEqual({ result: 'ok', replayed: false });
      expect(await businessRows(scope)).toEqual(['retry']);
      expect(await openTransactions()).toBe(0);
    });

    it('a body that throws FinalFailure stores its failure without sending them', async () => {
      const ledger = new Ledger(pool);
      const scope = scopeFor('with-commit-final');
      await expect(
        ledger.runLocal(scope, input({ n: 1 }), async (_tx, _first, withCommit) => {
          withCommit(lastInsert(scope, 'last'));
          throw new FinalFailure({ declined: true });
        }),
      ).rejects.toBeInstanceOf(FinalFailure);
      expect((await ledger.get(scope))?.state).toBe('failed');
      expect(await businessRows(scope)).toEqual([]);
    });
  });

  describe('with a first statement sent along with the claim', () => {
    const firstInsert = (scope: Scope, label: string) => ({
      text: `insert into ${business} (tenant_id, key, label) values ($1, $2, $3) returning label`,
      values: [scope.tenantId, scope.key, label],
    });

    it("runs it in the step's transaction, hands its result to the body, and replays without it", async () => {
      const ledger = new Ledger(pool);
      const scope = scopeFor('first');
      let calls = 0;
      const run = () =>
        ledger.runLocal(
          scope,
          input({ n: 1 }),
          async (tx, [first]) => {
            calls++;
            await insertBusiness(tx, scope, 'body');
            return { label: (first?.rows[0] as { label: string }).label };
          },
          { first: [firstInsert(scope, 'first')] },
        );
      expect(await run()).toEqual({ result: { label: 'first' }, replayed: false });
      expect(await run()).toEqual({ result: { label: 'first' }, replayed: true });
      expect(calls).toBe(1);
      expect(await businessRows(scope)).toEqual(['first', 'body']);
    });

    it("50 duplicates racing freely: the statement's effect is kept once, by the one that claimed", async () => {
      const ledger = new Ledger(pool);
      const scope = scopeFor('first-race');
      let calls = 0;
      const settled = await Promise.allSettled(
        Array.from({ length: 50 }, () =>
          ledger.runLocal(
            scope,
            input({ n: 1 }),
            async () => {
              calls++;
              return { n: 1 };
            },
            // Every duplicate that reaches the claim runs this before knowing it lost: rolled back.
            { first: [firstInsert(scope, 'first')] },
          ),
        ),
      );
      expect(calls).toBe(1);
      for (const s of settled) {
        if (s.status === 'fulfilled') expect(s.value.result).toEqual({ n: 1 });
        else expect(s.reason).toMatchObject({ code: 'in_progress' });
      }
      expect(await businessRows(scope)).toEqual(['first']);
    });

    it("without the replay probe, a replay and a conflict are found through the claim, and the statement's effect is not kept", async () => {
      const log = eventLog();
      const ledger = new Ledger(pool, { hooks: log });
      const scope = scopeFor('no-probe');
      let calls = 0;
      const run = (value: Json, label: string) =>
        ledger.runLocal(
          scope,
          input(value),
          async (_tx, [first]) => {
            calls++;
            return { label: (first?.rows[0] as { label: string }).label };
          },
          { first: [firstInsert(scope, label)] },
        );
      expect(await run({ n: 1 }, 'first')).toEqual({ result: { label: 'first' }, replayed: false });
      // The replay's own statement ran inside its transaction, then rolled back with it.
      expect(await run({ n: 1 }, 'replay')).toEqual({ result: { label: 'first' }, replayed: true });
      await expect(run({ n: 2 }, 'other')).rejects.toMatchObject({ code: 'conflict' });
      expect(calls).toBe(1);
      expect(log.count('replay')).toBe(1);
      expect(await businessRows(scope)).toEqual(['first']);
    });

    it("its error is the body's error: everything rolls back, nothing is stored, a retry runs once", async () => {
      const ledger = new Ledger(pool);
      const scope = scopeFor('first-fails');
      let calls = 0;
      await expect(
        ledger.runLocal(
          scope,
          input({ n: 1 }),
          async () => {
            calls++;
            return 'never';
          },
          { first: [{ text: 'select 1 / 0' }] },
        ),
      ).rejects.toMatchObject({ code: '22012' });
      expect(calls).toBe(0);
      expect(await ledger.get(scope)).toBeNull();
      const retry = await ledger.runLocal(scope, input({ n: 1 }), async () => 'ok', {
        first: [firstInsert(scope, 'retry')],
      });
      expect(retry).toEqual({ result: 'ok', replayed: false });
      expect(await businessRows(scope)).toEqual(['retry']);
      // The connection went back to the pool clean: no transaction left open on it.
      expect(await openTransactions()).toBe(0);
    });
  });

  it('25 A + 25 B: one winner; every other-input loser gets conflict, including on the insert-conflict path', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { localWaitMs: 30_000, hooks: log });
    const scope = scopeFor('ab');
    const hold = deferred();
    const ran: string[] = [];
    const call = (label: 'A' | 'B') =>
      ledger.runLocal(scope, input({ label }), async (tx) => {
        ran.push(label);
        await insertBusiness(tx, scope, label);
        await hold.promise;
        return { label };
      });
    const labels = Array.from({ length: 50 }, (_, i) => (i % 2 === 0 ? 'A' : 'B') as 'A' | 'B');
    const runs = labels.map((label) =>
      call(label).then(
        (v) => ({ label, v }),
        (err: unknown) => ({ label, err }),
      ),
    );
    // All 49 losers reached the INSERT and block on the winner's uncommitted row:
    // none of them could see the winner's fingerprint before it commits.
    await until(
      '49 losers blocked on the claim',
      async () => ran.length === 1 && (await lockWaiters(pool, appName)) === 49,
    );
    hold.resolve();
    const outcomes = await Promise.all(runs);
    const winner = ran[0];
    expect(ran).toHaveLength(1);
    for (const o of outcomes) {
      if (o.label === winner) {
        expect('v' in o && o.v.result).toEqual({ label: winner });
      } else {
        expect('err' in o && o.err).toBeInstanceOf(LedgerError);
        expect('err' in o && (o.err as LedgerError).code).toBe('conflict');
      }
    }
    expect(log.count('conflict')).toBe(25);
    // Only the winner's write committed.
    expect(await businessRows(scope)).toEqual([winner]);
    // A later loser is refused as well.
    const other = winner === 'A' ? 'B' : 'A';
    await expect(call(other)).rejects.toMatchObject({ code: 'conflict' });
    expect(ran).toHaveLength(1);
  });

  it('body throws after its business write: nothing remains; a retry then runs exactly once', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('throws');
    const boom = new Error('boom after write');
    await expect(
      ledger.runLocal(scope, input({ x: 1 }), async (tx) => {
        await insertBusiness(tx, scope, 'doomed');
        throw boom;
      }),
    ).rejects.toBe(boom);
    expect(await businessRows(scope)).toEqual([]);
    expect(await ledger.get(scope)).toBeNull();
    expect(log.count('fail')).toBe(1);

    let calls = 0;
    const body = async (tx: PoolClient) => {
      calls++;
      await insertBusiness(tx, scope, 'retry');
      return 'ok';
    };
    expect(await ledger.runLocal(scope, input({ x: 1 }), body)).toEqual({ result: 'ok', replayed: false });
    expect(await ledger.runLocal(scope, input({ x: 1 }), body)).toEqual({ result: 'ok', replayed: true });
    expect(calls).toBe(1);
    expect(await businessRows(scope)).toEqual(['retry']);
  });

  it('a body that loses a deadlock is run again as a whole; its first attempt leaves nothing', async () => {
    // Deadlocks and serialization failures mean "run it again" (the shared retry policy):
    // the first attempt rolls back, the second runs and commits, and the caller sees one run.
    const locks = tableName('ledger_deadlock');
    await pool.query(`create table ${locks} (id int primary key)`);
    await pool.query(`insert into ${locks} values (1), (2)`);
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('deadlock');
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      // The body's backend, with the shorter deadlock_timeout, is the one that detects the cycle.
      await holder.query(`set local deadlock_timeout = '60s'`);
      await holder.query(`update ${locks} set id = id where id = 2`);
      let calls = 0;
      const lockedOne = deferred();
      const closeCycle = deferred();
      const run = ledger.runLocal(scope, input({}), async (tx) => {
        const call = ++calls;
        await tx.query(`set local deadlock_timeout = '20ms'`);
        await insertBusiness(tx, scope, `attempt-${call}`);
        await tx.query(`update ${locks} set id = id where id = 1`);
        if (call === 1) {
          lockedOne.resolve();
          await closeCycle.promise;
        }
        await tx.query(`update ${locks} set id = id where id = 2`);
        return { call };
      });
      await lockedOne.promise;
      const holderWaits = holder.query(`update ${locks} set id = id where id = 1`);
      await until('the holder to wait on the body’s row', async () => (await lockWaiters(pool, appName)) > 0);
      closeCycle.resolve();
      await holderWaits; // granted once Postgres has aborted the body's first attempt
      await holder.query('commit');
      expect(await run).toEqual({ result: { call: 2 }, replayed: false });
      expect(calls).toBe(2);
      expect(await businessRows(scope)).toEqual(['attempt-2']);
      expect(log.count('fail')).toBe(1);
      expect(log.count('complete')).toBe(1);
    } finally {
      await holder.query('rollback').catch(() => undefined);
      holder.release();
      await pool.query(`drop table if exists ${locks}`);
    }
  });

  it('a completion that matches no claim rolls everything back, though COMMIT is sent with it', async () => {
    // The completion and COMMIT go out in one network write; a body that breaks
    // the claim (here by taking its owner token) must not get its writes committed.
    const ledger = new Ledger(pool);
    const scope = scopeFor('vanished');
    await expect(
      ledger.runLocal(scope, input({ x: 1 }), async (tx) => {
        await insertBusiness(tx, scope, 'half-state');
        await tx.query(
          `update operations set owner_token = 'stolen'
            where tenant_id = $1 and operation_type = $2 and key = $3`,
          [scope.tenantId, scope.operationType, scope.key],
        );
        return 'ok';
      }),
    ).rejects.toThrow(LOCAL_CLAIM_VANISHED);
    expect(await businessRows(scope)).toEqual([]);
    expect(await ledger.get(scope)).toBeNull();
    // Nothing was stored, so a retry runs normally.
    expect(
      await ledger.runLocal(scope, input({ x: 1 }), async (tx) => {
        await insertBusiness(tx, scope, 'retry');
        return 'ok';
      }),
    ).toEqual({ result: 'ok', replayed: false });
    expect(await businessRows(scope)).toEqual(['retry']);
  });

  it('FinalFailure commits the body writes with a failed record and is thrown again on replay', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('final');
    let calls = 0;
    const body = async (tx: PoolClient): Promise<Json> => {
      calls++;
      await insertBusiness(tx, scope, 'declined-audit');
      throw new FinalFailure({ code: 'insufficient_stock' });
    };
    const first = await ledger.runLocal(scope, input({ sku: 'x' }), body).catch((e: unknown) => e);
    expect(first).toBeInstanceOf(FinalFailure);
    expect(first).toMatchObject({ result: { code: 'insufficient_stock' }, replayed: false });
    const again = await ledger.runLocal(scope, input({ sku: 'x' }), body).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(FinalFailure);
    expect(again).toMatchObject({ result: { code: 'insufficient_stock' }, replayed: true });
    expect(calls).toBe(1);
    expect(await businessRows(scope)).toEqual(['declined-audit']);
    expect(await ledger.get(scope)).toMatchObject({
      state: 'failed',
      result: { code: 'insufficient_stock' },
    });
  });

  it('the same key under two tenants is two independent operations', async () => {
    const ledger = new Ledger(pool);
    const a = scopeFor('tenant-a', 'shared-key');
    const b = { ...scopeFor('tenant-b'), key: 'shared-key' };
    const ra = await ledger.runLocal(
      a,
      input({ amount: 1 }),
      async (tx) => (await insertBusiness(tx, a, 'a'), 'a'),
    );
    const rb = await ledger.runLocal(
      b,
      input({ amount: 2 }),
      async (tx) => (await insertBusiness(tx, b, 'b'), 'b'),
    );
    expect(ra).toEqual({ result: 'a', replayed: false });
    expect(rb).toEqual({ result: 'b', replayed: false });
    expect(await businessRows(a)).toEqual(['a']);
    expect(await businessRows(b)).toEqual(['b']);
    expect((await ledger.get(a))?.fingerprint).not.toBe((await ledger.get(b))?.fingerprint);
  });

  it('stores results as JSON: the first call and every replay see the same round trip', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('roundtrip');
    const at = new Date('2024-05-06T07:08:09.010Z');
    const raw = { z: 1, a: { when: at, gone: undefined }, list: [1, undefined, 'x'], big: 2 ** 53 - 1 };
    const first = await ledger.runLocal(scope, input({}), async () => raw as unknown as Json);
    const replay = await ledger.runLocal(scope, input({}), async () => 'never');
    const expected = {
      z: 1,
      a: { when: '2024-05-06T07:08:09.010Z' },
      list: [1, null, 'x'],
      big: 2 ** 53 - 1,
    };
    expect(first.result).toEqual(expected);
    expect(replay.result).toEqual(expected);
    // Key order is kept as stored (json, not jsonb).
    expect(Object.keys(replay.result as unknown as object)).toEqual(['z', 'a', 'list', 'big']);
  });

  it('rejects a result that JSON cannot represent faithfully, storing nothing', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('nan');
    await expect(
      ledger.runLocal(scope, input({}), async (tx) => {
        await insertBusiness(tx, scope, 'x');
        return { amount: Number.NaN };
      }),
    ).rejects.toMatchObject({ code: 'invalid_input' });
    expect(await ledger.get(scope)).toBeNull();
    expect(await businessRows(scope)).toEqual([]);
  });

  it('validates keys and input before touching the database', async () => {
    const ledger = new Ledger(pool);
    const base = scopeFor('invalid');
    for (const key of ['', 'has space', 'x'.repeat(256), 'caf\u00e9', 'tab\t']) {
      await expect(ledger.runLocal({ ...base, key }, input({}), async () => 1)).rejects.toMatchObject({
        code: 'invalid_key',
      });
    }
    await expect(ledger.runLocal(base, input({ amount: Infinity }), async () => 1)).rejects.toMatchObject({
      code: 'invalid_input',
    });
    expect(await ledger.get(base)).toBeNull();
  });

  it("a replay found through the claim answers the record even when the body's first statement fails", async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('replay-first-fails');
    await ledger.runLocal(scope, input({ n: 1 }), async () => ({ n: 1 }));
    // The first statements run before the claim's outcome is known; a replay must not depend on them.
    const failing = { first: [{ text: 'select 1 / 0' }] };
    await expect(ledger.runLocal(scope, input({ n: 1 }), async () => 'never', failing)).resolves.toEqual({
      result: { n: 1 },
      replayed: true,
    });
    await expect(ledger.runLocal(scope, input({ n: 2 }), async () => 'never', failing)).rejects.toMatchObject(
      {
        code: 'conflict',
      },
    );
  });

  it("runs the body with the session's own lock_timeout, not the claim's wait bound", async () => {
    const ledger = new Ledger(pool, { localWaitMs: 1234 });
    const scope = scopeFor('locktimeout');
    const { result } = await ledger.runLocal(scope, input({}), async (tx) => {
      const { rows } = await tx.query<{ lock_timeout: string }>('show lock_timeout');
      return rows[0]?.lock_timeout ?? null;
    });
    expect(result).toBe('0');
  });
});

describe("runLocal's readFirst", () => {
  const statementsOf = statementRecorder(() => pool);

  it('true reads first, false (the default) claims first; both give the same answers', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('read-first');
    let calls = 0;
    const run = (readFirst: boolean, value: Json = { n: 1 }) =>
      ledger.runLocal(
        scope,
        input(value),
        async () => {
          calls++;
          return { n: 1 };
        },
        { readFirst },
      );
    const first = await statementsOf(() => run(true));
    expect(first).toEqual([
      'ledger_select_probe',
      'BEGIN',
      'ledger_insert_local_claim',
      'ledger_finish_local_claim',
      'COMMIT',
    ]);
    // A replay: one read first, else the claim's path (BEGIN, the claim finds the record, ROLLBACK, the read).
    for (let i = 0; i < 3; i++) expect(await statementsOf(() => run(true))).toEqual(['ledger_select_probe']);
    const claimPath = ['BEGIN', 'ledger_insert_local_claim', 'ROLLBACK', 'ledger_select_probe'];
    expect(await statementsOf(() => run(false))).toEqual(claimPath);
    const byDefault = () => ledger.runLocal(scope, input({ n: 1 }), async () => ({ n: 1 }));
    expect(await statementsOf(byDefault)).toEqual(claimPath);
    await expect(run(true)).resolves.toEqual({ result: { n: 1 }, replayed: true });
    await expect(run(false)).resolves.toEqual({ result: { n: 1 }, replayed: true });
    await expect(run(true, { n: 2 })).rejects.toMatchObject({ code: 'conflict' });
    await expect(run(false, { n: 2 })).rejects.toMatchObject({ code: 'conflict' });
    expect(calls).toBe(1);
  });

  it('refuses a readFirst that is not true or false, before touching the database', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('bad-read-first');
    const sent = await statementsOf(() =>
      expect(
        ledger.runLocal(scope, input({}), async () => 1, { readFirst: 'yes' as unknown as boolean }),
      ).rejects.toMatchObject({ code: 'invalid_input' }),
    );
    expect(sent).toEqual([]);
    expect(await ledger.get(scope)).toBeNull();
  });
});
