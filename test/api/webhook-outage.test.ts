/**
 * The webhook route never holds a database transaction across a call to
 * Temporal (issue #24, item 6): it records the event's intent
 * (`signal_pending`), signals with a deadline, then records the result. So a
 * Temporal that hangs costs each event a few seconds, not a pooled connection,
 * and order creation keeps answering 202.
 *
 * Temporal is "down" by pointing the API's client at a blackhole (accepts,
 * never answers). Postgres, the API app and its pool are real.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import type { FastifyInstance } from 'fastify';
import { buildApiApp } from '../../src/api/app.ts';
import { OutboxRelay } from '../../src/api/outbox.ts';
import { freePort } from '../../src/process/ports.ts';
import { downstreamKey, Ledger } from 'onceflow';
import { OPERATION_TYPES, orderWorkflowId, stepKeys, type OrderStatus } from '../../src/orders/model.ts';
import { insertAcceptedOrder, orderTransitionStatement } from '../../src/orders/sql.ts';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { chargeScope } from '../../src/steps/payment.ts';
import type { Pool } from '../../src/db/index.ts';
import { startBlackhole, type Blackhole } from '../support/blackhole.ts';
import { testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { call, newTenant, startApi, testConfig, validOrder, type TestApi } from './support.ts';

const SECRET = 'whsec_test_api';
const AMOUNT = 3000; // validOrder(): 2 x 1500

/** The API app with its Temporal client pointed at `address`, on the test's database. */
async function startApiAgainst(address: string) {
  const config = testConfig({ TEMPORAL_ADDRESS: address });
  const pool = testPool(20, config.databaseUrl);
  const ledger = new Ledger(pool, { localWaitMs: 5000 });
  const connection = Connection.lazy({ address });
  const temporal = new Client({ connection, namespace: 'default' });
  const relay = new OutboxRelay({ pool, temporal, enabled: true, pollMs: 100 });
  const app: FastifyInstance = await buildApiApp({ pool, ledger, temporal, config, relay });
  const port = await freePort();
  await app.listen({ host: '127.0.0.1', port });
  return {
    url: `http://127.0.0.1:${port}`,
    pool,
    ledger,
    async close() {
      // The connection first: it cuts any call still waiting on the blackhole, so requests can finish.
      await connection.close();
      await relay.stop();
      await app.close();
      await pool.end();
    },
  };
}

/** An order the workflow has moved to `status` (accepted -> ... through the ledger, as its activities do). */
async function orderIn(
  pool: Pool,
  ledger: Ledger,
  tenantId: string,
  path: OrderStatus[],
): Promise<{ id: string; workflowId: string }> {
  const id = uniq('ord');
  const workflowId = orderWorkflowId(tenantId, id);
  await insertAcceptedOrder(pool, {
    tenantId,
    orderId: id,
    workflowId,
    amount: AMOUNT,
    currency: 'usd',
    customerId: 'cus_1',
    customerEmail: 'a@example.com',
    items: [{ sku: 'SKU-1', quantity: 2, unitAmount: AMOUNT / 2 }],
    paymentMethod: 'pm_card_visa',
  });
  for (const to of path) {
    await ledger.runLocalStatement(
      { tenantId, operationType: OPERATION_TYPES.status, key: stepKeys.status(workflowId, to) },
      { schemaVersion: 1, value: { orderId: id, status: to } },
      orderTransitionStatement({
        tenantId,
        orderId: id,
        to,
        chargeId: null,
        receiptId: null,
        lastError: null,
        stepKey: stepKeys.status(workflowId, to),
        taskQueue: 'webhook-outage-test',
      }),
    );
  }
  return { id, workflowId };
}

/** A signed charge.succeeded for the order's own charge (its downstream key, amount and currency). */
function chargeEvent(tenantId: string, order: { id: string; workflowId: string }, id = `evt_${uniq('e')}`) {
  return {
    id,
    object: 'event',
    type: 'charge.succeeded',
    created: Math.floor(Date.now() / 1000),
    data: {
      object: {
        id: `ch_${order.id}`,
        object: 'charge',
        amount: AMOUNT,
        currency: 'usd',
        status: 'succeeded',
        idempotency_key: downstreamKey(chargeScope({ tenantId, key: stepKeys.charge(order.workflowId) })),
        metadata: { order_id: order.id, tenant_id: tenantId },
      },
    },
  };
}

function deliver(api: { url: string }, evt: unknown) {
  const raw = JSON.stringify(evt);
  return call(api, 'POST', '/v1/webhooks/payments', {
    raw,
    headers: { 'onceflow-signature': signWebhook(SECRET, raw, Math.floor(Date.now() / 1000)) },
  });
}

async function outcomes(pool: Pool, eventIds: string[]): Promise<string[]> {
  const { rows } = await pool.query<{ outcome: string }>(
    'select outcome from webhook_events where event_id = any($1) order by event_id',
    [eventIds],
  );
  return rows.map((r) => r.outcome);
}

