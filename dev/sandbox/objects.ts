/** API shapes: database rows -> the JSON objects the sandbox returns (Stripe-like, snake_case). */
import { createHash, randomBytes } from 'node:crypto';
import type { ChargeRow, MessageRow, RefundRow, WebhookEventRow } from './sql.ts';

export const unixSeconds = (d: Date): number => Math.floor(d.getTime() / 1000);

/** Stripe-looking ids: a type prefix plus 24 random base62-ish characters. */
export function newId(prefix: 'ch' | 'pi' | 'msg' | 'evt' | 're'): string {
  return `${prefix}_${randomBytes(18).toString('base64url').replace(/[-_]/g, 'x')}`;
}

export function chargeObject(c: ChargeRow) {
  return {
    id: c.id,
    object: 'charge' as const,
    amount: c.amount,
    currency: c.currency,
    status: c.status,
    failure_code: c.failure_code,
    payment_method: c.payment_method,
    description: c.description,
    receipt_email: c.receipt_email,
    metadata: c.metadata,
    idempotency_key: c.idempotency_key,
    created: unixSeconds(c.created_at),
  };
}

export function messageObject(m: MessageRow) {
  return {
    id: m.id,
    object: 'message' as const,
    status: 'sent' as const,
    to: m.to_address,
    subject: m.subject,
    text: m.body_text,
    metadata: m.metadata,
    idempotency_key: m.idempotency_key,
    created: unixSeconds(m.created_at),
  };
}

/** Audit rows: what really happened, with the order it belongs to pulled out of metadata. */
export function chargeAudit(c: ChargeRow) {
  return {
    ...chargeObject(c),
    order_id: c.metadata.order_id ?? null,
    tenant_id: c.metadata.tenant_id ?? null,
    created_at: c.created_at.toISOString(),
  };
}

export function messageAudit(m: MessageRow) {
  return {
    ...messageObject(m),
    order_id: m.metadata.order_id ?? null,
    tenant_id: m.metadata.tenant_id ?? null,
    created_at: m.created_at.toISOString(),
  };
}

/** The webhook event body exactly as delivered (the bytes that are signed). */
export function eventBody(e: Pick<WebhookEventRow, 'id' | 'type' | 'object' | 'created_at'>): string {
  return JSON.stringify({
    id: e.id,
    object: 'event',
    type: e.type,
    created: unixSeconds(e.created_at),
    data: { object: e.object },
  });
}

export function eventView(e: WebhookEventRow) {
  const obj = (e.object ?? {}) as { id?: string; metadata?: Record<string, string> };
  return {
    id: e.id,
    type: e.type,
    state: e.state,
    attempts: e.attempts,
    deliveries: e.deliveries,
    last_status: e.last_status,
    last_error: e.last_error,
    next_attempt_at: e.next_attempt_at.toISOString(),
    delivered_at: e.delivered_at?.toISOString() ?? null,
    created: unixSeconds(e.created_at),
    object_id: obj.id ?? null,
    order_id: obj.metadata?.order_id ?? null,
  };
}

/** Canonical JSON: object keys sorted at every level, no whitespace. */
function canonicalJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value) ?? 'null';
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const entries = Object.entries(value as Record<string, unknown>)
    .filter(([, v]) => v !== undefined)
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(',')}}`;
}

/** What "same parameters" means for an idempotent request: endpoint plus validated body. */
export function requestFingerprint(endpoint: string, body: unknown): string {
  return createHash('sha256').update(canonicalJson({ endpoint, body })).digest('hex');
}

export function refundObject(r: RefundRow) {
  return {
    id: r.id,
    object: 'refund' as const,
    charge: r.charge_id,
    amount: r.amount,
    currency: r.currency,
    status: r.status,
    reason: r.reason,
    metadata: r.metadata,
    idempotency_key: r.idempotency_key,
    created: unixSeconds(r.created_at),
  };
}

export function refundAudit(r: RefundRow) {
  return {
    ...refundObject(r),
    order_id: r.metadata.order_id ?? null,
    tenant_id: r.metadata.tenant_id ?? null,
    created_at: r.created_at.toISOString(),
  };
}
