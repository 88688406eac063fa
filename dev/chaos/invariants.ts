/**
 * The chaos harness's verdict: pure functions over facts gathered after a
 * fault, so the rules can be tested on crafted data without a stack.
 *
 * Terminology:
 * - submission: one logical order a harness client wanted to place, with its
 *   own Idempotency-Key; the client retries it with that key until a 202 (or
 *   it gives up). `orderIds` are the distinct order ids its 202s carried.
 * - facts: what the system says afterwards: order rows, outbox rows, which
 *   workflows Temporal knows, and the sandbox provider's OWN store of charges
 *   and messages (the ground truth of money moved and receipts sent).
 * - settled: an order is settled when it is terminal (completed, rejected) or
 *   parked in needs_attention with a reason an operator can act on. Anything
 *   else after the settle bound is stuck.
 * - refund submission: one refund a client wanted for a completed order, with
 *   its own Idempotency-Key, retried under it like an order. A refund is
 *   settled when it is succeeded, failed or needs_attention; the provider's
 *   own refunds (its audit, /_sandbox/refunds) are the ground truth of money
 *   given back.
 */

export type ViolationKind =
  | 'double_charge'
  | 'double_receipt'
  | 'duplicate_order'
  | 'lost_order'
  | 'not_accepted'
  | 'stuck_order'
  | 'unexpected_outcome'
  /** One refund's Idempotency-Key named two refunds, or one refund was made twice at the provider. */
  | 'double_refund'
  /** More given back (or held for refunds that are not failed) than the order was charged. */
  | 'over_refund'
  /** A refund a 202 named has no row, or is not terminal after the settle bound. */
  | 'stuck_refund'
  | 'process_exited'
  /** The harness could not bring a killed component back (e.g. a worker that never polled again). */
  | 'restart_failed'
  /** The facts could not be read (a component still down at check time). */
  | 'check_failed'
  /** A client's retry with its original Idempotency-Key did not get the original 202 back (restore drill). */
  | 'replay_mismatch'
  /** The restore drill's dump, restore or recovery command failed. */
  | 'recovery_failed'
  /** The fail-fast probe (probe.ts) got a 500. */
  | 'server_error'
  /** The fail-fast probe got an answer slower than the bound. */
  | 'slow_answer'
  /** The fail-fast probe got no answer before its client timeout (or a connection error). */
  | 'no_answer'
  /** A terminal order's event (order.<status>) never reached the merchant's receiver. */
  | 'missing_event'
  /** Two event IDs for one transition (order, type), or one event ID processed twice by the receiver. */
  | 'double_event'
  /** A delivery the receiver refused: a bad signature, or a body that is no order event. */
  | 'bad_delivery'
  /** A delivery row still pending after its event reached the receiver (its workflow will never settle it). */
  | 'stuck_delivery';

export interface Violation {
  kind: ViolationKind;
  /** Order id, idempotency key or process name. */
  subject: string;
  detail: string;
}

export interface Submission {
  clientKey: string;
  paymentMethod: string;
  /** Distinct order ids returned by 202 responses for this key (more than one is a duplicate order). */
  orderIds: string[];
  /** Set when the client stopped retrying without a 202. */
  gaveUp?: string;
}

export interface OrderFact {
  orderId: string;
  workflowId: string;
  status: string;
  lastError: string | null;
  /** What the order charged, and what its refunds that are not failed hold (orders.refunded_amount). */
  amount?: number;
  refundedAmount?: number;
  /** Seconds from the order's creation to its row's last update (for a settled order: how long it took). */
  ageAtLastUpdate?: number;
}

export interface MoneyEffect {
  idempotencyKey: string;
  orderId: string | null;
  /** Charges: succeeded | failed. Messages: sent. */
  status: string;
}

interface ProcessFact {
  name: string;
  /** True if the process is running now. */
  alive: boolean;
  /** Exits the harness did not cause (kill -9 by the harness is expected and not listed). */
  unexpectedExits: string[];
}

export interface RefundSubmission {
  clientKey: string;
  orderId: string;
  amount: number;
  /** Distinct refund ids returned by 202 responses for this key (more than one is a duplicate refund). */
  refundIds: string[];
  /** 422 refund-exceeds-charge: the refund did not fit (never a violation by itself). */
  refused?: boolean;
  /** Set when the client stopped retrying without a 202 or a 422. */
  gaveUp?: string;
}

