/**
 * External mode against real Postgres: claims, fencing, takeovers that
 * reconcile first, unknown outcomes, settling, and a claim holder killed
 * with SIGKILL in a separate OS process.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import readline from 'node:readline';
import {
  Ledger,
  LedgerError,
  downstreamKey,
  type ExternalOutcome,
  type Json,
  type Pool,
  type ReconcileOutcome,
  type Scope,
} from '../src/index.ts';
import { testDatabaseUrl } from './support/env.ts';
import {
  eventLog,
  namedPool,
  reconcileOnly,
  scopeFor,
  tableName,
  untilLeaseExpired,
} from './support/ledger.ts';

let pool: Pool;
/** A fake provider's own ledger: one row per effect it performed (deliberately NOT deduplicated). */
const provider = tableName('fake_provider');

beforeAll(async () => {
  ({ pool } = namedPool(10));
  await pool.query(
    `create table ${provider} (id serial primary key, downstream_key text not null, charge_id text not null)`,
  );
});

afterAll(async () => {
  await pool?.query(`drop table if exists ${provider}`);
  await pool?.end();
});

const input = { schemaVersion: 1, value: { amount: 1250, currency: 'eur' } };
type Charge = { chargeId: string };

async function providerEffects(dk: string): Promise<string[]> {
  const { rows } = await pool.query<{ charge_id: string }>(
    `select charge_id from ${provider} where downstream_key = $1 order by id`,
    [dk],
  );
  return rows.map((r) => r.charge_id);
}

/** A provider handler pair backed by the fake provider's table, counting calls. */
function fakeProvider(chargeId: string) {
  const calls = { perform: 0, reconcile: 0, keys: [] as string[] };
  return {
    calls,
    handlers: {
      async perform({ downstreamKey: dk }: { downstreamKey: string }): Promise<ExternalOutcome<Charge>> {
        calls.perform++;
        calls.keys.push(dk);
        await pool.query(`insert into ${provider} (downstream_key, charge_id) values ($1, $2)`, [
          dk,
          chargeId,
        ]);
        return { state: 'succeeded', result: { chargeId }, providerRef: chargeId };
      },
      async reconcile({ downstreamKey: dk }: { downstreamKey: string }): Promise<ReconcileOutcome<Charge>> {
        calls.reconcile++;
        calls.keys.push(dk);
        const found = await providerEffects(dk);
        const id = found[0];
        return id
          ? { state: 'succeeded', result: { chargeId: id }, providerRef: id }
          : { state: 'not_found' };
      },
    },
  };
}

