/**
 * Reads what the system says after a fault: order rows, outbox rows, the
 * workflows Temporal knows, and the sandbox provider's own store of charges
 * and messages (ground truth for money moved), through ./sql.ts and the
 * sandbox's SQL module. Each read opens a fresh
 * connection, since the server may have been restarted since the last one.
 */
import pg from 'pg';
import type { Connection } from '@temporalio/client';
import { Client } from '@temporalio/client';
import {
  selectOrderIdsByCustomerPrefix,
  selectOrderOutcomes,
  selectOutboxWorkflowIds,
  selectPendingDeliveries,
  selectRefundOutcomes,
} from './sql.ts';
import { selectAllChargeEffects, selectAllMessageEffects } from '../sandbox/sql.ts';
import { downstreamKey } from 'onceflow';
import { REFUND_OPERATION_TYPES, refundStepKeys, refundWorkflowId } from '../../src/refunds/contract.ts';
import type { MoneyEffect, OrderFact, ProviderRefundEffect, RefundFact } from './invariants.ts';

export async function withDb<T>(url: string, cb: (c: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  client.on('error', () => undefined); // a terminated backend must not crash the harness
  await client.connect();
  try {
    return await cb(client);
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function readOrders(
  db: pg.Client,
  orderIds: readonly string[],
): Promise<Map<string, OrderFact>> {
  const rows = await selectOrderOutcomes(db, orderIds);
  return new Map(
    rows.map((r) => [
      r.id,
      {
        orderId: r.id,
        workflowId: r.workflow_id,
        status: r.status,
        lastError: r.last_error,
        ageAtLastUpdate: Math.round(r.age),
        amount: r.amount,
        refundedAmount: r.refunded_amount,
      },
    ]),
  );
}

export async function readOrdersForCustomers(db: pg.Client, customerPrefix: string): Promise<string[]> {
  return selectOrderIdsByCustomerPrefix(db, customerPrefix);
}

export async function readPendingDeliveries(db: pg.Client, orderIds: readonly string[]): Promise<string[]> {
  return selectPendingDeliveries(db, orderIds);
}

export async function readOutbox(db: pg.Client, workflowIds: readonly string[]): Promise<Set<string>> {
  return new Set(await selectOutboxWorkflowIds(db, workflowIds));
}

import { mailboxReceipts } from './providers.ts';

/** The sandbox's own tables: every charge and message that really happened. */
export async function readMoney(db: pg.Client): Promise<{ charges: MoneyEffect[]; messages: MoneyEffect[] }> {
  const charges = await selectAllChargeEffects(db);
  const messages = await selectAllMessageEffects(db);
  return {
    charges: charges.map((r) => ({
      idempotencyKey: r.idempotency_key,
      orderId: r.order_id,
      status: r.status,
    })),
    // --providers smtp: the SMTP mailbox is the ground truth for receipts (./providers.ts).
    messages:
      mailboxReceipts() ??
      messages.map((r) => ({
        idempotencyKey: r.idempotency_key,
        orderId: r.order_id,
        status: 'sent',
      })),
  };
}

/**
 * These refunds' rows, and the downstream keys their receipts are sent under
 * (so the order-receipt checks can tell a refund receipt, which names its
 * order too, from a second order receipt). The keys come from the refund IDs
 * the clients saw too, not only from the rows: a refund whose row is gone
 * (a restore without recovery) still sent its receipt under its own key.
 */
export async function readRefunds(
  db: pg.Client,
  refundIds: readonly string[],
  tenantId: string,
): Promise<{ refunds: Map<string, RefundFact>; receiptKeys: Set<string> }> {
  const rows = await selectRefundOutcomes(db, refundIds);
  const receiptKey = (tenant: string, workflowId: string) =>
    downstreamKey({
      tenantId: tenant,
      operationType: REFUND_OPERATION_TYPES.receipt,
      key: refundStepKeys.receipt(workflowId),
    });
  return {
    refunds: new Map(
      rows.map((r) => [
        r.id,
        { refundId: r.id, orderId: r.order_id, amount: r.amount, status: r.status, lastError: r.last_error },
      ]),
    ),
    receiptKeys: new Set([
      ...rows.map((r) => receiptKey(r.tenant_id, r.workflow_id)),
      ...refundIds.map((id) => receiptKey(tenantId, refundWorkflowId(tenantId, id))),
    ]),
  };
}

/** Every refund the provider made, from its audit (GET /_sandbox/refunds): money really given back. */
export async function readProviderRefunds(sandboxUrl: string): Promise<ProviderRefundEffect[]> {
  const res = await fetch(`${sandboxUrl}/_sandbox/refunds`, { signal: AbortSignal.timeout(15_000) });
  if (!res.ok) throw new Error(`the sandbox's refund audit answered HTTP ${res.status}`);
  const { data } = (await res.json()) as {
    data: {
      idempotency_key: string;
      order_id: string | null;
      amount: number;
      status: string;
      metadata?: { refund_id?: string };
    }[];
  };
  return data.map((r) => ({
    idempotencyKey: r.idempotency_key,
    orderId: r.order_id,
    refundId: r.metadata?.refund_id ?? null,
    amount: r.amount,
    status: r.status,
  }));
}

/** Workflow ids Temporal has an execution for (any status). */
export async function readWorkflows(
  connection: Connection,
  workflowIds: readonly string[],
): Promise<Set<string>> {
  const client = new Client({ connection, namespace: 'default' });
  const found = new Set<string>();
  const queue = [...workflowIds];
  const worker = async () => {
    for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
      try {
        await client.workflow.getHandle(id).describe();
        found.add(id);
      } catch {
        /* not found (or unreachable: reported as missing) */
      }
    }
  };
  await Promise.all(Array.from({ length: 8 }, worker));
  return found;
}

/** Postgres backends of our own database (by name): what pg_terminate_backend hits. */
export async function terminateOwnBackends(adminUrl: string, databaseName: string): Promise<number> {
  return withDb(adminUrl, async (db) => {
    const { rows } = await db.query<{ n: string }>(
      `select count(*) filter (where pg_terminate_backend(pid)) as n
         from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()`,
      [databaseName],
    );
    return Number(rows[0]?.n ?? 0);
  });
}