export interface RefundFact {
  refundId: string;
  orderId: string;
  amount: number;
  status: string;
  lastError: string | null;
}

/** A refund the provider made (its audit): ground truth of money given back. */
export interface ProviderRefundEffect {
  idempotencyKey: string;
  orderId: string | null;
  /** The refund it was made for (the metadata the step sends). */
  refundId: string | null;
  amount: number;
  status: string;
}

export const REFUND_SETTLED: ReadonlySet<string> = new Set(['succeeded', 'failed', 'needs_attention']);

export interface Facts {
  /** Order rows by order id (only this scenario's orders need to be present). */
  orders: ReadonlyMap<string, OrderFact>;
  /** Workflow ids that have an outbox row. */
  outbox: ReadonlySet<string>;
  /** Workflow ids Temporal knows (any state). */
  workflows: ReadonlySet<string>;
  /** Every charge in the sandbox's store (all scenarios: a double charge is a double charge). */
  charges: readonly MoneyEffect[];
  /** Every message (receipt) in the sandbox's store. */
  messages: readonly MoneyEffect[];
  /** Order ids created in the database for this scenario's customers, whether or not a client saw a 202. */
  ordersForScenario: readonly string[];
  processes: readonly ProcessFact[];
  /** Refund rows by refund id (this scenario's refunds). */
  refunds?: ReadonlyMap<string, RefundFact>;
  /** Every refund in the provider's audit. */
  providerRefunds?: readonly ProviderRefundEffect[];
  /** The messages sent under this scenario's refund receipts' downstream keys (apart from `messages`). */
  refundReceipts?: readonly MoneyEffect[];
  /** What the merchant's receiver (merchant.ts) got: absent, the webhook invariants are not checked. */
  merchant?: MerchantFacts;
}

/** One delivery the merchant's receiver accepted (its signature verified). */
export interface MerchantDelivery {
  eventId: string;
  orderId: string;
  type: string;
  /** False: an ID the receiver had already processed (its dedupe absorbed a redelivery). */
  processed: boolean;
}

export interface MerchantFacts {
  /** Every delivery the receiver accepted, of any scenario (only this scenario's orders are judged). */
  deliveries: readonly MerchantDelivery[];
  /** Deliveries it refused since the last scenario. */
  rejected: readonly string[];
  /** This scenario's delivery rows still pending once every terminal event has arrived. */
  pending: readonly string[];
}

/** What the receiver saw of this scenario's orders: distinct events, and redeliveries its dedupe absorbed. */
export interface WebhookCounts {
  events: number;
  redeliveries: number;
  /** Terminal orders whose terminal event has not arrived. */
  missing: number;
}

/**
 * One client's retry, after a restore, of an order it had seen accepted: it
 * must get the original 202 again (same order, same body) marked as a replay.
 */
export interface ReplayCheck {
  clientKey: string;
  /** The client saw the original 202 after the dump started (its order was not in the backup). */
  afterBackup: boolean;
  original: { orderId: string; body: unknown };
  /** The retry's answer, or why the client never got one. */
  replay:
    { kind: 'answer'; status: number; body: unknown; replayed: boolean } | { kind: 'gave_up'; why: string };
}

/** Payment methods the sandbox declines; every other one the harness uses succeeds. */
const DECLINING_METHODS: ReadonlySet<string> = new Set([
  'pm_card_chargeDeclined',
  'pm_card_chargeDeclinedInsufficientFunds',
]);

export type Settlement = 'completed' | 'rejected' | 'attention' | 'stuck';

export function settlementOf(order: OrderFact | undefined): Settlement {
  if (!order) return 'stuck';
  if (order.status === 'completed') return 'completed';
  if (order.status === 'rejected') return 'rejected';
  if (order.status === 'needs_attention' && (order.lastError ?? '').trim() !== '') return 'attention';
  return 'stuck';
}

export interface Verdict {
  violations: Violation[];
  /** Set when the facts had the merchant's deliveries. */
  webhooks?: WebhookCounts;
  /** The slowest settled order, creation to settlement, in seconds (null when none settled). */
  slowestSeconds: number | null;
  counts: {
    submitted: number;
    accepted: number;
    completed: number;
    rejected: number;
    attention: number;
    stuck: number;
  };
}

