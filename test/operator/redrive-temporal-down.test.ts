/**
 * A re-drive while Temporal hangs (docs/ARCHITECTURE.md, "No transaction
 * across a remote call"): the operator's intent is on record before
 * Temporal is called, no connection sits idle in a transaction while the
 * call waits, the call gives up at its deadline with `unavailable`, and the
 * audit says the outcome is unknown (the re-drive may still run).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client, Connection } from '@temporalio/client';
import { Ledger } from 'onceflow';
import { Operator, isOpsError } from '../../src/operator/index.ts';
import { insertAcceptedOrder } from '../../src/orders/sql.ts';
import { orderWorkflowId } from '../../src/orders/model.ts';
import type { Pool } from '../../src/db/index.ts';
import { startBlackhole, type Blackhole } from '../support/blackhole.ts';
import { temporalClient, testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { testOperator } from './support.ts';

const DEADLINE_MS = 2_000;
let pool: Pool;
let blackhole: Blackhole;
let connection: Connection;
let operator: Operator;

beforeAll(async () => {
  pool = testPool(4);
  blackhole = await startBlackhole();
  // Lazy: connecting would itself hang on the blackhole; the first call connects.
  connection = Connection.lazy({ address: blackhole.address });
  // Nothing listens on port 9: a provider call would fail fast (none is made here).
  operator = testOperator({
    pool,
    ledger: new Ledger(pool),
    temporal: new Client({ connection, namespace: 'default' }),
    providerTimeoutMs: 500,
    temporalTimeoutMs: DEADLINE_MS,
  });
});
afterAll(async () => {
  await connection?.close().catch(() => undefined);
  await blackhole?.close();
  await pool?.end();
});

async function insertOrder(orderId: string): Promise<string> {
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
  return workflowId;
}

/** Connections to this test's database that are inside a transaction but waiting on the client. */
async function idleInTransaction(): Promise<number> {
  const { rows } = await pool.query<{ n: number }>(
    `select count(*)::int as n from pg_stat_activity
      where datname = current_database() and state in ('idle in transaction', 'idle in transaction (aborted)')`,
  );
  return rows[0]!.n;
}

describe('Operator.redrive with Temporal hanging', () => {
  it('records the intent first, holds no transaction while it waits, and fails with unavailable at its deadline', async () => {
    const orderId = uniq('ord');
    const workflowId = await insertOrder(orderId);

    const started = Date.now();
    const outcome = operator.redrive('acme', orderId, { actor: 'ann', reason: 'provider is back' }).then(
      () => null,
      (err: unknown) => err,
    );
    // The call has reached "Temporal" and hangs there.
    await until('the Temporal client to connect to the blackhole', () => blackhole.accepted() > 0);
    const samples: number[] = [];
    const intentWhileHanging = await until(
      'the intent audit row, committed while the call hangs',
      async () => {
        samples.push(await idleInTransaction());
        const { rows } = await pool.query(`select action from audit_log where workflow_id = $1 order by id`, [
          workflowId,
        ]);
        return rows.length > 0 ? rows : null;
      },
      { timeoutMs: DEADLINE_MS - 200, intervalMs: 100 },
    ).catch((err: unknown) => err);
    for (let i = 0; i < 5; i++) samples.push(await idleInTransaction());

    const err = await outcome;
    const elapsed = Date.now() - started;

    expect(
      samples.every((n) => n === 0),
      `idle in transaction samples: ${samples.join(',')}`,
    ).toBe(true);
    expect(intentWhileHanging).toEqual([{ action: 'redrive_requested' }]);
    expect(isOpsError(err) && err.code).toBe('unavailable');
    expect((err as Error).message).toMatch(/may still run/);
    // Its own deadline, plus the database round trips around it.
    expect(elapsed).toBeLessThan(DEADLINE_MS + 3_000);

    const { rows } = await pool.query<{
      id: string;
      action: string;
      actor: string;
      reason: string;
      after: { redrive?: unknown };
    }>(`select id::text, action, actor, reason, after from audit_log where workflow_id = $1 order by id`, [
      workflowId,
    ]);
    expect(rows.map((r) => r.action)).toEqual(['redrive_requested', 'redrive_unknown']);
    expect(rows[0]).toMatchObject({ actor: 'ann', reason: 'provider is back' });
    expect(rows[1]!.after).toMatchObject({ redrive: { requestId: rows[0]!.id, outcome: 'unknown' } });
    // Nothing left holding the order row.
    expect(await idleInTransaction()).toBe(0);
  }, 30_000);
});

describe('Operator.redrive refused by Temporal', () => {
  it('leaves the intent and a redrive_refused row (nothing ran), and no redrive row', async () => {
    const { client, close } = await temporalClient();
    try {
      const live = testOperator({ pool, ledger: new Ledger(pool), temporal: client, providerTimeoutMs: 500 });
      const orderId = uniq('ord');
      const workflowId = await insertOrder(orderId);
      // No workflow was ever started for it: Temporal answers "not found", a definite refusal.
      const err = await live.redrive('acme', orderId, { actor: 'bob', reason: 'try' }).then(
        () => null,
        (e: unknown) => e,
      );
      expect(isOpsError(err) && err.code).toBe('invalid_state');
      const { rows } = await pool.query<{ id: string; action: string; after: { redrive?: unknown } }>(
        `select id::text, action, after from audit_log where workflow_id = $1 order by id`,
        [workflowId],
      );
      expect(rows.map((r) => r.action)).toEqual(['redrive_requested', 'redrive_refused']);
      expect(rows[1]!.after).toMatchObject({ redrive: { requestId: rows[0]!.id, outcome: 'refused' } });
    } finally {
      await close();
    }
  });
});
