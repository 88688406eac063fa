/**
 * Recovery after a database restore (src/ops/recover.ts, src/recovery/),
 * against the real stack: an API, a worker, the sandbox provider, Temporal.
 *
 * "The database was restored to a backup taken at T0" is played by deleting
 * every product row written after T0 (orders, ledger records, start
 * intents, refunds): exactly what such a restore leaves, while Temporal and
 * the provider keep theirs. The chaos drill (`npm run chaos -- --scenarios
 * restore`) does it with pg_dump and pg_restore under load.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startOrderStack, type OrderStack } from '../support/stack.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from '../api/support.ts';
import { Recovery } from '../../src/ops/recover.ts';
import { RecoveryGate, detectRestore } from '../../src/recovery/gate.ts';
import { selectPendingRecovery } from '../../src/recovery/sql.ts';
import { createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { OPERATION_TYPES } from '../../src/orders/model.ts';

let stack: OrderStack;
let api: TestApi;
let tenant: { tenantId: string; key: string };

beforeAll(async () => {
  stack = await startOrderStack({ startWorker: true });
  // A gate that reads on every request, so the test needs no wait for its once-a-second read.
  api = await startApi({
    env: { TEMPORAL_TASK_QUEUE: stack.taskQueue },
    recovery: (pool) => new RecoveryGate(pool, 0),
  });
  tenant = await newTenant(api.pool, 'rr');
}, 60_000);

afterAll(async () => {
  await api?.close();
  await stack?.close();
});

type Created = { id: string; workflowId: string; status: string };

async function placeAndFinish(
  idem: string,
  paymentMethod = 'pm_card_visa',
  ends = 'completed',
): Promise<{ created: Created; text: string }> {
  const body = { ...validOrder(), paymentMethod };
  const res = await call(api, 'POST', '/v1/orders', { key: tenant.key, idem, body });
  expect(res.status).toBe(202);
  const created = res.body as Created;
  const done = await call(api, 'GET', `/v1/orders/${created.id}?wait=30`, { key: tenant.key });
  expect((done.body as { status: string }).status).toBe(ends);
  return { created, text: res.text };
}

/** What a restore to a backup taken at `t0` leaves of the product's tables. */
async function restoreTo(t0: Date): Promise<void> {
  await api.pool.query('delete from workflow_outbox where created_at >= $1', [t0]);
  await api.pool.query('delete from refunds where created_at >= $1', [t0]);
  await api.pool.query('delete from orders where created_at >= $1', [t0]);
  await api.pool.query('delete from operations where created_at >= $1', [t0]);
}

function recovery(): Recovery {
  return new Recovery({
    pool: api.pool,
    ledger: api.ledger,
    temporal: api.client,
    payments: createSandboxPaymentProvider({ baseUrl: stack.sandbox.url, timeoutMs: 2000 }),
    taskQueue: stack.taskQueue,
  });
}

