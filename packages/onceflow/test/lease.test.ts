/**
 * Lease renewal and the provider's key window, against real Postgres:
 * `extend` is fenced like every other owner write; runExternal renews the
 * lease while its attempt runs, stops before acting once its claim is gone,
 * and performs again after a "never seen" only inside the key window.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Ledger,
  LedgerError,
  downstreamKey,
  withinKeyWindow,
  type ExternalOutcome,
  type Pool,
  type Scope,
} from '../src/index.ts';
import { eventLog, namedPool, scopeFor, untilLeaseExpired } from './support/ledger.ts';
import { deferred, until } from './support/wait.ts';

let pool: Pool;
beforeAll(() => {
  ({ pool } = namedPool(10));
});
afterAll(async () => {
  await pool?.end();
});

const input = { schemaVersion: 1, value: { amount: 700, currency: 'eur' } };
type Charge = { chargeId: string };

async function leaseRow(scope: Scope) {
  const { rows } = await pool.query<{
    lease_expires_at: Date | null;
    owner_token: string | null;
    state: string;
  }>(
    `select lease_expires_at, owner_token, state from operations
      where tenant_id = $1 and operation_type = $2 and key = $3`,
    [scope.tenantId, scope.operationType, scope.key],
  );
  return rows[0];
}

async function claimed(ledger: Ledger, scope: Scope, leaseMs: number) {
  const claim = await ledger.claim(scope, input, { leaseMs });
  if (claim.kind !== 'claimed') throw new Error('expected a claim');
  return claim;
}

/** Resolves once the database clock has moved `ms` past `since`. */
async function dbTimePassed(since: Date, ms: number): Promise<void> {
  await until(`${ms} ms of database time`, async () => {
    const { rows } = await pool.query<{ ok: boolean }>(
      `select now() > $1::timestamptz + $2::float8 * interval '1 millisecond' as ok`,
      [since, ms],
    );
    return rows[0]?.ok === true;
  });
}

async function refusal(p: Promise<unknown>): Promise<LedgerError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(LedgerError);
  return err as LedgerError;
}

describe('extend (fenced lease renewal)', () => {
  it("the owner's renewal moves the lease forward on the database clock", async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('extend-owner');
    const claim = await claimed(ledger, scope, 1_000);
    const before = (await leaseRow(scope))!.lease_expires_at!;
    const until = await ledger.extend(scope, claim.ownerToken, 60_000);
    const after = await leaseRow(scope);
    expect(after!.lease_expires_at!.getTime()).toBe(until.getTime());
    expect(until.getTime()).toBeGreaterThan(before.getTime() + 50_000);
    expect(after).toMatchObject({ owner_token: claim.ownerToken, state: 'in_progress' });
  });

  it('a token that is not the owner is refused and changes nothing', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('extend-stranger');
    await claimed(ledger, scope, 5_000);
    const before = await leaseRow(scope);
    const err = await refusal(ledger.extend(scope, '00000000-0000-4000-8000-000000000000', 60_000));
    expect(err.code).toBe('ownership_lost');
    expect(await leaseRow(scope)).toEqual(before);
    expect(log.events).toContainEqual({
      type: 'ownership_lost',
      operationType: 'test.op',
      outcome: 'renewal',
    });
  });

  it('a completed claim is refused: a renewal never resurrects a lease', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('extend-completed');
    const claim = await claimed(ledger, scope, 5_000);
    await ledger.complete(scope, claim.ownerToken, { state: 'succeeded', result: { chargeId: 'ch_1' } });
    expect((await refusal(ledger.extend(scope, claim.ownerToken, 60_000))).code).toBe('ownership_lost');
    expect(await leaseRow(scope)).toMatchObject({
      state: 'succeeded',
      lease_expires_at: null,
      owner_token: null,
    });
  });

  it('a claim marked unknown is refused', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('extend-unknown');
    const claim = await claimed(ledger, scope, 5_000);
    await ledger.markUnknown(scope, claim.ownerToken, { reason: 'test' });
    expect((await refusal(ledger.extend(scope, claim.ownerToken, 60_000))).code).toBe('ownership_lost');
    expect(await leaseRow(scope)).toMatchObject({ state: 'unknown', lease_expires_at: null });
  });

  it('an expired lease that nobody took over is still the owner’s to renew', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('extend-expired-kept');
    const claim = await claimed(ledger, scope, 200);
    await untilLeaseExpired(pool, scope);
    await ledger.extend(scope, claim.ownerToken, 60_000);
    await expect(ledger.claim(scope, input)).rejects.toMatchObject({ code: 'in_progress' });
  });

  it('expired and taken over: the stale owner is refused; the new owner’s lease is untouched', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('extend-taken-over');
    const stale = await claimed(ledger, scope, 200);
    await untilLeaseExpired(pool, scope);
    const fresh = await claimed(ledger, scope, 60_000);
    expect(fresh.takeover).toBe(true);
    const before = await leaseRow(scope);
    expect((await refusal(ledger.extend(scope, stale.ownerToken, 60_000))).code).toBe('ownership_lost');
    expect(await leaseRow(scope)).toEqual(before);
    // The new owner, taking over an in-flight claim, renews it.
    await ledger.extend(scope, fresh.ownerToken, 60_000);
  });

  it('the new owner of a taken-over unknown record may renew while it reconciles', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('extend-unknown-takeover');
    const first = await claimed(ledger, scope, 5_000);
    await ledger.markUnknown(scope, first.ownerToken, { reason: 'test' });
    const second = await claimed(ledger, scope, 1_000);
    expect(second.takeover).toBe(true);
    await ledger.extend(scope, second.ownerToken, 60_000);
    expect(await leaseRow(scope)).toMatchObject({ state: 'unknown', owner_token: second.ownerToken });
  });
});

