/**
 * `ops reconcile` on a charge the provider never saw: the CLI (a child
 * process, real Postgres, the real sandbox) says what the provider answered
 * and what happens next, instead of a bare "unknown -> unknown".
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Ledger, downstreamKey } from 'onceflow';
import { orderWorkflowId, stepKeys } from '../../src/orders/model.ts';
import type { Pool } from '../../src/db/index.ts';
import { testPool, uniq } from '../support/env.ts';
import { startTestSandbox, type TestSandbox } from '../sandbox/harness.ts';
import { json, runOps } from './support.ts';

let pool: Pool;
let sb: TestSandbox;
beforeAll(async () => {
  pool = testPool(4);
  sb = await startTestSandbox({ dispatch: false });
});
afterAll(async () => {
  await sb?.stop();
  await pool?.end();
});

/** An unknown charge record whose request never reached the provider. */
async function unknownCharge(): Promise<string> {
  const ledger = new Ledger(pool);
  const key = stepKeys.charge(orderWorkflowId('acme', uniq('ord')));
  const scope = { tenantId: 'acme', operationType: 'payment.charge', key };
  const claim = await ledger.claim(scope, { schemaVersion: 1, value: { amount: 100 } });
  if (claim.kind !== 'claimed') throw new Error('expected a claim');
  await ledger.markUnknown(scope, claim.ownerToken, { reason: 'perform_error', message: 'HTTP 500' });
  return key;
}

describe('ops reconcile', () => {
  it('a charge the provider never saw: says so, and that it will be performed under the same key', async () => {
    const key = await unknownCharge();
    const r = await runOps(['reconcile', 'acme', 'payment.charge', key, '--actor', 'alice'], {
      sandboxUrl: sb.url,
    });
    expect(r.code).toBe(0);
    expect(r.stdout).not.toMatch(/unknown -> unknown/);
    expect(r.stdout).toMatch(/unknown, unchanged \(provider: not found\)/);
    expect(r.stdout).toMatch(/never saw this charge's key/);
    expect(r.stdout).toMatch(/performs it under the same key/);

    const j = json<{ providerAnswer: string; next: string; after: string }>(
      await runOps(['reconcile', 'acme', 'payment.charge', key, '--actor', 'alice', '--json'], {
        sandboxUrl: sb.url,
      }),
    );
    expect(j).toMatchObject({ providerAnswer: 'not_found', after: 'unknown' });
    expect(j.next).toMatch(/same key/);
  });

  it('a charge the provider has: settles it', async () => {
    const key = await unknownCharge();
    await sb.call('POST', '/v1/charges', {
      key: downstreamKey({ tenantId: 'acme', operationType: 'payment.charge', key }),
      body: { amount: 100, currency: 'usd', payment_method: 'pm_card_visa', metadata: {} },
    });
    const r = await runOps(['reconcile', 'acme', 'payment.charge', key, '--actor', 'alice'], {
      sandboxUrl: sb.url,
    });
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/unknown -> succeeded/);
  });
});