describe('claim / complete fencing', () => {
  it('a claim is exclusive while its lease lives; a second input under the scope is a conflict', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('claim');
    const first = await ledger.claim(scope, input, { leaseMs: 60_000 });
    expect(first).toMatchObject({ kind: 'claimed', takeover: false });
    expect(first.record).toMatchObject({
      state: 'in_progress',
      attempts: 1,
      downstreamKey: downstreamKey(scope),
    });
    const again = await ledger.claim(scope, input).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(LedgerError);
    expect((again as LedgerError).code).toBe('in_progress');
    expect((again as LedgerError).retryAfterMs).toBeGreaterThan(50_000);
    await expect(ledger.claim(scope, { schemaVersion: 1, value: { amount: 999 } })).rejects.toMatchObject({
      code: 'conflict',
    });
  });

  it("refuses the stale owner's complete after a takeover, and reports it", async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('stale');
    const stale = await ledger.claim(scope, input, { leaseMs: 300 });
    if (stale.kind !== 'claimed') throw new Error('expected a claim');
    await untilLeaseExpired(pool, scope);
    const fresh = await ledger.claim(scope, input, { leaseMs: 60_000 });
    if (fresh.kind !== 'claimed') throw new Error('expected a takeover');
    expect(fresh.takeover).toBe(true);
    expect(fresh.record.attempts).toBe(2);
    expect(fresh.ownerToken).not.toBe(stale.ownerToken);

    const late = { state: 'succeeded', result: { chargeId: 'ch_stale' } } as const;
    await expect(ledger.complete(scope, stale.ownerToken, late)).rejects.toMatchObject({
      code: 'ownership_lost',
    });
    await expect(ledger.markUnknown(scope, stale.ownerToken, { lost: true })).rejects.toMatchObject({
      code: 'ownership_lost',
    });
    expect(await ledger.release(scope, stale.ownerToken)).toBe(false);
    expect(log.count('ownership_lost')).toBe(2);
    expect(log.count('takeover')).toBe(1);

    const done = await ledger.complete(scope, fresh.ownerToken, {
      state: 'succeeded',
      result: { chargeId: 'ch_new' },
      providerRef: 'ch_new',
    });
    expect(done).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_new' },
      providerRef: 'ch_new',
      ownerToken: null,
    });
    // Even the new owner can't complete twice: the token was consumed.
    await expect(ledger.complete(scope, fresh.ownerToken, late)).rejects.toMatchObject({
      code: 'ownership_lost',
    });
    expect((await ledger.get(scope))?.result).toEqual({ chargeId: 'ch_new' });
  });

  it('the same key under two tenants is two independent operations', async () => {
    const ledger = new Ledger(pool);
    const a = scopeFor('ext-tenant-a', 'same');
    const b = { ...scopeFor('ext-tenant-b'), key: 'same' };
    const pa = fakeProvider('ch_a');
    const pb = fakeProvider('ch_b');
    const ra = await ledger.runExternal<Charge>(a, input, pa.handlers);
    const rb = await ledger.runExternal<Charge>(b, { schemaVersion: 1, value: { other: true } }, pb.handlers);
    expect(ra).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_a' }, replayed: false });
    expect(rb).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_b' }, replayed: false });
    expect(downstreamKey(a)).not.toBe(downstreamKey(b));
    expect(await providerEffects(downstreamKey(a))).toEqual(['ch_a']);
    expect(await providerEffects(downstreamKey(b))).toEqual(['ch_b']);
  });
});