function groupBy<T>(items: readonly T[], key: (t: T) => string | null): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    if (k === null) continue;
    const list = out.get(k);
    if (list) list.push(item);
    else out.set(k, [item]);
  }
  return out;
}

/**
 * Money invariants over the whole provider store: at most one charge per
 * downstream key, at most one succeeded charge per order, at most one receipt
 * per key and per order. `scope` limits the report to these order ids
 * (undefined: all), so each scenario reports the orders it placed.
 */
export function checkMoney(
  charges: readonly MoneyEffect[],
  messages: readonly MoneyEffect[],
  scope?: ReadonlySet<string>,
): Violation[] {
  const inScope = (orderId: string | null) => scope === undefined || (orderId !== null && scope.has(orderId));
  const violations: Violation[] = [];
  for (const [key, list] of groupBy(charges, (c) => c.idempotencyKey)) {
    if (list.length > 1 && list.some((c) => inScope(c.orderId))) {
      violations.push({
        kind: 'double_charge',
        subject: key,
        detail: `${list.length} charges under one idempotency key`,
      });
    }
  }
  const succeeded = charges.filter((c) => c.status === 'succeeded');
  for (const [orderId, list] of groupBy(succeeded, (c) => c.orderId)) {
    const keys = new Set(list.map((c) => c.idempotencyKey));
    // Several charges under one key are already reported above; this catches a second key for one order.
    if (keys.size > 1 && inScope(orderId)) {
      violations.push({
        kind: 'double_charge',
        subject: orderId,
        detail: `${list.length} succeeded charges under ${keys.size} keys`,
      });
    }
  }
  for (const [key, list] of groupBy(messages, (m) => m.idempotencyKey)) {
    if (list.length > 1 && list.some((m) => inScope(m.orderId))) {
      violations.push({
        kind: 'double_receipt',
        subject: key,
        detail: `${list.length} receipts under one idempotency key`,
      });
    }
  }
  for (const [orderId, list] of groupBy(messages, (m) => m.orderId)) {
    const keys = new Set(list.map((m) => m.idempotencyKey));
    if (keys.size > 1 && inScope(orderId)) {
      violations.push({
        kind: 'double_receipt',
        subject: orderId,
        detail: `${list.length} receipts under ${keys.size} keys`,
      });
    }
  }
  return violations;
}

/**
 * The refund invariants: each refund a 202 named exists and is settled; one
 * key, one refund; exactly one provider refund per succeeded refund and none
 * for a failed one (none twice in any case); and per order, never more given
 * back, or held by refunds that are not failed, than was charged.
 */
