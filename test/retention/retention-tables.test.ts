/**
 * Retention of the tables besides the ledger (issue 29, item 3), against real
 * Postgres: started outbox rows and webhook event markers past their windows
 * are deleted in bounded batches; unstarted outbox rows and `signal_pending`
 * events never are, however old; and each delete by age is served by an
 * index (0022), not a scan of a table that grows by millions of rows a day.
 * This file's database is its own (a clone of the run's template), so every
 * row the deletes can see is one of ours.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Pool, Queryable } from '../../src/db/index.ts';
import { orderWorkflowId } from '../../src/orders/model.ts';
import { insertAcceptedOrder } from '../../src/orders/sql.ts';
import { deleteStartedOutbox, insertOutboxStatement, markOutboxStarted } from '../../src/outbox/sql.ts';
import { assertRedeliveryWindow, PROVIDER_REDELIVERY_MS } from '../../src/retention/contract.ts';
import { pruneOutbox, pruneWebhookEvents } from '../../src/retention/prune.ts';
import { claimWebhookSignal, deleteOldWebhookEvents, recordWebhookEvent } from '../../src/webhooks/sql.ts';
import { testPool, uniq } from '../support/env.ts';

const DAY = 24 * 60 * 60 * 1000;
const WINDOW = 7 * DAY;

let pool: Pool;

beforeAll(() => {
  pool = testPool(4);
});
afterAll(async () => {
  await pool?.end();
});

/** An order and its outbox row; started `startedDaysAgo` days ago, or never (null). */
async function outboxRow(
  startedDaysAgo: number | null,
  createdDaysAgo = startedDaysAgo ?? 0,
): Promise<string> {
  const orderId = uniq('ord');
  const workflowId = orderWorkflowId('acme', orderId);
  await insertAcceptedOrder(pool, {
    tenantId: 'acme',
    orderId,
    workflowId,
    amount: 3000,
    currency: 'usd',
    customerId: 'cus_1',
    customerEmail: 'buyer@example.com',
    items: [{ sku: 'SKU-1', quantity: 1, unitAmount: 3000 }],
    paymentMethod: 'pm_card_visa',
  });
  await pool.query(
    insertOutboxStatement({
      workflowId,
      tenantId: 'acme',
      orderId,
      workflowType: 'orderWorkflow',
      taskQueue: 'retention-test',
      input: {
        tenantId: 'acme',
        orderId,
        amount: 3000,
        currency: 'usd',
        paymentMethod: 'pm_card_visa',
        customer: { id: 'cus_1', email: 'buyer@example.com' },
      },
    }),
  );
  if (startedDaysAgo !== null) await markOutboxStarted(pool, workflowId);
  await pool.query(
    `update workflow_outbox
        set created_at = now() - $2::float8 * interval '1 day',
            started_at = case when started_at is null then null else now() - $3::float8 * interval '1 day' end
      where workflow_id = $1`,
    [workflowId, createdDaysAgo, startedDaysAgo ?? 0],
  );
  return workflowId;
}

async function outboxIds(ids: readonly string[]): Promise<string[]> {
  const { rows } = await pool.query<{ workflow_id: string }>(
    'select workflow_id from workflow_outbox where workflow_id = any($1::text[]) order by workflow_id',
    [ids],
  );
  return rows.map((r) => r.workflow_id);
}

/** A webhook event marker received `daysAgo` days ago: final (`signalled`), or still `signal_pending`. */
async function webhookEvent(daysAgo: number, pending = false): Promise<string> {
  const e = {
    provider: 'sandbox',
    eventId: uniq('evt'),
    consumer: 'payments',
    eventType: 'charge.succeeded',
    tenantId: 'acme',
    orderId: null,
  };
  if (pending) expect(await claimWebhookSignal(pool, e, 1)).toEqual({ state: 'claimed' });
  else expect(await recordWebhookEvent(pool, { ...e, outcome: 'signalled' })).toBe(true);
  await pool.query(
    `update webhook_events set received_at = now() - $2::float8 * interval '1 day'
      where provider = 'sandbox' and event_id = $1`,
    [e.eventId, daysAgo],
  );
  return e.eventId;
}

async function eventIds(ids: readonly string[]): Promise<string[]> {
  const { rows } = await pool.query<{ event_id: string }>(
    'select event_id from webhook_events where event_id = any($1::text[]) order by event_id',
    [ids],
  );
  return rows.map((r) => r.event_id);
}

/**
 * The plan of the statement `remove` sends, with sequential scans priced out:
 * if no index can serve its age filter, Postgres still scans the table, and
 * the plan says so.
 */
