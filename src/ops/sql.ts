/**
 * Statements of the operator service, one function each, client first so
 * they join the caller's transaction. audit_log is append-only (a trigger
 * refuses UPDATE/DELETE/TRUNCATE): there is an insert and there are selects.
 */
import type { Queryable } from '../db/index.ts';
import type { Json } from '../ledger/index.ts';

export type AuditAction = 'reconcile' | 'resolve' | 'redrive';
export type AuditSource = 'cli' | 'api';

export interface AuditEntry {
  /** bigserial, as a string (it may exceed 2^53 in theory; it is also the operator's event ID). */
  id: string;
  createdAt: Date;
  actor: string;
  source: AuditSource;
  action: AuditAction;
  reason: string | null;
  tenantId: string;
  operationType: string | null;
  operationKey: string | null;
  workflowId: string | null;
  before: Json | null;
  after: Json | null;
}

interface AuditRow {
  id: string;
  created_at: Date;
  actor: string;
  source: AuditSource;
  action: AuditAction;
  reason: string | null;
  tenant_id: string;
  operation_type: string | null;
  operation_key: string | null;
  workflow_id: string | null;
  before: Json | null;
  after: Json | null;
}

const AUDIT_COLUMNS = `id::text as id, created_at, actor, source, action, reason, tenant_id, operation_type,
  operation_key, workflow_id, before, after`;

function toEntry(row: AuditRow): AuditEntry {
  return {
    id: row.id,
    createdAt: row.created_at,
    actor: row.actor,
    source: row.source,
    action: row.action,
    reason: row.reason,
    tenantId: row.tenant_id,
    operationType: row.operation_type,
    operationKey: row.operation_key,
    workflowId: row.workflow_id,
    before: row.before,
    after: row.after,
  };
}

export interface NewAuditEntry {
  actor: string;
  source: AuditSource;
  action: AuditAction;
  reason: string | null;
  tenantId: string;
  operationType: string | null;
  operationKey: string | null;
  workflowId: string | null;
  before: unknown;
  after: unknown;
}

/** JSON text for a jsonb parameter (Dates become ISO strings); null stays SQL NULL. */
function jsonParam(value: unknown): string | null {
  return value === null || value === undefined ? null : JSON.stringify(value);
}

export async function insertAudit(db: Queryable, e: NewAuditEntry): Promise<AuditEntry> {
  const { rows } = await db.query<AuditRow>(
    `insert into audit_log (actor, source, action, reason, tenant_id, operation_type, operation_key, workflow_id,
                            before, after)
     values ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10::jsonb)
     returning ${AUDIT_COLUMNS}`,
    [
      e.actor,
      e.source,
      e.action,
      e.reason,
      e.tenantId,
      e.operationType,
      e.operationKey,
      e.workflowId,
      jsonParam(e.before),
      jsonParam(e.after),
    ],
  );
  const row = rows[0];
  if (!row) throw new Error('audit insert returned no row');
  return toEntry(row);
}

export interface AuditFilter {
  operationKey?: string;
  tenantId?: string;
  workflowId?: string;
  limit: number;
}

/** Newest first. */
export async function selectAudit(db: Queryable, f: AuditFilter): Promise<AuditEntry[]> {
  const { rows } = await db.query<AuditRow>(
    `select ${AUDIT_COLUMNS} from audit_log
      where ($1::text is null or operation_key = $1)
        and ($2::text is null or tenant_id = $2)
        and ($3::text is null or workflow_id = $3)
      order by id desc
      limit $4`,
    [f.operationKey ?? null, f.tenantId ?? null, f.workflowId ?? null, f.limit],
  );
  return rows.map(toEntry);
}

export interface OrderSummary {
  tenantId: string;
  orderId: string;
  workflowId: string;
  status: string;
  statusSeq: number;
  amount: number;
  currency: string;
  chargeId: string | null;
  receiptId: string | null;
  lastError: string | null;
  /** Machine-readable reason of a rejected / needs_attention order (ORDER_REASONS). */
  reason: string | null;
  createdAt: Date;
  updatedAt: Date;
}

interface OrderRow {
  tenant_id: string;
  id: string;
  workflow_id: string;
  status: string;
  status_seq: number;
  amount: string;
  currency: string;
  charge_id: string | null;
  receipt_id: string | null;
  last_error: string | null;
  reason: string | null;
  created_at: Date;
  updated_at: Date;
}

const ORDER_COLUMNS = `tenant_id, id, workflow_id, status, status_seq, amount, currency, charge_id, receipt_id,
  last_error, reason, created_at, updated_at`;

function toOrder(row: OrderRow): OrderSummary {
  return {
    tenantId: row.tenant_id,
    orderId: row.id,
    workflowId: row.workflow_id,
    status: row.status,
    statusSeq: row.status_seq,
    amount: Number(row.amount),
    currency: row.currency,
    chargeId: row.charge_id,
    receiptId: row.receipt_id,
    lastError: row.last_error,
    reason: row.reason,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

export async function selectOrderByWorkflowId(
  db: Queryable,
  workflowId: string,
): Promise<OrderSummary | null> {
  const { rows } = await db.query<OrderRow>(`select ${ORDER_COLUMNS} from orders where workflow_id = $1`, [
    workflowId,
  ]);
  return rows[0] ? toOrder(rows[0]) : null;
}

/**
 * FOR UPDATE: a re-drive checks the status, audits, then signals. Holding the
 * row lock until commit keeps two operators from re-driving the same order
 * at once and the workflow from moving the status in between unnoticed.
 */
export async function selectOrderForUpdate(
  db: Queryable,
  tenantId: string,
  orderId: string,
): Promise<OrderSummary | null> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders where tenant_id = $1 and id = $2 for update`,
    [tenantId, orderId],
  );
  return rows[0] ? toOrder(rows[0]) : null;
}

/** Orders parked for a human, oldest first (index orders_status). */
export async function selectOrdersInStatus(
  db: Queryable,
  status: string,
  opts: { tenantId?: string; limit: number },
): Promise<OrderSummary[]> {
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders
      where status = $1 and ($2::text is null or tenant_id = $2)
      order by updated_at, tenant_id, id
      limit $3`,
    [status, opts.tenantId ?? null, opts.limit],
  );
  return rows.map(toOrder);
}

/** The orders of these workflows (unique index on workflow_id); missing rows are simply absent. */
export async function selectOrdersByWorkflowIds(
  db: Queryable,
  workflowIds: readonly string[],
): Promise<OrderSummary[]> {
  if (workflowIds.length === 0) return [];
  const { rows } = await db.query<OrderRow>(
    `select ${ORDER_COLUMNS} from orders where workflow_id = any($1::text[])`,
    [workflowIds],
  );
  return rows.map(toOrder);
}