export function checkRefunds(
  submissions: readonly RefundSubmission[],
  facts: Pick<Facts, 'orders' | 'refunds' | 'providerRefunds' | 'refundReceipts'>,
): Violation[] {
  const violations: Violation[] = [];
  for (const [key, list] of groupBy(facts.refundReceipts ?? [], (m) => m.idempotencyKey)) {
    if (list.length > 1) {
      violations.push({
        kind: 'double_receipt',
        subject: key,
        detail: `${list.length} refund receipts under one idempotency key`,
      });
    }
  }
  const rows = facts.refunds ?? new Map<string, RefundFact>();
  const provider = facts.providerRefunds ?? [];
  const accepted = new Set<string>();
  for (const s of submissions) {
    if (s.refundIds.length > 1) {
      violations.push({
        kind: 'double_refund',
        subject: s.clientKey,
        detail: `one Idempotency-Key got ${s.refundIds.length} different refunds: ${s.refundIds.join(', ')}`,
      });
    }
    if (s.refundIds.length === 0 && !s.refused && s.gaveUp !== undefined) {
      violations.push({
        kind: 'not_accepted',
        subject: s.clientKey,
        detail: `refund of ${s.orderId}: the client never got a 202 or a 422: ${s.gaveUp}`,
      });
    }
    for (const id of s.refundIds) accepted.add(id);
  }
  const byKey = groupBy(provider, (p) => p.idempotencyKey);
  for (const [key, list] of byKey) {
    if (list.length > 1 && list.some((p) => p.refundId !== null && accepted.has(p.refundId))) {
      violations.push({
        kind: 'double_refund',
        subject: key,
        detail: `${list.length} provider refunds under one idempotency key`,
      });
    }
  }
  const byRefund = groupBy(
    provider.filter((p) => p.status === 'succeeded'),
    (p) => p.refundId,
  );
  for (const id of accepted) {
    const row = rows.get(id);
    if (!row) {
      violations.push({
        kind: 'stuck_refund',
        subject: id,
        detail: 'a 202 was returned but there is no refund row',
      });
      continue;
    }
    if (!REFUND_SETTLED.has(row.status)) {
      violations.push({
        kind: 'stuck_refund',
        subject: id,
        detail:
          `still ${row.status} after the settle bound` +
          (row.lastError ? ` (last error: ${row.lastError.slice(0, 120)})` : ''),
      });
    }
    const made = byRefund.get(id)?.length ?? 0;
    const keys = new Set((byRefund.get(id) ?? []).map((p) => p.idempotencyKey)).size;
    if (keys > 1) {
      violations.push({
        kind: 'double_refund',
        subject: id,
        detail: `${made} provider refunds under ${keys} keys`,
      });
    } else if (row.status === 'succeeded' && made !== 1) {
      violations.push({
        kind: 'unexpected_outcome',
        subject: id,
        detail: `refund succeeded with ${made} provider refunds (expected 1)`,
      });
    } else if (row.status === 'failed' && made !== 0) {
      violations.push({
        kind: 'unexpected_outcome',
        subject: id,
        detail: `refund failed although the provider refunded it (${made})`,
      });
    }
  }
  const orderIds = new Set(submissions.map((s) => s.orderId));
  for (const orderId of orderIds) {
    const order = facts.orders.get(orderId);
    if (order?.amount === undefined) continue;
    const given = provider
      .filter((p) => p.orderId === orderId && p.status === 'succeeded')
      .reduce((sum, p) => sum + p.amount, 0);
    const held = [...rows.values()]
      .filter((r) => r.orderId === orderId && r.status !== 'failed')
      .reduce((sum, r) => sum + r.amount, 0);
    const over: string[] = [];
    if (given > order.amount) over.push(`the provider refunded ${given}`);
    if (held > order.amount) over.push(`refunds not failed hold ${held}`);
    if ((order.refundedAmount ?? 0) > order.amount) over.push(`refunded_amount is ${order.refundedAmount}`);
    if (over.length) {
      violations.push({
        kind: 'over_refund',
        subject: orderId,
        detail: `${over.join(', ')} of a ${order.amount} charge`,
      });
    }
  }
  return violations;
}

/** Structural equality of two parsed JSON values (key order aside). */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  return (
    ka.length === kb.length &&
    ka.every(
      (k) =>
        Object.hasOwn(b, k) && sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
    )
  );
}

/**
 * A retry under the original key must replay the original response: 202, the
 * same order and body, with `Idempotent-Replayed: true`. Anything else (a new
 * order, a refusal, no answer) means the create record was not restored.
 */
export function checkReplays(replays: readonly ReplayCheck[]): Violation[] {
  const violations: Violation[] = [];
  for (const r of replays) {
    const when = r.afterBackup ? 'accepted after the backup' : 'accepted before the backup';
    const fault = (detail: string) =>
      violations.push({ kind: 'replay_mismatch', subject: r.clientKey, detail: `${detail} (${when})` });
    if (r.replay.kind === 'gave_up') {
      fault(`the retry of ${r.original.orderId} got no answer: ${r.replay.why}`);
      continue;
    }
    const { status, body, replayed } = r.replay;
    const id = typeof body === 'object' && body !== null ? (body as { id?: unknown }).id : undefined;
    if (status !== 202) fault(`the retry of ${r.original.orderId} got HTTP ${status}`);
    else if (id !== r.original.orderId)
      fault(`the retry got order ${String(id)}, not the original ${r.original.orderId}`);
    else if (!replayed) fault(`the retry of ${r.original.orderId} was not marked Idempotent-Replayed`);
    else if (!sameJson(body, r.original.body))
      fault(`the retry of ${r.original.orderId} got a different 202 body`);
  }
  return violations;
}

/** The event a settled order's last transition must have sent (null: not settled, none yet). */
function terminalEventOf(order: OrderFact | undefined): string | null {
  return settlementOf(order) === 'stuck' ? null : `order.${order!.status}`;
}