async function planOf(remove: (db: Queryable) => Promise<number>): Promise<string> {
  let sent: { text: string; values: unknown[] } | undefined;
  const capture = {
    query: (text: string, values: unknown[]) => {
      sent = { text, values };
      return Promise.resolve({ rowCount: 0, rows: [] });
    },
  } as unknown as Queryable;
  await remove(capture);
  if (!sent) throw new Error('no statement sent');
  const client = await pool.connect();
  try {
    await client.query('begin');
    await client.query('set local enable_seqscan = off');
    const { rows } = await client.query<{ 'QUERY PLAN': string }>(`explain ${sent.text}`, sent.values);
    await client.query('rollback');
    return rows.map((r) => r['QUERY PLAN']).join('\n');
  } finally {
    client.release();
  }
}

describe('workflow_outbox retention', () => {
  it('deletes started rows past the window; keeps unstarted rows, however old, and young started ones', async () => {
    const oldStarted = [await outboxRow(30), await outboxRow(8)];
    const youngStarted = await outboxRow(6);
    // Created long ago but started only now (a relay that failed for weeks): its age is its start's.
    const lateStarted = await outboxRow(0, 30);
    const oldUnstarted = await outboxRow(null, 30);
    const youngUnstarted = await outboxRow(null, 0);

    const result = await pruneOutbox(pool, { olderThanMs: WINDOW, batchSize: 1000, maxBatches: 10 });
    expect(result).toEqual({ deleted: 2, batches: 1 });
    expect(await outboxIds([...oldStarted, youngStarted, lateStarted, oldUnstarted, youngUnstarted])).toEqual(
      [youngStarted, lateStarted, oldUnstarted, youngUnstarted].sort(),
    );
    // The orders stay: they are the business record (docs/OPERATIONS.md, Retention).
    const { rows } = await pool.query<{ n: number }>(
      'select count(*)::int as n from orders where workflow_id = any($1::text[])',
      [oldStarted],
    );
    expect(rows[0]!.n).toBe(2);
  });

  it('bounds a run by batchSize x maxBatches; the next run goes on', async () => {
    const rows = [];
    for (let i = 0; i < 5; i++) rows.push(await outboxRow(10));
    const first = await pruneOutbox(pool, { olderThanMs: WINDOW, batchSize: 2, maxBatches: 2 });
    expect(first).toEqual({ deleted: 4, batches: 2 });
    expect(await outboxIds(rows)).toHaveLength(1);
    const rest = await pruneOutbox(pool, { olderThanMs: WINDOW, batchSize: 2, maxBatches: 5 });
    expect(rest).toEqual({ deleted: 1, batches: 1 }); // a short batch: nothing left
    expect(await outboxIds(rows)).toEqual([]);
  });

  it('the delete by age is served by an index', async () => {
    const plan = await planOf((db) => deleteStartedOutbox(db, WINDOW, 1000));
    expect(plan).toMatch(/workflow_outbox_started_idx/);
    expect(plan).not.toMatch(/Seq Scan on workflow_outbox/);
  });
});

describe('webhook_events retention', () => {
  it('deletes markers past the window; keeps young ones and every signal_pending one', async () => {
    const old = [await webhookEvent(30), await webhookEvent(8)];
    const young = await webhookEvent(6);
    const oldPending = await webhookEvent(30, true);

    const result = await pruneWebhookEvents(pool, { olderThanMs: WINDOW, batchSize: 1000, maxBatches: 10 });
    expect(result).toEqual({ deleted: 2, batches: 1 });
    expect(await eventIds([...old, young, oldPending])).toEqual([young, oldPending].sort());
  });

  it('bounds a run by batchSize x maxBatches; the next run goes on', async () => {
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await webhookEvent(10));
    const first = await pruneWebhookEvents(pool, { olderThanMs: WINDOW, batchSize: 2, maxBatches: 2 });
    expect(first).toEqual({ deleted: 4, batches: 2 });
    expect(await eventIds(ids)).toHaveLength(1);
    const rest = await pruneWebhookEvents(pool, { olderThanMs: WINDOW, batchSize: 2, maxBatches: 5 });
    expect(rest).toEqual({ deleted: 1, batches: 1 });
    expect(await eventIds(ids)).toEqual([]);
  });

  it('the delete by age is served by an index', async () => {
    const plan = await planOf((db) => deleteOldWebhookEvents(db, WINDOW, 1000));
    expect(plan).toMatch(/webhook_events_received_idx/);
    expect(plan).not.toMatch(/Seq Scan on webhook_events/);
  });
});

describe('retention windows', () => {
  it('refuses a webhook or outbox window shorter than the providers redelivery horizon (3 days)', () => {
    expect(PROVIDER_REDELIVERY_MS).toBe(3 * DAY);
    expect(() => assertRedeliveryWindow('webhookWindowMs', 3 * DAY - 1)).toThrow(/3 days/);
    expect(() => assertRedeliveryWindow('webhookWindowMs', 3 * DAY)).not.toThrow();
  });
});
