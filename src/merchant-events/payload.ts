/**
 * What a delivery sends: `{id, type, createdAt, data: {object, version}}`, where the object is the
 * order or refund as GET returns it, rendered from the row as its transition left it.
 */
import type { Ledger } from 'onceflow';
import type { Queryable } from '../db/index.ts';
import { orderFromSnapshot } from '../orders/sql.ts';
import { orderDetail } from '../orders/view.ts';
import { refundFromSnapshot } from '../refunds/sql.ts';
import { refundView } from '../refunds/view.ts';
import type { EventRow } from './sql.ts';

export async function eventBody(db: Queryable, ledger: Ledger, event: EventRow): Promise<string> {
  const object = event.type.startsWith('order.')
    ? await orderDetail(ledger, event.tenant_id, await orderFromSnapshot(db, event.object))
    : refundView(await refundFromSnapshot(db, event.object));
  return JSON.stringify({
    id: event.id,
    type: event.type,
    createdAt: event.created_at.toISOString(),
    // The object's status_seq: a receiver drops an event older than one it has applied.
    data: { object, version: event.version },
  });
}
