/**
 * The workflow outbox: an order commits with its start intent; the relay
 * starts each workflow exactly once, whatever happened in between.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, WorkflowNotFoundError, type WorkflowClientInterceptor } from '@temporalio/client';
import { MAX_PASS_BACKOFF_MS, OutboxRelay, passDelayMs } from '../../src/api/outbox.ts';
import { createMetrics } from '../../src/metrics/index.ts';
import { getOutbox, insertOutboxStatement } from '../../src/outbox/sql.ts';
import { DELIVERY_WORKFLOW_TYPE } from '../../src/merchant-events/contract.ts';
import { ownDatabase, uniq } from '../support/env.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';
import { deferred } from '../support/wait.ts';

type Order = { id: string; workflowId: string };

describe('workflow outbox relay', () => {
  // A database of this file's own: a relay starts every due row of its
  // database, and these tests count and assert on every row.
  let db: Awaited<ReturnType<typeof ownDatabase>>;
  let api: TestApi; // OUTBOX_RELAY=off: commits, never starts
  let t: { tenantId: string; key: string };
  const relays: OutboxRelay[] = [];

  const relay = (temporal: Client = api.client) => {
    const r = new OutboxRelay({
      pool: api.pool,
      temporal,
      enabled: true,
    });
    relays.push(r);
    return r;
  };

  beforeAll(async () => {
    db = await ownDatabase('outbox');
    api = await startApi({ env: { OUTBOX_RELAY: 'off', DATABASE_URL: db.url } });
    t = await newTenant(api.pool, 'ob');
  });
  afterAll(async () => {
    await Promise.all(relays.map((r) => r.stop()));
    await api?.close();
    await db?.drop();
  });

  async function create(): Promise<Order> {
    const res = await call(api, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() });
    expect(res.status).toBe(202);
    return res.body as Order;
  }

  const outbox = async (workflowId: string) =>
    (
      await api.pool.query<{ started_at: Date | null; attempts: number; last_error: string | null }>(
        'select started_at, attempts, last_error from workflow_outbox where workflow_id = $1',
        [workflowId],
      )
    ).rows[0];

  async function runs(workflowId: string): Promise<number> {
    let n = 0;
    for await (const _ of api.client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) n++;
    return n;
  }

  it('with the relay off the order commits but no workflow exists; a relay then starts it exactly once', async () => {
    const order = await create();
    // The test is that nothing starts the workflow on its own. The API's relay (off) is the
    // only thing that could: stop() waits for its loop and for every start it kicked, so
    // whatever it set in motion has landed before the checks below.
    expect(api.relay.enabled).toBe(false);
    await api.relay.stop();
    expect(await outbox(order.workflowId)).toMatchObject({ started_at: null, attempts: 0 });
    await expect(api.client.workflow.getHandle(order.workflowId).describe()).rejects.toBeInstanceOf(
      WorkflowNotFoundError,
    );

    const r = relay();
    expect(await r.relayDue()).toBeGreaterThanOrEqual(1);
    const desc = await api.client.workflow.getHandle(order.workflowId).describe();
    expect(desc.type).toBe('orderWorkflow');
    expect(desc.taskQueue).toBe(api.config.temporal.taskQueue);
    expect(await outbox(order.workflowId)).toMatchObject({ attempts: 1, last_error: null });
    expect((await outbox(order.workflowId))?.started_at).toBeInstanceOf(Date);
    const input = (await api.client.workflow.getHandle(order.workflowId).fetchHistory()).events?.[0]
      ?.workflowExecutionStartedEventAttributes?.input;
    expect(input?.payloads).toHaveLength(1);

    // A crash after the start but before it was recorded: once the claim runs out, the next pass
    // starts it again, harmlessly.
    await api.pool.query(
      'update workflow_outbox set started_at = null, next_attempt_at = now() where workflow_id = $1',
      [order.workflowId],
    );
    expect(await r.startOne(order.workflowId)).toBe('already_started');
    expect((await outbox(order.workflowId))?.started_at).toBeInstanceOf(Date);
    // Even after the run has closed, a repeated start is refused (REJECT_DUPLICATE), never a second run.
    await api.client.workflow.getHandle(order.workflowId).terminate('test');
    await api.pool.query(
      'update workflow_outbox set started_at = null, next_attempt_at = now() where workflow_id = $1',
      [order.workflowId],
    );
    expect(await r.startOne(order.workflowId)).toBe('already_started');
    await expect.poll(() => runs(order.workflowId)).toBe(1);
  });

  it('two relays racing over the same rows start each workflow exactly once', async () => {
    const orders = await Promise.all(Array.from({ length: 12 }, () => create()));
    const [a, b] = [relay(), relay()];
    const kicks = orders.map((o) => a.startOne(o.workflowId).catch(() => null));
    await Promise.all([a.relayDue(), b.relayDue(), b.relayDue(), ...kicks]);
    await Promise.all([a.relayDue(), b.relayDue()]);
    for (const o of orders) {
      expect((await outbox(o.workflowId))?.started_at).toBeInstanceOf(Date);
      expect((await api.client.workflow.getHandle(o.workflowId).describe()).type).toBe('orderWorkflow');
    }
    for (const o of orders) await expect.poll(() => runs(o.workflowId)).toBe(1);
  });

  it('a failing start is recorded with backoff and retried later; the background loop picks it up', async () => {
    const order = await create();
    // A client for a namespace that does not exist: every start fails.
    const broken = relay(
      new Client({ connection: api.client.connection, namespace: uniq('no-such-namespace') }),
    );
    await expect(broken.startOne(order.workflowId)).rejects.toThrow();
    const row = await outbox(order.workflowId);
    expect(row).toMatchObject({ started_at: null, attempts: 1 });
    expect(row?.last_error).toBeTruthy();
    const { rows } = await api.pool.query<{ due_in_ms: number }>(
      `select (extract(epoch from next_attempt_at - now()) * 1000)::float8 as due_in_ms from workflow_outbox where workflow_id = $1`,
      [order.workflowId],
    );
    expect(rows[0]!.due_in_ms).toBeGreaterThan(500);

    // Not due yet: a pass skips it.
    const good = relay();
    await good.relayDue();
    expect((await outbox(order.workflowId))?.started_at).toBeNull();
    // Once due, the running loop starts it.
    await api.pool.query('update workflow_outbox set next_attempt_at = now() where workflow_id = $1', [
      order.workflowId,
    ]);
    const loop = new OutboxRelay({
      pool: api.pool,
      temporal: api.client,
      enabled: true,
      pollMs: 100,
    });
    relays.push(loop);
    loop.start();
    await expect
      .poll(async () => (await outbox(order.workflowId))?.started_at, { timeout: 10_000 })
      .toBeInstanceOf(Date);
    await loop.stop();
    expect((await outbox(order.workflowId))?.attempts).toBe(2);
    expect((await api.client.workflow.getHandle(order.workflowId).describe()).type).toBe('orderWorkflow');
  });

  it("a relaying API claims its start intent in the order's own transaction and starts it with no claim statement; an orphaned claim runs out", async () => {
    const relaying = await startApi({ env: { DATABASE_URL: db.url } });
    try {
      const res = await call(relaying, 'POST', '/v1/orders', {
        key: t.key,
        idem: uniq('idem'),
        body: validOrder(),
      });
      expect(res.status).toBe(202);
      const order = res.body as Order;
      await expect
        .poll(async () => (await outbox(order.workflowId))?.started_at, { timeout: 10_000 })
        .toBeInstanceOf(Date);
      await expect.poll(() => runs(order.workflowId)).toBe(1);
      // Read after the start, which leaves the claim on record: it was claimed for the relay's
      // lease (10 s by default) when it committed, so not due for any relay's pass or claim; the
      // accepting API started it anyway, right after commit.
      const { rows } = await api.pool.query<{ claimed_for_ms: number }>(
        `select (extract(epoch from next_attempt_at - created_at) * 1000)::float8 as claimed_for_ms
           from workflow_outbox where workflow_id = $1`,
        [order.workflowId],
      );
      expect(rows[0]!.claimed_for_ms).toBeGreaterThan(5_000);
    } finally {
      await relaying.close();
    }

    // An API that died between commit and start: no relay takes the row while the claim
    // lasts; once it has run out, any relay starts it.
    const orphan = await create();
    await api.pool.query(
      `update workflow_outbox set next_attempt_at = now() + interval '1 hour' where workflow_id = $1`,
      [orphan.workflowId],
    );
    expect(await relay().startOne(orphan.workflowId)).toBeNull();
    await api.pool.query(`update workflow_outbox set next_attempt_at = now() where workflow_id = $1`, [
      orphan.workflowId,
    ]);
    expect(await relay().startOne(orphan.workflowId)).toBe('started');
  });

  it('a disabled relay starts nothing', async () => {
    const order = await create();
    expect(await api.relay.relayDue()).toBe(0);
    api.relay.kick((await getOutbox(api.pool, order.workflowId))!);
    await api.relay.stop();
    expect((await outbox(order.workflowId))?.started_at).toBeNull();
  });

  it('starts rows written under another task queue, each on the queue recorded with it', async () => {
    const order = await create();
    const otherQueue = uniq('other-queue');
    // As if an API configured with another TEMPORAL_TASK_QUEUE had committed it and died.
    await api.pool.query('update workflow_outbox set task_queue = $2 where workflow_id = $1', [
      order.workflowId,
      otherQueue,
    ]);
    await relay().relayDue();
    expect((await outbox(order.workflowId))?.started_at).toBeInstanceOf(Date);
    expect((await api.client.workflow.getHandle(order.workflowId).describe()).taskQueue).toBe(otherQueue);
  });

  it('ends an open delivery run older than its row (a restore came while it ran) and starts a new one; a newer run is kept', async () => {
    const queue = uniq('deliveries'); // no worker polls it: every run stays open
    const order = await create(); // a delivery's row names its order
    const input = { tenantId: t.tenantId, endpointId: 'we_ob', eventId: uniq('evt') };
    const startRun = (workflowId: string) =>
      api.client.workflow.start(DELIVERY_WORKFLOW_TYPE, { taskQueue: queue, workflowId, args: [input] });
    const intent = (workflowId: string) =>
      api.pool.query(
        insertOutboxStatement({
          workflowId,
          tenantId: t.tenantId,
          orderId: order.id,
          workflowType: DELIVERY_WORKFLOW_TYPE,
          taskQueue: queue,
          input: input as never,
        }),
      );
    // Its run, then its row: what a recovery after a restore writes while the old run is open.
    const restored = uniq('delivery/we_ob/restored');
    const old = await startRun(restored);
    await intent(restored);
    // Its row, then its run: a relay that started it and lost the record of the start.
    const relayed = uniq('delivery/we_ob/relayed');
    await intent(relayed);
    const kept = await startRun(relayed);

    expect(await relay().relayDue()).toBeGreaterThanOrEqual(2);
    const describe = (id: string, runId?: string) => api.client.workflow.getHandle(id, runId).describe();
    expect((await describe(restored, old.firstExecutionRunId)).status.name).toBe('TERMINATED');
    const latest = await describe(restored);
    expect(latest.runId).not.toBe(old.firstExecutionRunId);
    expect(latest.status.name).toBe('RUNNING');
    expect((await describe(relayed)).runId).toBe(kept.firstExecutionRunId);
    expect((await describe(relayed)).status.name).toBe('RUNNING');
    for (const id of [restored, relayed]) expect((await outbox(id))?.started_at).toBeInstanceOf(Date);
    for (const id of [restored, relayed]) await api.client.workflow.getHandle(id).terminate('test done');
  });

  it('holds no transaction open across a Temporal call, and records each start when it happened', async () => {
    const [slow, ...fast] = await Promise.all(Array.from({ length: 4 }, () => create()));
    const gate = deferred();
    const entered = deferred();
    const hold = async (workflowId: string) => {
      if (workflowId !== slow!.workflowId) return;
      entered.resolve();
      await gate.promise;
    };
    const interceptor: WorkflowClientInterceptor = {
      async start(input, next) {
        await hold(input.options.workflowId);
        return next(input);
      },
      async startWithDetails(input, next) {
        await hold(input.options.workflowId);
        return next(input);
      },
    };
    const gated = new Client({
      connection: api.client.connection,
      namespace: 'default',
      interceptors: { workflow: [interceptor] },
    });
    const pass = relay(gated).relayDue();
    await entered.promise;
    // The other workflows of the batch are started and recorded while one start is still pending.
    for (const o of fast)
      await expect.poll(async () => (await outbox(o.workflowId))?.started_at).toBeInstanceOf(Date);
    const idleInTx = await api.pool.query<{ n: number }>(
      `select count(*)::int as n from pg_stat_activity
        where datname = current_database() and state like 'idle in transaction%'`,
    );
    expect(idleInTx.rows[0]!.n).toBe(0);
    // The held start is not recorded before it happens...
    expect((await outbox(slow!.workflowId))?.started_at).toBeNull();
    gate.resolve();
    expect(await pass).toBeGreaterThanOrEqual(4);

    // ...and is recorded after the others, when it happened.
    const at = async (o: Order) => (await outbox(o.workflowId))!.started_at!.getTime();
    const slowAt = await at(slow!);
    for (const o of fast) expect(slowAt).toBeGreaterThan(await at(o));
  });

  it('exports the unstarted backlog and its oldest age in the metrics', async () => {
    const read = async () => {
      const metrics = createMetrics({ pool: api.pool, defaultMetrics: false });
      const get = async (name: string) =>
        (await metrics.registry.getSingleMetric(name)!.get()).values[0]?.value ?? NaN;
      return {
        unstarted: await get('onceflow_outbox_unstarted_rows'),
        oldest: await get('onceflow_outbox_oldest_unstarted_age_seconds'),
      };
    };
    const before = await read();
    const order = await create();
    await api.pool.query(
      `update workflow_outbox set created_at = now() - interval '1 hour' where workflow_id = $1`,
      [order.workflowId],
    );
    const backlog = await read();
    expect(backlog.unstarted).toBe(before.unstarted + 1);
    expect(backlog.oldest).toBeGreaterThanOrEqual(3600);

    expect(await relay().startOne(order.workflowId)).toBe('started');
    const after = await read();
    expect(after.unstarted).toBe(before.unstarted);
    expect(after.oldest).toBeLessThan(3600);
  });

  it('retries a failed pass within seconds, never after a long backoff', () => {
    expect(passDelayMs(0, 1000, () => 0)).toBe(1000);
    for (let failures = 1; failures < 50; failures++)
      expect(passDelayMs(failures, 1000)).toBeLessThanOrEqual(MAX_PASS_BACKOFF_MS);
    expect(passDelayMs(1, 100)).toBeGreaterThan(100);
  });
});