/** Settled orders among `orderIds` whose terminal event the receiver has not processed. */
export function missingEvents(
  orderIds: Iterable<string>,
  orders: ReadonlyMap<string, OrderFact>,
  deliveries: readonly MerchantDelivery[],
): string[] {
  const got = new Set(deliveries.map((d) => `${d.orderId} ${d.type}`));
  const missing: string[] = [];
  for (const id of orderIds) {
    const type = terminalEventOf(orders.get(id));
    if (type !== null && !got.has(`${id} ${type}`)) missing.push(id);
  }
  return missing;
}

/**
 * The merchant webhook invariants over this scenario's orders (`scope`): every settled order's
 * terminal event (order.<status>) reached the receiver at least once; each event ID was processed
 * exactly once (redeliveries of it are fine: at least once, absorbed by the receiver's dedupe); one
 * transition never got two event IDs (a double event, which no dedupe on the ID absorbs); and the
 * receiver refused no delivery (a bad signature).
 */
export function checkMerchantEvents(
  scope: ReadonlySet<string>,
  orders: ReadonlyMap<string, OrderFact>,
  merchant: MerchantFacts,
): { violations: Violation[]; counts: WebhookCounts } {
  const violations: Violation[] = [];
  const mine = merchant.deliveries.filter((d) => scope.has(d.orderId));
  const missing = missingEvents(scope, orders, mine);
  for (const id of missing) {
    violations.push({
      kind: 'missing_event',
      subject: id,
      detail: `${terminalEventOf(orders.get(id))} never reached the merchant (${mine.filter((d) => d.orderId === id).length} deliveries of its other events)`,
    });
  }
  for (const [key, list] of groupBy(mine, (d) => `${d.orderId} ${d.type}`)) {
    const ids = new Set(list.map((d) => d.eventId));
    if (ids.size > 1) {
      violations.push({
        kind: 'double_event',
        subject: key,
        detail: `${ids.size} event IDs for one transition: ${[...ids].join(', ')}`,
      });
    }
  }
  const byEvent = groupBy(mine, (d) => d.eventId);
  for (const [eventId, list] of byEvent) {
    const processed = list.filter((d) => d.processed).length;
    if (processed !== 1) {
      violations.push({
        kind: 'double_event',
        subject: eventId,
        detail: `processed ${processed} times by the receiver (${list.length} deliveries)`,
      });
    }
  }
  for (const r of merchant.rejected) {
    violations.push({ kind: 'bad_delivery', subject: 'merchant', detail: r });
  }
  for (const d of merchant.pending) {
    violations.push({
      kind: 'stuck_delivery',
      subject: d,
      detail: 'still pending after the merchant got its events',
    });
  }
  return {
    violations,
    counts: { events: byEvent.size, redeliveries: mine.length - byEvent.size, missing: missing.length },
  };
}