describe('recover-after-restore', () => {
  it('detects the restore, refuses creates with 503 until the recovery, then replays the original answers and charges nobody twice', async () => {
    const before = await placeAndFinish('rr-before');
    // The database's clock, as created_at is: every later create is after T0.
    const t0 = (await api.pool.query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now;
    const after = await placeAndFinish('rr-after');
    const declined = await placeAndFinish('rr-declined', 'pm_card_chargeDeclined', 'rejected');
    await stack.stopWorker();
    await restoreTo(t0);

    // The restore lost the order that came after T0; the one before survived.
    const lost = await call(api, 'GET', `/v1/orders/${after.created.id}`, { key: tenant.key });
    expect(lost.status).toBe(404);

    // The detection rule: Temporal has an order workflow whose row is missing.
    const declared = await detectRestore(api.pool, api.client, stack.taskQueue, 'test');
    expect(declared?.declared_by).toMatch(/have no order row/);
    // Creates are refused while it is pending.
    const refused = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: 'rr-after',
      body: validOrder(),
    });
    expect(refused.status).toBe(503);
    expect(refused.headers.get('retry-after')).toBe('30');
    expect((refused.body as { type: string }).type).toMatch(/recovery-pending$/);
    // A key the database still has (a create from before the backup) is a replay, not new work.
    const replayedMeanwhile = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: 'rr-before',
      body: validOrder(),
    });
    expect(replayedMeanwhile.status).toBe(202);
    expect(replayedMeanwhile.text).toBe(before.text);

    const progress: string[] = [];
    const summary = await recovery().run({
      since: t0,
      marginMs: 0,
      actor: 'test',
      progress: (l) => progress.push(l),
    });
    expect(summary.errors).toEqual([]);
    expect(summary.rows.restored).toBe(2);
    expect(summary.createRecords.restored).toBe(2);
    expect(summary.outbox.restored).toBe(2);
    // The completed order's charge and receipt, the declined one's charge: final from the history.
    expect(summary.steps).toMatchObject({ final: 3, unknown: 0 });
    expect(progress.some((l) => l.includes(after.created.workflowId))).toBe(true);
    expect(await api.pool.query('select 1 from restore_recoveries where completed_at is null')).toMatchObject(
      {
        rowCount: 0,
      },
    );
    // Audited, per workflow.
    const audit = await api.pool.query(
      `select reason from audit_log where action = 'restore' and workflow_id = $1`,
      [after.created.workflowId],
    );
    expect(audit.rows[0]?.reason).toMatch(/recover-after-restore --since/);

    // The order is back, completed, with its charge; its step records are final.
    const back = await call(api, 'GET', `/v1/orders/${after.created.id}`, { key: tenant.key });
    expect(back.status).toBe(200);
    expect(back.body).toMatchObject({ id: after.created.id, status: 'completed' });
    const charge = await api.ledger.get({
      tenantId: tenant.tenantId,
      operationType: OPERATION_TYPES.charge,
      key: `${after.created.workflowId}/charge`,
    });
    expect(charge).toMatchObject({ state: 'succeeded' });
    expect(charge?.providerRef).toMatch(/^ch_/);

    // The declined order is back as rejected, with the reason a tenant reads.
    const rejected = await call(api, 'GET', `/v1/orders/${declined.created.id}`, { key: tenant.key });
    expect(rejected.body).toMatchObject({
      status: 'rejected',
      reason: expect.stringMatching(/^decline_code:/),
    });
    expect(
      await api.ledger.get({
        tenantId: tenant.tenantId,
        operationType: OPERATION_TYPES.charge,
        key: `${declined.created.workflowId}/charge`,
      }),
    ).toMatchObject({ state: 'failed' });

    // A client's retry of the lost create replays the original 202, byte for byte.
    const retry = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: 'rr-after',
      body: validOrder(),
    });
    expect(retry.status).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.text).toBe(after.text);
    // ...and a different body under that key is still a 422 (the fingerprint was restored too).
    const reused = await call(api, 'POST', '/v1/orders', {
      key: tenant.key,
      idem: 'rr-after',
      body: { ...validOrder(), currency: 'eur' },
    });
    expect(reused.status).toBe(422);

    // One charge per order at the provider.
    expect(await stack.charges(after.created.id)).toHaveLength(1);
    expect(await stack.charges(before.created.id)).toHaveLength(1);

    // Idempotent: a second run rebuilds nothing.
    const again = await recovery().run({ since: t0, marginMs: 0, actor: 'test' });
    expect(again.rows).toMatchObject({ restored: 0, broughtForward: 0 });
    expect(again.createRecords.restored).toBe(0);
    expect(again.steps).toMatchObject({ final: 0, unknown: 0 });
    expect(await selectPendingRecovery(api.pool)).toBeNull();

    // The workers start again and nothing runs twice.
    await stack.startWorker();
    const next = await placeAndFinish('rr-next');
    expect(await stack.charges(next.created.id)).toHaveLength(1);
  }, 120_000);
});