describe('runExternal', () => {
  it('performs once with the downstream key, then replays without calling the provider', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('ext-replay');
    const p = fakeProvider('ch_1');
    const first = await ledger.runExternal<Charge>(scope, input, p.handlers);
    const second = await ledger.runExternal<Charge>(scope, input, p.handlers);
    expect(first).toEqual({
      state: 'succeeded',
      result: { chargeId: 'ch_1' },
      replayed: false,
      reconciled: false,
      providerRef: 'ch_1',
    });
    expect(second).toEqual({ ...first, replayed: true });
    expect(p.calls).toMatchObject({ perform: 1, reconcile: 0, keys: [downstreamKey(scope)] });
    await expect(
      ledger.runExternal(scope, { schemaVersion: 2, value: input.value }, p.handlers),
    ).rejects.toMatchObject({
      code: 'conflict',
    });
  });

  it('stores a final business failure and replays it', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('ext-declined');
    let performs = 0;
    const handlers = {
      perform: async () => {
        performs++;
        return { state: 'failed', result: { code: 'card_declined' }, providerRef: 'ch_d' } as const;
      },
      reconcile: async () => ({ state: 'not_found' }) as const,
    };
    expect(await ledger.runExternal<Json>(scope, input, handlers)).toMatchObject({
      state: 'failed',
      replayed: false,
    });
    expect(await ledger.runExternal<Json>(scope, input, handlers)).toMatchObject({
      state: 'failed',
      result: { code: 'card_declined' },
      replayed: true,
    });
    expect(performs).toBe(1);
  });

  it('a definite perform failure releases the claim; the retry performs under the same key', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('ext-definite');
    const refused = Object.assign(new Error('connection refused'), { definite: true });
    const keys: string[] = [];
    await expect(
      ledger.runExternal(scope, input, {
        perform: async ({ downstreamKey: dk }) => {
          keys.push(dk);
          throw refused;
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toBe(refused);
    expect(await ledger.get(scope)).toBeNull();
    expect(log.count('fail')).toBe(1);
    const p = fakeProvider('ch_after_refusal');
    expect(await ledger.runExternal<Charge>(scope, input, p.handlers)).toMatchObject({
      replayed: false,
      reconciled: false,
    });
    expect(p.calls.perform).toBe(1);
    expect(p.calls.reconcile).toBe(0);
    expect([...keys, ...p.calls.keys]).toEqual([downstreamKey(scope), downstreamKey(scope)]);
  });

  it('after a takeover, a request that was never sent keeps the record (unknown), never deletes it', async () => {
    // The SPIN model's trail F1 (docs/MODEL.md): an earlier owner whose lease ran out may
    // still send under the key. Deleting the record would let a later claim start fresh
    // without reconciling and, past the provider's key window, charge twice.
    const ledger = new Ledger(pool);
    const scope = scopeFor('ext-takeover-not-sent');
    const paused = await ledger.claim(scope, input, { leaseMs: 300 });
    if (paused.kind !== 'claimed') throw new Error('expected a claim');
    await untilLeaseExpired(pool, scope);
    const refused = Object.assign(new Error('connection refused'), { definite: true });
    let performs = 0;
    await expect(
      ledger.runExternal(scope, input, {
        perform: async () => {
          performs++;
          throw refused;
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toMatchObject({ code: 'outcome_unknown' });
    expect(performs).toBe(1);
    expect(await ledger.get(scope)).toMatchObject({ state: 'unknown', attempts: 2 });
    // The paused owner's request lands after all; the next attempt reconciles and finds it.
    await pool.query(`insert into ${provider} (downstream_key, charge_id) values ($1, $2)`, [
      downstreamKey(scope),
      'ch_paused',
    ]);
    const p = fakeProvider('ch_second');
    expect(await ledger.runExternal<Charge>(scope, input, p.handlers)).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_paused' },
      reconciled: true,
    });
    expect(p.calls.perform).toBe(0);
    expect(await providerEffects(downstreamKey(scope))).toEqual(['ch_paused']);
  });

  it('an indefinite failure marks unknown; later calls reconcile first and never perform blindly', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('ext-unknown');
    const dk = downstreamKey(scope);
    // The provider acts, then the response is lost.
    const lost = await ledger
      .runExternal<Charge>(scope, input, {
        perform: async ({ downstreamKey: key }) => {
          await pool.query(`insert into ${provider} (downstream_key, charge_id) values ($1, 'ch_lost')`, [
            key,
          ]);
          throw new Error('socket hang up');
        },
        reconcile: async () => ({ state: 'not_found' }),
      })
      .catch((e: unknown) => e);
    expect(lost).toBeInstanceOf(LedgerError);
    expect(lost).toMatchObject({ code: 'outcome_unknown' });
    expect((lost as Error).cause).toMatchObject({ message: 'socket hang up' });
    expect(await ledger.get(scope)).toMatchObject({
      state: 'unknown',
      ownerToken: null,
      error: { reason: 'perform_error', message: 'socket hang up' },
    });
    expect(await ledger.list({ state: 'unknown', tenantId: scope.tenantId })).toHaveLength(1);

    // The provider still says pending: stay unknown, keep the first error, perform nothing.
    let performs = 0;
    const perform = async (): Promise<ExternalOutcome<Charge>> => {
      performs++;
      return { state: 'succeeded', result: { chargeId: 'ch_dup' } };
    };
    await expect(
      ledger.runExternal<Charge>(scope, input, { perform, reconcile: async () => ({ state: 'pending' }) }),
    ).rejects.toMatchObject({ code: 'outcome_unknown' });
    expect(await ledger.get(scope)).toMatchObject({ state: 'unknown', error: { reason: 'perform_error' } });

    // Now the provider answers: the stored outcome is the provider's, reconciled.
    const p = fakeProvider('unused');
    const settled = await ledger.runExternal<Charge>(scope, input, {
      perform,
      reconcile: p.handlers.reconcile,
    });
    expect(settled).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_lost' },
      reconciled: true,
      replayed: false,
    });
    expect(performs).toBe(0);
    expect(await providerEffects(dk)).toEqual(['ch_lost']);
    expect(log.count('unknown')).toBe(2);
    expect(log.events.filter((e) => e.type === 'reconcile').map((e) => e.outcome)).toEqual([
      'pending',
      'succeeded',
    ]);
  });

  it('unknown + not_found at the provider: performs again under the SAME downstream key', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('ext-notfound');
    await expect(
      ledger.runExternal(scope, input, {
        perform: async () => {
          throw new Error('timeout before the request left');
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toMatchObject({ code: 'outcome_unknown' });
    const p = fakeProvider('ch_second_try');
    const run = await ledger.runExternal<Charge>(scope, input, p.handlers);
    expect(run).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_second_try' },
      reconciled: false,
    });
    expect(p.calls).toMatchObject({
      reconcile: 1,
      perform: 1,
      keys: [downstreamKey(scope), downstreamKey(scope)],
    });
    expect((await ledger.get(scope))?.attempts).toBe(2);
  });
});

describe('reconcileOnly and settle', () => {
  async function unknownRecord(prefix: string): Promise<Scope> {
    const ledger = new Ledger(pool);
    const scope = scopeFor(prefix);
    const claim = await ledger.claim(scope, input);
    if (claim.kind !== 'claimed') throw new Error('expected a claim');
    await ledger.markUnknown(scope, claim.ownerToken, { reason: 'test' });
    return scope;
  }

  it('reconcileOnly never performs: not_found stays unknown; found settles; final records are untouched', async () => {
    const ledger = new Ledger(pool);
    const scope = await unknownRecord('reconcile-only');
    const afterNotFound = await reconcileOnly(ledger, scope, async () => ({ state: 'not_found' }));
    expect(afterNotFound).toMatchObject({
      state: 'unknown',
      ownerToken: null,
      error: { reason: 'test' },
      attempts: 2,
    });
    const afterPending = await reconcileOnly(ledger, scope, async () => ({ state: 'pending' }));
    expect(afterPending).toMatchObject({ state: 'unknown', ownerToken: null });
    await expect(
      reconcileOnly(ledger, scope, async () => {
        throw new Error('provider down');
      }),
    ).rejects.toMatchObject({ code: 'outcome_unknown' });
    const settled = await reconcileOnly(ledger, scope, async ({ downstreamKey: dk }) => {
      expect(dk).toBe(downstreamKey(scope));
      return { state: 'succeeded', result: { chargeId: 'ch_found' }, providerRef: 'ch_found' };
    });
    expect(settled).toMatchObject({
      state: 'succeeded',
      providerRef: 'ch_found',
      result: { chargeId: 'ch_found' },
    });
    let called = false;
    const untouched = await reconcileOnly(ledger, scope, async () => {
      called = true;
      return { state: 'not_found' };
    });
    expect(called).toBe(false);
    expect(untouched.state).toBe('succeeded');
    await expect(
      reconcileOnly(ledger, scopeFor('missing'), async () => ({ state: 'pending' })),
    ).rejects.toMatchObject({
      code: 'not_found',
    });
  });

  it('settle: applies to unknown, idempotent for the same outcome, refuses a different one', async () => {
    const ledger = new Ledger(pool);
    const scope = await unknownRecord('settle');
    const outcome = { state: 'succeeded', result: { chargeId: 'ch_hook' }, providerRef: 'ch_hook' } as const;
    const first = await ledger.settle(scope, outcome);
    expect(first.changed).toBe(true);
    expect(first.before?.state).toBe('unknown');
    expect(first.record).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_hook' } });
    const again = await ledger.settle(scope, outcome);
    expect(again.changed).toBe(false);
    await expect(
      ledger.settle(scope, { state: 'failed', result: { chargeId: 'ch_hook' } }),
    ).rejects.toMatchObject({
      code: 'invalid_state',
    });
    await expect(ledger.settle(scopeFor('settle-missing'), outcome)).rejects.toMatchObject({
      code: 'not_found',
    });
  });

  it('settle refuses a live claim, and joins a caller transaction (rolled back with it)', async () => {
    const ledger = new Ledger(pool);
    const live = scopeFor('settle-live');
    await ledger.claim(live, input, { leaseMs: 60_000 });
    await expect(ledger.settle(live, { state: 'failed', result: null })).rejects.toMatchObject({
      code: 'in_progress',
    });

    const scope = await unknownRecord('settle-tx');
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      const { changed } = await ledger.settle(
        scope,
        { state: 'failed', result: { code: 'x' } },
        { tx: client },
      );
      expect(changed).toBe(true);
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect((await ledger.get(scope))?.state).toBe('unknown');
  });
});

describe('a claim holder killed with SIGKILL in another process', () => {
  const fixture = path.resolve(import.meta.dirname, 'fixtures/external-holder.ts');

  async function spawnHolder(scope: Scope, mode: 'after-effect' | 'before-effect', leaseMs: number) {
    const child: ChildProcess = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        fixture,
        testDatabaseUrl(),
        provider,
        scope.tenantId,
        scope.operationType,
        scope.key,
        String(leaseMs),
        mode,
      ],
      // From the package, so `--import tsx` resolves however the suite was started.
      { cwd: path.resolve(import.meta.dirname, '..'), stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const exited = new Promise<NodeJS.Signals | number | null>((resolve) =>
      child.on('exit', (code, signal) => resolve(signal ?? code)),
    );
    const ready = await new Promise<{ downstreamKey: string; ownerToken: string }>((resolve, reject) => {
      const lines = readline.createInterface({ input: child.stdout! });
      lines.on('line', (line) => resolve(JSON.parse(line) as { downstreamKey: string; ownerToken: string }));
      void exited.then((code) => reject(new Error(`holder exited early (${String(code)}): ${stderr}`)));
    });
    return { child, exited, ready };
  }

  it('after the provider acted: the next attempt reconciles, and the provider shows exactly one effect', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('sigkill-after');
    const { child, exited, ready } = await spawnHolder(scope, 'after-effect', 3_000);
    expect(ready.downstreamKey).toBe(downstreamKey(scope));
    child.kill('SIGKILL');
    expect(await exited).toBe('SIGKILL');

    const p = fakeProvider('ch_parent');
    // While the dead holder's lease lives, nobody may touch the operation.
    await expect(ledger.runExternal<Charge>(scope, input, p.handlers)).rejects.toMatchObject({
      code: 'in_progress',
    });
    expect(await ledger.get(scope)).toMatchObject({ state: 'in_progress', ownerToken: ready.ownerToken });

    await untilLeaseExpired(pool, scope);
    const run = await ledger.runExternal<Charge>(scope, input, p.handlers);
    expect(run).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_child' },
      reconciled: true,
      replayed: false,
    });
    expect(p.calls.perform).toBe(0);
    expect(p.calls.reconcile).toBe(1);
    expect(await providerEffects(ready.downstreamKey)).toEqual(['ch_child']);
    expect(log.count('takeover')).toBe(1);
    expect(await ledger.get(scope)).toMatchObject({
      state: 'succeeded',
      attempts: 2,
      providerRef: 'ch_child',
    });
  });

  it('before the provider acted: reconcile finds nothing, and the retry performs once under the same key', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('sigkill-before');
    const { child, exited, ready } = await spawnHolder(scope, 'before-effect', 300);
    child.kill('SIGKILL');
    await exited;
    await untilLeaseExpired(pool, scope);
    const p = fakeProvider('ch_parent');
    const run = await ledger.runExternal<Charge>(scope, input, p.handlers);
    expect(run).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_parent' }, reconciled: false });
    expect(p.calls).toMatchObject({
      reconcile: 1,
      perform: 1,
      keys: [ready.downstreamKey, ready.downstreamKey],
    });
    expect(await providerEffects(ready.downstreamKey)).toEqual(['ch_parent']);
  });
});