/** The full verdict for one scenario's submissions (and its refunds, if it made any). */
export function checkScenario(
  submissions: readonly Submission[],
  facts: Facts,
  refundSubmissions: readonly RefundSubmission[] = [],
  replays: readonly ReplayCheck[] = [],
): Verdict {
  const violations: Violation[] = [];
  const counts = {
    submitted: submissions.length,
    accepted: 0,
    completed: 0,
    rejected: 0,
    attention: 0,
    stuck: 0,
  };
  const accepted = new Map<string, Submission>();

  for (const s of submissions) {
    if (s.orderIds.length === 0) {
      violations.push({
        kind: 'not_accepted',
        subject: s.clientKey,
        detail: `the client never got a 202: ${s.gaveUp ?? 'no answer'}`,
      });
      continue;
    }
    if (s.orderIds.length > 1) {
      violations.push({
        kind: 'duplicate_order',
        subject: s.clientKey,
        detail: `one Idempotency-Key got ${s.orderIds.length} different orders: ${s.orderIds.join(', ')}`,
      });
    }
    for (const id of s.orderIds) accepted.set(id, s);
  }
  counts.accepted = accepted.size;

  // An order committed for this scenario that no 202 ever named is a second order for one intent.
  const acceptedCount = submissions.filter((s) => s.orderIds.length > 0).length;
  if (facts.ordersForScenario.length > submissions.length) {
    const unseen = facts.ordersForScenario.filter((id) => !accepted.has(id));
    violations.push({
      kind: 'duplicate_order',
      subject: unseen.slice(0, 3).join(', '),
      detail: `${facts.ordersForScenario.length} orders in the database for ${submissions.length} client intents (${acceptedCount} accepted)`,
    });
  }

  const scope = new Set(accepted.keys());
  let slowestSeconds: number | null = null;
  const moneyByOrder = groupBy(facts.charges, (c) => c.orderId);
  const receiptsByOrder = groupBy(facts.messages, (m) => m.orderId);

  for (const [orderId, submission] of accepted) {
    const order = facts.orders.get(orderId);
    if (!order) {
      violations.push({
        kind: 'lost_order',
        subject: orderId,
        detail: 'a 202 was returned but there is no order row',
      });
      counts.stuck++;
      continue;
    }
    const missing: string[] = [];
    if (!facts.outbox.has(order.workflowId)) missing.push('outbox row');
    if (!facts.workflows.has(order.workflowId)) missing.push('workflow');
    if (missing.length) {
      violations.push({
        kind: 'lost_order',
        subject: orderId,
        detail: `no ${missing.join(' and no ')} (status ${order.status})`,
      });
    }

    const settlement = settlementOf(order);
    counts[settlement]++;
    if (settlement !== 'stuck' && order.ageAtLastUpdate !== undefined) {
      slowestSeconds = Math.max(slowestSeconds ?? 0, order.ageAtLastUpdate);
    }
    const charges = moneyByOrder.get(orderId) ?? [];
    const succeededCharges = charges.filter((c) => c.status === 'succeeded');
    const receipts = receiptsByOrder.get(orderId) ?? [];
    const declines = DECLINING_METHODS.has(submission.paymentMethod);
    if (settlement === 'stuck') {
      violations.push({
        kind: 'stuck_order',
        subject: orderId,
        detail:
          order.status === 'needs_attention'
            ? 'needs_attention without a reason'
            : `still ${order.status} after the settle bound, not listed in needs_attention` +
              (order.lastError ? ` (last error: ${order.lastError.slice(0, 120)})` : ''),
      });
    } else if (settlement === 'completed') {
      if (succeededCharges.length !== 1 || receipts.length !== 1) {
        violations.push({
          kind: 'unexpected_outcome',
          subject: orderId,
          detail: `completed with ${succeededCharges.length} succeeded charges and ${receipts.length} receipts (expected 1 and 1)`,
        });
      } else if (declines) {
        violations.push({
          kind: 'unexpected_outcome',
          subject: orderId,
          detail: `completed although ${submission.paymentMethod} declines`,
        });
      }
    } else if (settlement === 'rejected') {
      if (succeededCharges.length > 0) {
        violations.push({
          kind: 'unexpected_outcome',
          subject: orderId,
          detail: 'rejected although the customer was charged',
        });
      } else if (!declines) {
        violations.push({
          kind: 'unexpected_outcome',
          subject: orderId,
          detail: `rejected although ${submission.paymentMethod} succeeds (last error: ${order.lastError ?? 'none'})`,
        });
      }
    }
  }

  violations.push(...checkMoney(facts.charges, facts.messages, scope));
  // One intent, one charge: a second order for one key (reported above as a duplicate) that
  // was charged too moved money twice, though each order alone was charged once.
  for (const s of submissions) {
    if (s.orderIds.length < 2) continue;
    const charged = s.orderIds.filter((id) =>
      (moneyByOrder.get(id) ?? []).some((c) => c.status === 'succeeded'),
    );
    if (charged.length > 1) {
      violations.push({
        kind: 'double_charge',
        subject: s.clientKey,
        detail: `one Idempotency-Key's orders were each charged: ${charged.join(', ')}`,
      });
    }
  }
  violations.push(...checkRefunds(refundSubmissions, facts));
  violations.push(...checkReplays(replays));
  let webhooks: WebhookCounts | undefined;
  if (facts.merchant) {
    const merchant = checkMerchantEvents(scope, facts.orders, facts.merchant);
    violations.push(...merchant.violations);
    webhooks = merchant.counts;
  }

  for (const p of facts.processes) {
    for (const exit of p.unexpectedExits) {
      violations.push({ kind: 'process_exited', subject: p.name, detail: `exited on its own: ${exit}` });
    }
  }
  return { violations, counts, slowestSeconds, ...(webhooks ? { webhooks } : {}) };
}
