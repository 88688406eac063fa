/**
 * Recovery after a database restore (src/restore/recover.ts, src/restore/),
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
import { Recovery, type RecoverySummary } from '../../src/restore/recover.ts';
import { RecoveryGate, detectRestore } from '../../src/restore/gate.ts';
import { selectDatabaseIdentity, selectPendingRecovery } from '../../src/restore/sql.ts';
import { readDatabaseIdentity } from '../../src/restore/memo.ts';
import { migrate } from '../../src/db/migrate.ts';
import { hashApiKey } from '../../src/api/auth.ts';
import { insertApiKey, insertTenant } from '../../src/tenants/sql.ts';
import { emptyDatabase } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { runOps } from '../operator/support.ts';
import { createSandboxEmailProvider, createSandboxPaymentProvider } from '../../src/providers/sandbox.ts';
import { runCharge } from '../../src/steps/payment.ts';
import { runReceipt } from '../../src/steps/receipt.ts';
import { OPERATION_TYPES } from '../../src/orders/model.ts';
import { redriveUpdate } from '../../src/orders/contract.ts';
import { insertEndpoint } from '../../src/merchant-events/sql.ts';
import { startReceiver, type Receiver } from '../support/webhooks.ts';
import { DELIVERY_WORKFLOW_TYPE } from '../../src/merchant-events/contract.ts';

let stack: OrderStack;
let api: TestApi;
let tenant: { tenantId: string; key: string };
let merchant: Receiver | undefined;

beforeAll(async () => {
  stack = await startOrderStack({
    startWorker: true,
    webhooks: { allowPrivate: true, firstRetryMs: 300, maxRetryMs: 1_000 },
  });
  // A gate that reads on every request, so the test needs no wait for its once-a-second read.
  api = await startApi({
    env: { TEMPORAL_TASK_QUEUE: stack.taskQueue, WEBHOOK_ALLOW_PRIVATE_URLS: 'true' },
    recovery: (pool) => new RecoveryGate(pool, 0),
  });
  // The loop that starts what transitions record besides the order (merchant deliveries).
  api.relay.start();
  tenant = await newTenant(api.pool, 'rr');
}, 60_000);

afterAll(async () => {
  await merchant?.close();
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

/** The database's clock, as created_at is: every later create is after it. */
async function dbNow(): Promise<Date> {
  return (await api.pool.query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now;
}

/** What a restore to a backup taken at `t0` leaves of the product's tables. */
async function restoreTo(t0: Date): Promise<void> {
  await api.pool.query('delete from webhook_delivery_attempts where started_at >= $1', [t0]);
  await api.pool.query('delete from webhook_deliveries where created_at >= $1', [t0]);
  await api.pool.query('delete from merchant_events where created_at >= $1', [t0]);
  await api.pool.query('delete from workflow_outbox where created_at >= $1', [t0]);
  await api.pool.query('delete from refunds where created_at >= $1', [t0]);
  await api.pool.query('delete from orders where created_at >= $1', [t0]);
  await api.pool.query('delete from operations where created_at >= $1', [t0]);
}

/** One recovery run since t0 (no margin), with the progress lines it printed. */
async function recoverSince(
  t0: Date,
  paymentsUrl?: string,
): Promise<{ summary: RecoverySummary; progress: string[] }> {
  const progress: string[] = [];
  const summary = await recovery(paymentsUrl).run({
    since: t0,
    marginMs: 0,
    actor: 'test',
    progress: (l) => progress.push(l),
  });
  return { summary, progress };
}

function recovery(paymentsUrl = stack.sandbox.url): Recovery {
  return new Recovery({
    pool: api.pool,
    ledger: api.ledger,
    temporal: api.client,
    payments: createSandboxPaymentProvider({ baseUrl: paymentsUrl, timeoutMs: 2000 }),
    taskQueue: stack.taskQueue,
  });
}

describe('recover-after-restore', () => {
  it('detects the restore, refuses creates with 503 until the recovery, then replays the original answers and charges nobody twice', async () => {
    const before = await placeAndFinish('rr-before');
    const t0 = await dbNow();
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

    const { summary, progress } = await recoverSince(t0);
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
    const { summary: again } = await recoverSince(t0);
    expect(again.rows).toMatchObject({ restored: 0, broughtForward: 0 });
    expect(again.createRecords.restored).toBe(0);
    expect(again.steps).toMatchObject({ final: 0, unknown: 0 });
    expect(await selectPendingRecovery(api.pool)).toBeNull();

    // The workers start again and nothing runs twice.
    await stack.startWorker();
    const next = await placeAndFinish('rr-next');
    expect(await stack.charges(next.created.id)).toHaveLength(1);
  }, 120_000);

  it('records again, under its own ID, the terminal event the restore lost, in the re-drive epoch it came in', async () => {
    await insertEndpoint(api.pool, {
      tenantId: tenant.tenantId,
      id: 'we_rr',
      url: (merchant = await startReceiver(() => 200)).url,
      events: ['order.completed', 'order.needs_attention'],
      secret: 'whsec_cnJzZWNyZXQ=',
    });
    const t0 = await dbNow();
    // Parked on its receipt (an order.needs_attention event), re-driven, then completed: its
    // completed status writes under epoch 1's key, and so its event ID derives from that key.
    await stack.fault('messages.create', 'fail_before', 1000);
    let started: Awaited<ReturnType<OrderStack['startOrder']>>;
    try {
      started = await stack.startOrder({ tenantId: tenant.tenantId });
      await until(
        'order parked',
        async () => (await stack.orderRow(started.input))?.status === 'needs_attention',
      );
    } finally {
      await stack.clearFaults();
    }
    const { input, workflowId, handle } = started;
    const created = { id: input.orderId, workflowId };
    await handle.executeUpdate(redriveUpdate, { args: [{ actor: 'test', reason: 'email is back' }] });
    expect(await handle.result()).toMatchObject({ status: 'completed' });
    const events = async () =>
      (
        await api.pool.query<{ id: string; type: string }>(
          'select id, type from merchant_events where object_id = $1 order by created_at',
          [created.id],
        )
      ).rows;
    const recorded = await events();
    expect(recorded.map((e) => e.type)).toEqual(['order.needs_attention', 'order.completed']);
    const completed = recorded[1]!;
    const delivery = async () =>
      (
        await api.pool.query<{ status: string }>(
          `select status from webhook_deliveries where endpoint_id = 'we_rr' and event_id = $1`,
          [completed.id],
        )
      ).rows[0]?.status;
    await until('completed event delivered', async () => (await delivery()) === 'succeeded');

    await stack.stopWorker();
    await restoreTo(t0);
    expect(await events()).toEqual([]);
    const { summary, progress } = await recoverSince(t0);
    expect(summary.errors).toEqual([]);
    expect(summary.events.recorded).toBe(1);
    expect(progress.some((l) => l.includes(created.workflowId) && l.includes('merchant event'))).toBe(true);
    // The status the row ends in gets its event back, with the ID its transition gave it.
    expect(await events()).toEqual([completed]);
    const deliveries = await api.pool.query(
      `select d.endpoint_id, o.workflow_type from webhook_deliveries d
         join workflow_outbox o on o.workflow_id = d.workflow_id where d.event_id = $1`,
      [completed.id],
    );
    expect(deliveries.rows).toEqual([{ endpoint_id: 'we_rr', workflow_type: DELIVERY_WORKFLOW_TYPE }]);

    const { summary: again } = await recoverSince(t0);
    expect(again.events.recorded).toBe(0);
    expect(await events()).toEqual([completed]);

    // Its delivery workflow ran before the restore: a second run settles the restored delivery
    // (sending it again under the same event ID, as the ledger lost its record), not left pending.
    await stack.startWorker();
    await until('restored delivery settled', async () => (await delivery()) === 'succeeded');
    const ids = merchant!.received.map((r) => r.id);
    expect(ids.filter((id) => id === completed.id).length).toBeGreaterThanOrEqual(2);
    expect(new Set(ids)).toEqual(new Set(recorded.map((e) => e.id)));
    await api.pool.query(`update webhook_endpoints set deleted_at = now() where id = 'we_rr'`);
  }, 120_000);

  it('makes a pending delivery due again whose start intent the backup held as started, so a new run settles it', async () => {
    const receiver = await startReceiver(() => 200);
    try {
      await insertEndpoint(api.pool, {
        tenantId: tenant.tenantId,
        id: 'we_rd',
        url: receiver.url,
        events: ['order.completed'],
        secret: 'whsec_cnJzZWNyZXQ=',
      });
      const { created } = await placeAndFinish('rd-1');
      const event = await api.pool.query<{ id: string }>(
        `select id from merchant_events where object_id = $1 and type = 'order.completed'`,
        [created.id],
      );
      const eventId = event.rows[0]!.id;
      const workflowId = `delivery/we_rd/${eventId}`;
      const delivery = async () =>
        (
          await api.pool.query<{ status: string }>(
            `select status from webhook_deliveries where endpoint_id = 'we_rd' and event_id = $1`,
            [eventId],
          )
        ).rows[0]?.status;
      await until('delivered', async () => (await delivery()) === 'succeeded');

      // A backup taken after the relay recorded the delivery's start and before its run settled it:
      // the intent started, the delivery pending, the ledger without the send. Its run has closed.
      await stack.stopWorker();
      await api.pool.query(
        `update webhook_deliveries set status = 'pending', delivered_at = null
          where endpoint_id = 'we_rd' and event_id = $1`,
        [eventId],
      );
      await api.pool.query('delete from operations where key = $1', [`${workflowId}/deliver`]);
      const started = await api.pool.query(
        'select 1 from workflow_outbox where workflow_id = $1 and started_at is not null',
        [workflowId],
      );
      expect(started.rowCount).toBe(1);

      const { summary, progress } = await recoverSince(await dbNow());
      expect(summary.errors).toEqual([]);
      expect(summary.deliveries.reopened).toBeGreaterThanOrEqual(1);
      expect(progress.some((l) => l.includes('pending merchant deliveries due again'))).toBe(true);
      // The relay starts the closed run's workflow again; the new run sends under the same event ID.
      await stack.startWorker();
      await until('restored delivery settled', async () => (await delivery()) === 'succeeded');
      expect(receiver.received.filter((r) => r.id === eventId).length).toBe(2);
    } finally {
      await api.pool.query(`update webhook_endpoints set deleted_at = now() where id = 'we_rd'`);
      await receiver.close();
    }
  }, 120_000);

  it('restores the charge of a running order whose first workflow task never finished as unknown, and charges it once', async () => {
    // The workflow task that runs an order's first steps (the status write, then the charge, as
    // local activities) leaves nothing in the history until it completes, not even the patch
    // marker: a worker stopped while the provider holds that charge leaves a history with no step.
    // Played here without the race: the order starts while no worker runs.
    await stack.stopWorker();
    const t0 = await dbNow();
    const { input, workflowId, handle } = await stack.startOrder({ tenantId: tenant.tenantId });
    await restoreTo(t0);

    const { summary, progress } = await recoverSince(t0);
    expect(summary.errors).toEqual([]);
    // Nothing proves the charge never ran: it is restored unknown, never simply absent (absent,
    // the next attempt would charge again, and past the provider's key window that is a second
    // charge). The provider has nothing under its key, so reconciling leaves it to the step.
    expect(summary.steps).toMatchObject({ final: 0, unknown: 1 });
    expect(progress.some((l) => l.includes(workflowId) && l.includes('payment.charge unknown'))).toBe(true);
    const scope = {
      tenantId: tenant.tenantId,
      operationType: OPERATION_TYPES.charge,
      key: `${workflowId}/charge`,
    };
    expect(await api.ledger.get(scope)).toMatchObject({ state: 'unknown' });

    // The worker comes back: the step reconciles its unknown record, finds no charge, and charges once.
    await stack.startWorker();
    expect(await handle.result()).toMatchObject({ status: 'completed' });
    expect(await stack.charges(input.orderId)).toHaveLength(1);
    expect(await api.ledger.get(scope)).toMatchObject({ state: 'succeeded' });
  }, 120_000);

  it("restores as unknown the receipt a running order's unfinished task may have sent after its charge, and sends it once", async () => {
    await stack.stopWorker();
    const t0 = await dbNow();
    const { input, workflowId, handle } = await stack.startOrder({ tenantId: tenant.tenantId });
    // What the order's first workflow task does, done here by the steps themselves while no worker
    // runs: the charge, then the receipt, each under its key. A worker that died before that task
    // completed leaves the same: both effects at the provider, neither marker in the history.
    const providers = { baseUrl: stack.sandbox.url, timeoutMs: 2000 };
    const charged = await runCharge(
      { ledger: stack.ledger, payments: createSandboxPaymentProvider(providers) },
      { ...input, key: `${workflowId}/charge` },
    );
    expect(charged).toMatchObject({ outcome: 'succeeded', chargeId: expect.stringMatching(/^ch_/) });
    const sent = await runReceipt(
      { ledger: stack.ledger, email: createSandboxEmailProvider(providers) },
      { ...input, key: `${workflowId}/receipt`, to: input.customer.email, chargeId: charged.chargeId! },
    );
    await restoreTo(t0);

    // First with the payment provider unreachable: the charge is restored unknown and stays so,
    // and the receipt, whose record needs the charge's ID, cannot be restored yet.
    const { summary: blind, progress } = await recoverSince(t0, 'http://127.0.0.1:1');
    expect(blind.steps).toMatchObject({ final: 0, unknown: 1 });
    expect(blind.reconciled.settled).toBe(0);
    expect(
      progress.some((l) => l.includes(`${workflowId}/charge: not found succeeded, so its receipt`)),
    ).toBe(true);
    const receiptScope = {
      tenantId: tenant.tenantId,
      operationType: OPERATION_TYPES.receipt,
      key: `${workflowId}/receipt`,
    };
    expect(await api.ledger.get(receiptScope)).toBeNull();

    // Run again once the provider answers: the charge, still unknown, is found; then the receipt is
    // restored unknown: absent, the next attempt would send again under its key, which past the
    // provider's key window is a second message.
    const { summary } = await recoverSince(t0);
    expect(summary.errors).toEqual([]);
    expect(summary.steps).toMatchObject({ final: 0, unknown: 1 });
    expect(summary.reconciled).toMatchObject({ settled: 1 });
    expect(await api.ledger.get(receiptScope)).toMatchObject({ state: 'unknown' });
    // A third run finds both records and restores nothing.
    const { summary: again } = await recoverSince(t0);
    expect(again.steps).toMatchObject({ final: 0, unknown: 0 });
    expect(again.reconciled.settled).toBe(0);

    // The worker comes back: the charge replays, the receipt's lookup finds the message sent.
    await stack.startWorker();
    expect(await handle.result()).toMatchObject({ status: 'completed' });
    expect(await stack.charges(input.orderId)).toHaveLength(1);
    expect(await stack.messages(input.orderId)).toHaveLength(1);
    expect(await api.ledger.get(receiptScope)).toMatchObject({
      state: 'succeeded',
      providerRef: sent.messageId,
    });
  }, 120_000);

  it("rebuilds this database's workflows and skips, by name, those whose memo names another database on the same task queue", async () => {
    // Another database beside this one on the same namespace and task queue (a dev database dropped
    // and created again, say), seeded with the same tenant: without the memo's identity its orders
    // look like ones this database lost, and would be rebuilt into it.
    const other = await emptyDatabase('rr-other');
    let otherApi: TestApi | undefined;
    try {
      await migrate(other.url);
      otherApi = await startApi({ env: { DATABASE_URL: other.url, TEMPORAL_TASK_QUEUE: stack.taskQueue } });
      await insertTenant(otherApi.pool, { id: tenant.tenantId, name: tenant.tenantId });
      await insertApiKey(otherApi.pool, {
        keyHash: hashApiKey(tenant.key),
        tenantId: tenant.tenantId,
        label: 'test',
      });
      const ours = await selectDatabaseIdentity(api.pool);
      const theirs = await selectDatabaseIdentity(otherApi.pool);
      expect(theirs).not.toBe(ours);

      // No worker runs, so both orders' workflows stay as their relays started them.
      await stack.stopWorker();
      const t0 = await dbNow();
      const place = async (on: TestApi, idem: string): Promise<Created> => {
        const res = await call(on, 'POST', '/v1/orders', { key: tenant.key, idem, body: validOrder() });
        expect(res.status).toBe(202);
        return res.body as Created;
      };
      const mine = await place(api, 'rr-mine');
      const foreign = await place(otherApi, 'rr-foreign');
      // Both relays have started their workflows, each naming its database, and Temporal lists them.
      const query = `TaskQueue = '${stack.taskQueue}' AND StartTime >= '${t0.toISOString()}'`;
      const listed = await until(
        'both workflows listed with their memos',
        async () => {
          const memos = new Map<string, string | null>();
          for await (const wf of api.client.workflow.list({ query }))
            memos.set(wf.workflowId, readDatabaseIdentity(wf.memo));
          return memos;
        },
        { done: (m) => m.has(mine.workflowId) && m.has(foreign.workflowId) },
      );
      expect(listed.get(mine.workflowId)).toBe(ours);
      expect(listed.get(foreign.workflowId)).toBe(theirs);
      // Not for this stack's worker to run, once it polls again.
      await api.client.workflow.getHandle(foreign.workflowId).terminate("test: another database's order");
      await restoreTo(t0);

      // The operator's command, as a shell runs it: one line names what it skipped, and why.
      const cli = await runOps(
        ['recover-after-restore', '--since', t0.toISOString(), '--margin-seconds', '0', '--actor', 'test'],
        { sandboxUrl: stack.sandbox.url, taskQueue: stack.taskQueue },
      );
      expect(cli.code, cli.stderr).toBe(0);
      const skippedLine = `skipped 1 workflows whose memo names another database (e.g. ${foreign.workflowId})`;
      expect(cli.stdout.split('\n')).toEqual(
        expect.arrayContaining([
          expect.stringMatching(/^recovery \d+: 1 order and 0 refund workflows since /),
          expect.stringContaining(skippedLine),
          expect.stringMatching(/^rows: 1 restored, /),
          expect.stringMatching(/^create records: 1 restored, /),
          'done: creates and workers may run again',
        ]),
      );
      // The stored summary counts it too, for whoever reads the recovery's row later.
      const stored = await api.pool.query<{ summary: RecoverySummary }>(
        'select summary from restore_recoveries order by id desc limit 1',
      );
      expect(stored.rows[0]?.summary.otherDatabase).toEqual({ skipped: 1, example: foreign.workflowId });

      // This database's order is back; the other database's order never came into it.
      const back = await call(api, 'GET', `/v1/orders/${mine.id}`, { key: tenant.key });
      expect(back.status).toBe(200);
      const rows = await api.pool.query('select 1 from orders where workflow_id = $1', [foreign.workflowId]);
      expect(rows.rowCount).toBe(0);
      const outbox = await api.pool.query('select 1 from workflow_outbox where workflow_id = $1', [
        foreign.workflowId,
      ]);
      expect(outbox.rowCount).toBe(0);
      const audit = await api.pool.query(`select 1 from audit_log where workflow_id = $1`, [
        foreign.workflowId,
      ]);
      expect(audit.rowCount).toBe(0);

      // The rebuilt order runs to its end once the worker is back.
      await stack.startWorker();
      const done = await call(api, 'GET', `/v1/orders/${mine.id}?wait=30`, { key: tenant.key });
      expect((done.body as { status: string }).status).toBe('completed');
    } finally {
      await otherApi?.close();
      await other.drop();
    }
  }, 120_000);
});