/**
 * Polls pg_stat_activity (for this test's database) until stopped, keeping
 * every connection seen idle in a transaction for more than a second.
 */
function idleInTransactionSampler(pool: Pool) {
  const seen: { pid: number; state: string; held_ms: number; query: string }[] = [];
  let running = true;
  const loop = (async () => {
    while (running) {
      const { rows } = await pool.query<(typeof seen)[number]>(
        `select pid, state, query,
                (extract(epoch from now() - least(state_change, xact_start)) * 1000)::int as held_ms
           from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid()
            and state like 'idle in transaction%'
            and (now() - state_change > interval '1 second' or now() - xact_start > interval '1 second')`,
      );
      seen.push(...rows);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();
  return {
    seen,
    async stop() {
      running = false;
      await loop;
    },
  };
}

describe('webhooks while Temporal is down', () => {
  let hole: Blackhole;
  let down: Awaited<ReturnType<typeof startApiAgainst>>;
  let up: TestApi;
  let samplerPool: Pool;

  beforeAll(async () => {
    hole = await startBlackhole();
    down = await startApiAgainst(hole.address);
    up = await startApi();
    samplerPool = testPool(1);
  });
  afterAll(async () => {
    // The blackhole first: it cuts any call still hanging, so the apps can close.
    await hole?.close();
    await down?.close();
    await up?.close();
    await samplerPool?.end();
  });

  it('30 events and their redeliveries for payment_unknown orders: POST /v1/orders keeps answering 202, no connection sits idle in a transaction, every event stays signal_pending', async () => {
    const t = await newTenant(down.pool, 'whout');
    const orders = await Promise.all(
      Array.from({ length: 30 }, () =>
        orderIn(down.pool, down.ledger, t.tenantId, ['payment_pending', 'payment_unknown']),
      ),
    );
    const events = orders.map((o) => chargeEvent(t.tenantId, o));
    const sampler = idleInTransactionSampler(samplerPool);

    // Each event delivered twice at once (a redelivery overlapping the first attempt).
    const webhooks = Promise.all(events.flatMap((e) => [deliver(down, e), deliver(down, e)]));
    // The route is now talking to the blackhole: order creation must not queue behind it.
    await until('the API tried to reach Temporal', () => hole.accepted() > 0);
    const posts = await Promise.all(
      Array.from({ length: 10 }, () =>
        call(down, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() }),
      ),
    );
    // Soft, so both are reported even where the webhooks below never finish.
    expect.soft(posts.map((r) => r.status)).toEqual(Array(10).fill(202));
    expect.soft(sampler.seen).toEqual([]);
    const first = await webhooks;
    // The provider's later retries.
    const retries = await Promise.all(events.map((e) => deliver(down, e)));
    await sampler.stop();

    expect(sampler.seen).toEqual([]);
    for (const res of [...first, ...retries]) {
      expect(res.status).toBe(503);
      expect(res.headers.get('retry-after')).toBeTruthy();
    }
    // The intent is recorded, never lost: each event waits for its next delivery.
    expect(
      await outcomes(
        down.pool,
        events.map((e) => e.id),
      ),
    ).toEqual(Array(30).fill('signal_pending'));
  }, 60_000);

  it('an event whose signal failed is signalled by its redelivery once Temporal answers', async () => {
    const t = await newTenant(up.pool, 'whback');
    // A real order with a started workflow on a queue no worker polls, parked in payment_unknown.
    const res = await call(up, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() });
    expect(res.status).toBe(202);
    const order = res.body as { id: string; workflowId: string };
    await until('the order workflow started', async () => {
      const { rows } = await up.pool.query('select started_at from workflow_outbox where workflow_id = $1', [
        order.workflowId,
      ]);
      return rows[0]?.started_at;
    });
    await up.pool.query(`update orders set status = 'payment_unknown' where tenant_id = $1 and id = $2`, [
      t.tenantId,
      order.id,
    ]);
    const evt = chargeEvent(t.tenantId, order);

    const failed = await deliver(down, evt);
    expect(failed.status).toBe(503);
    expect(await outcomes(up.pool, [evt.id])).toEqual(['signal_pending']);

    const redelivered = await deliver(up, evt);
    expect(redelivered.status).toBe(200);
    expect(redelivered.body).toEqual({ received: true, duplicate: false, outcome: 'signalled' });
    expect(await outcomes(up.pool, [evt.id])).toEqual(['signalled']);
    expect((await deliver(up, evt)).body).toMatchObject({ duplicate: true });

    const history = await up.client.workflow.getHandle(order.workflowId).fetchHistory();
    const signals = (history.events ?? []).flatMap((e) => {
      const a = e.workflowExecutionSignaledEventAttributes;
      return a
        ? [(defaultPayloadConverter.fromPayload(a.input!.payloads![0]!) as { eventId: string }).eventId]
        : [];
    });
    expect(signals).toEqual([evt.id]);
  });
});
