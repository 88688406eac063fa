/** SQL for the orders table. One function per statement, client first. */
import type { Queryable } from '../db/index.ts';
import { TRANSITIONS, type OrderStatus } from './model.ts';

/** Statuses from which `to` may be entered. */
function sourcesOf(to: OrderStatus): OrderStatus[] {
  return (Object.keys(TRANSITIONS) as OrderStatus[]).filter((from) => TRANSITIONS[from].includes(to));
}

export type TransitionOutcome =
  | { kind: 'applied'; status: OrderStatus }
  /** Already there (a duplicate) or past it (a late call): nothing changed. */
  | { kind: 'unchanged'; status: OrderStatus }
  | { kind: 'not_found' };

/**
 * Moves an order forward. The WHERE clause is the state machine: the row is
 * updated only if its current status may lead to `to`, so a late or duplicate
 * call can never move an order backwards, even under concurrency (the row lock
 * taken by UPDATE serialises competing transitions).
 */
export async function applyOrderTransition(
  db: Queryable,
  t: {
    tenantId: string;
    orderId: string;
    to: OrderStatus;
    chargeId: string | null;
    receiptId: string | null;
    lastError: string | null;
    /** Machine-readable code (ORDER_REASONS); stored for rejected and needs_attention, cleared otherwise. */
    reason?: string | null;
  },
): Promise<TransitionOutcome> {
  const updated = await db.query<{ status: OrderStatus }>(
    `update orders
        set status = $3,
            status_seq = status_seq + 1,
            charge_id = coalesce($4, charge_id),
            receipt_id = coalesce($5, receipt_id),
            last_error = case when $3 in ('needs_attention', 'rejected') then coalesce($6, last_error)
                              else last_error end,
            -- An order that left needs_attention (re-driven) no longer has a reason to show.
            reason = case when $3 in ('needs_attention', 'rejected') then $8 else null end,
            updated_at = now()
      where tenant_id = $1 and id = $2 and status = any($7::text[])
      returning status`,
    [t.tenantId, t.orderId, t.to, t.chargeId, t.receiptId, t.lastError, sourcesOf(t.to), t.reason ?? null],
  );
  if (updated.rows[0]) return { kind: 'applied', status: updated.rows[0].status };
  const current = await db.query<{ status: OrderStatus }>(
    `select status from orders where tenant_id = $1 and id = $2`,
    [t.tenantId, t.orderId],
  );
  const row = current.rows[0];
  return row ? { kind: 'unchanged', status: row.status } : { kind: 'not_found' };
}