describe('runExternal renews its lease while the attempt runs', () => {
  it('a perform slower than the lease is not taken over, and heartbeats while it waits', async () => {
    const ledger = new Ledger(pool);
    const scope = scopeFor('renew-slow');
    const entered = deferred();
    const release = deferred();
    let heartbeats = 0;
    let performs = 0;
    const slow = ledger.runExternal<Charge>(
      scope,
      input,
      {
        perform: async () => {
          performs++;
          entered.resolve();
          await release.promise;
          return { state: 'succeeded', result: { chargeId: 'ch_slow' }, providerRef: 'ch_slow' };
        },
        reconcile: async () => ({ state: 'not_found' }),
      },
      { leaseMs: 300, heartbeat: () => heartbeats++ },
    );
    await entered.promise;
    const claimedAt = (await ledger.get(scope))!.createdAt;
    // Three whole leases later the claim is still live: a second attempt is told to wait.
    await dbTimePassed(claimedAt, 900);
    await expect(
      ledger.runExternal<Charge>(scope, input, {
        perform: async () => {
          performs++;
          return { state: 'succeeded', result: { chargeId: 'ch_dup' } };
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toMatchObject({ code: 'in_progress' });
    release.resolve();
    expect(await slow).toMatchObject({
      state: 'succeeded',
      result: { chargeId: 'ch_slow' },
      reconciled: false,
    });
    expect(performs).toBe(1);
    expect(heartbeats).toBeGreaterThanOrEqual(3);
    expect(await leaseRow(scope)).toMatchObject({ state: 'succeeded', lease_expires_at: null });
  });

  it("a fresh claim performs on its claim's own lease (no renewal first); a takeover renews before it performs", async () => {
    const ledger = new Ledger(pool);
    // The lease when perform starts, past the claim's own `now() + lease` (a claim or a takeover sets
    // updated_at, a renewal does not): 0 when nobody renewed.
    const renewedBy = async (scope: Scope) => {
      const { rows } = await pool.query<{ ms: number }>(
        `select extract(epoch from lease_expires_at - updated_at) * 1000 - 60000 as ms from operations
          where tenant_id = $1 and operation_type = $2 and key = $3`,
        [scope.tenantId, scope.operationType, scope.key],
      );
      return Number(rows[0]!.ms);
    };
    const run = (scope: Scope, seen: number[]) =>
      ledger.runExternal<Charge>(
        scope,
        input,
        {
          perform: async () => {
            seen.push(await renewedBy(scope));
            return { state: 'succeeded', result: { chargeId: 'ch_lease' } };
          },
          reconcile: async () => ({ state: 'not_found' }),
        },
        { leaseMs: 60_000 },
      );
    const fresh = scopeFor('renew-fresh');
    const freshSeen: number[] = [];
    await run(fresh, freshSeen);
    expect(freshSeen).toEqual([0]);

    const taken = scopeFor('renew-takeover');
    const first = await claimed(ledger, taken, 60_000);
    await ledger.markUnknown(taken, first.ownerToken, { reason: 'perform_error' });
    const takenSeen: number[] = [];
    await run(taken, takenSeen);
    expect(takenSeen).toHaveLength(1);
    expect(takenSeen[0]).toBeGreaterThan(0);
  });

  it('a claim lost while reconciling stops the attempt before it performs, and it does not complete', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = scopeFor('renew-lost');
    const first = await claimed(ledger, scope, 5_000);
    await ledger.markUnknown(scope, first.ownerToken, { reason: 'perform_error' });
    const inReconcile = deferred();
    const answer = deferred();
    let performs = 0;
    const run = ledger.runExternal<Charge>(
      scope,
      input,
      {
        perform: async (): Promise<ExternalOutcome<Charge>> => {
          performs++;
          return { state: 'succeeded', result: { chargeId: 'ch_should_not_happen' } };
        },
        reconcile: async () => {
          inReconcile.resolve();
          await answer.promise;
          return { state: 'not_found' };
        },
      },
      { leaseMs: 60_000 },
    );
    await inReconcile.promise;
    // Someone else now owns the record (as after a takeover of a lapsed lease, e.g. a paused process).
    await pool.query(
      `update operations set owner_token = gen_random_uuid()
        where tenant_id = $1 and operation_type = $2 and key = $3`,
      [scope.tenantId, scope.operationType, scope.key],
    );
    const thief = (await leaseRow(scope))!.owner_token;
    answer.resolve();
    expect((await refusal(run)).code).toBe('ownership_lost');
    expect(performs).toBe(0);
    expect(await leaseRow(scope)).toMatchObject({ state: 'unknown', owner_token: thief });
    expect(log.events).toContainEqual({
      type: 'ownership_lost',
      operationType: 'test.op',
      outcome: 'renewal',
    });
  });
});

describe("the provider's key window", () => {
  async function unknownRecord(ledger: Ledger, prefix: string): Promise<Scope> {
    const scope = scopeFor(prefix);
    const claim = await claimed(ledger, scope, 5_000);
    await ledger.markUnknown(scope, claim.ownerToken, { reason: 'perform_error', message: 'timeout' });
    return scope;
  }

  it('withinKeyWindow keeps a margin before the end of the window', () => {
    const createdAt = new Date(0);
    const day = 24 * 60 * 60 * 1000;
    expect(withinKeyWindow({ createdAt }, day, day - 61 * 60 * 1000)).toBe(true);
    expect(withinKeyWindow({ createdAt }, day, day - 59 * 60 * 1000)).toBe(false);
    expect(withinKeyWindow({ createdAt }, 1_000, 899)).toBe(true);
    expect(withinKeyWindow({ createdAt }, 1_000, 901)).toBe(false);
  });

  it('unknown + never seen, inside the window: reconcileUnresolved says performable; runExternal performs under the same key', async () => {
    const ledger = new Ledger(pool);
    const scope = await unknownRecord(ledger, 'window-inside');
    const r = await ledger.reconcileUnresolved(scope, async () => ({ state: 'not_found' }));
    expect(r).toMatchObject({ answer: 'not_found', performable: true, record: { state: 'unknown' } });
    const keys: string[] = [];
    const run = await ledger.runExternal<Charge>(scope, input, {
      perform: async ({ downstreamKey: dk }) => {
        keys.push(dk);
        return { state: 'succeeded', result: { chargeId: 'ch_again' }, providerRef: 'ch_again' };
      },
      reconcile: async () => ({ state: 'not_found' }),
    });
    expect(run).toMatchObject({ state: 'succeeded', result: { chargeId: 'ch_again' } });
    expect(keys).toEqual([downstreamKey(scope)]);
  });

  it('unknown + never seen, past the window: nothing is performed; the record stays unknown for a human', async () => {
    const log = eventLog();
    const ledger = new Ledger(pool, { hooks: log });
    const scope = await unknownRecord(ledger, 'window-past');
    await dbTimePassed((await ledger.get(scope))!.createdAt, 50);
    const r = await ledger.reconcileUnresolved(scope, async () => ({ state: 'not_found' }), {
      keyWindowMs: 10,
    });
    expect(r).toMatchObject({ answer: 'not_found', performable: false, record: { state: 'unknown' } });
    let performs = 0;
    const err = await refusal(
      ledger.runExternal<Charge>(
        scope,
        input,
        {
          perform: async () => {
            performs++;
            return { state: 'succeeded', result: { chargeId: 'ch_twice' } };
          },
          reconcile: async () => ({ state: 'not_found' }),
        },
        { keyWindowMs: 10 },
      ),
    );
    expect(err.code).toBe('outcome_unknown');
    expect(err.message).toMatch(/key window/);
    expect(performs).toBe(0);
    // The first reason for the uncertainty is kept for the operator.
    expect(await ledger.get(scope)).toMatchObject({
      state: 'unknown',
      ownerToken: null,
      error: { reason: 'perform_error' },
    });
    expect(log.events.filter((e) => e.type === 'unknown').map((e) => e.outcome)).toEqual([
      'key_window_passed',
      'key_window_passed',
    ]);
  });
});
