/**
 * Refund events on POST /v1/webhooks/payments. The outcome is the refund object's status; a
 * non-final one, or a type that contradicts its object, is ignored. Metadata only FINDS our refund;
 * the event is applied only if it also NAMES it (downstream key or recorded refund ID, with the
 * amount and currency), else it is `ignored_mismatch`.
 */
import { downstreamKey, type OperationRecord } from 'onceflow';
import { KEY_METADATA } from '../../providers/stripe.ts';
import { refundStepKeys, type RefundStatus } from '../../refunds/contract.ts';
import type { RefundRow } from '../../refunds/sql.ts';
import { refundScope } from '../../steps/refund.ts';

/** The consumer that turns refund events into refund-workflow signals (its own markers in webhook_events). */
export const REFUND_SIGNAL_CONSUMER = 'refund-workflow-signal';

/** Event types about a refund, and the outcome the type itself claims (if any). */
const REFUND_EVENT_TYPES: ReadonlyMap<string, 'succeeded' | 'failed' | null> = new Map([
  ['refund.succeeded', 'succeeded'],
  ['refund.failed', 'failed'],
  ['refund.created', null],
  ['refund.updated', null],
  ['charge.refund.updated', null],
]);

export function isRefundEventType(type: string): boolean {
  return REFUND_EVENT_TYPES.has(type);
}

export interface RefundEventFacts {
  id: string;
  status: string | undefined;
  idempotencyKey: string | undefined;
  amount: number | undefined;
  currency: string | undefined;
  failureReason: string | undefined;
  tenantId: string | undefined;
  orderId: string | undefined;
  refundId: string | undefined;
}

/** What a refund event's object says, from a verified body (the shapes of both providers). */
export function refundFacts(
  obj: Record<string, unknown>,
  str: (v: unknown, max?: number) => string | undefined,
): RefundEventFacts {
  const metadata = (obj.metadata ?? {}) as Record<string, unknown>;
  return {
    id: str(obj.id) ?? '',
    status: str(obj.status),
    idempotencyKey: str(obj.idempotency_key) ?? str(metadata[KEY_METADATA]),
    amount: typeof obj.amount === 'number' && Number.isSafeInteger(obj.amount) ? obj.amount : undefined,
    currency: str(obj.currency, 3)?.toLowerCase(),
    failureReason: str(obj.failure_reason),
    tenantId: str(metadata.tenant_id, 100),
    orderId: str(metadata.order_id, 100),
    refundId: str(metadata.refund_id, 100),
  };
}

/** The final outcome an event reports, or null (not final, or its type and object disagree). */
export function refundEventOutcome(type: string, status: string | undefined): 'succeeded' | 'failed' | null {
  const said =
    status === 'succeeded' ? 'succeeded' : status === 'failed' || status === 'canceled' ? 'failed' : null;
  const claimed = REFUND_EVENT_TYPES.get(type);
  if (claimed && claimed !== said) return null;
  return said;
}

/**
 * Whether a verified event names this refund's provider refund; the ledger is read only when key and row
 * don't settle it.
 */
export async function eventNamesRefund(
  facts: RefundEventFacts,
  refund: Pick<RefundRow, 'tenant_id' | 'workflow_id' | 'amount' | 'currency' | 'provider_refund_id'>,
  readRecord: (scope: ReturnType<typeof refundScope>) => Promise<OperationRecord | null>,
): Promise<boolean> {
  if (facts.amount === undefined || facts.amount !== Number(refund.amount)) return false;
  if (facts.currency === undefined || facts.currency !== refund.currency) return false;
  const scope = refundStepScope(refund);
  if (facts.idempotencyKey !== undefined && facts.idempotencyKey === downstreamKey(scope)) return true;
  if (refund.provider_refund_id !== null && refund.provider_refund_id === facts.id) return true;
  const record = await readRecord(scope);
  if (!record) return false;
  const recorded = (record.result ?? {}) as { refundId?: unknown };
  return record.providerRef === facts.id || recorded.refundId === facts.id;
}

export function refundStepScope(refund: Pick<RefundRow, 'tenant_id' | 'workflow_id'>) {
  return refundScope({ tenantId: refund.tenant_id, key: refundStepKeys.refund(refund.workflow_id) });
}

/** Statuses an event can't change once the step's record is final; the others wait for an event. */
export const SETTLED_REFUND_STATUSES: readonly RefundStatus[] = ['pending', 'succeeded', 'failed'];
