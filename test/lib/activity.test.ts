/**
 * The library's activity helpers (src/lib/activity.ts, `onceflow/activity`)
 * inside a MockActivityEnvironment, over the real ledger in real Postgres.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { MockActivityEnvironment } from '@temporalio/testing';
import { ApplicationFailure } from '@temporalio/common';
import { FinalFailure, Ledger, type Scope } from '../../src/ledger/index.ts';
import { claimStep, holdClaim, LEDGER_FAILURE, runLocalStep } from '../../src/lib/activity.ts';
import { testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';

const pool = testPool(4);
const ledger = new Ledger(pool);
afterAll(() => pool.end());

const scope = (operationType: string): Scope => ({ tenantId: 'acme', operationType, key: uniq('lib') });
const input = (value: unknown) => ({ schemaVersion: 1, value });

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
}

describe('onceflow/activity', () => {
  it('holdClaim extends the lease while the activity works, and check() refuses a claim that is gone', async () => {
    const s = scope('lib.hold');
    let beats = 0;
    const env = new MockActivityEnvironment({ heartbeatTimeoutMs: 40 });
    env.on('heartbeat', () => beats++);
    await env.run(async () => {
      const claim = await claimStep(ledger, s, input({ n: 1 }), { leaseMs: 3_000 });
      if (claim.kind !== 'claimed') throw new Error('expected a fresh claim');
      const first = claim.record.leaseExpiresAt!.getTime();
      const held = holdClaim(ledger, s, claim.ownerToken, { leaseMs: 3_000 });
      try {
        await until('a heartbeat-driven lease extension', async () => {
          const record = await ledger.get(s);
          return record!.leaseExpiresAt!.getTime() > first;
        });
        expect(beats).toBeGreaterThan(0);
        await held.check(); // still ours
        expect(await ledger.release(s, claim.ownerToken)).toBe(true);
        const failure = await failureOf(held.check());
        expect(failure.type).toBe(LEDGER_FAILURE.inProgress);
        expect(failure.nonRetryable).toBe(false);
      } finally {
        held.stop();
      }
    });
  });

  it('claimStep: the same key with another input is a non-retryable OperationConflict', async () => {
    const s = scope('lib.claim');
    const env = new MockActivityEnvironment();
    await env.run(async () => {
      expect((await claimStep(ledger, s, input({ amount: 1 }))).kind).toBe('claimed');
    });
    const failure = await failureOf(env.run(() => claimStep(ledger, s, input({ amount: 2 }))));
    expect(failure.type).toBe(LEDGER_FAILURE.conflict);
    expect(failure.nonRetryable).toBe(true);
  });

  it('runLocalStep: a FinalFailure is stored, then thrown as a non-retryable OperationFailed on every call', async () => {
    const s = scope('lib.local');
    const env = new MockActivityEnvironment();
    let bodies = 0;
    const step = () =>
      runLocalStep(ledger, s, input({ sku: 'x' }), async () => {
        bodies++;
        throw new FinalFailure({ reason: 'out_of_stock' });
      });
    for (const _ of [1, 2]) {
      const failure = await failureOf(env.run(step));
      expect(failure.type).toBe(LEDGER_FAILURE.finalFailure);
      expect(failure.nonRetryable).toBe(true);
      expect(failure.details).toEqual([{ reason: 'out_of_stock' }]);
    }
    expect(bodies).toBe(1);
    expect((await ledger.get(s))?.state).toBe('failed');
  });
});
