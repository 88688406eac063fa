/**
 * The chaos harness's judge, on crafted facts: a harness whose checker can't
 * fail proves nothing, so each rule is shown flagging its violation, and a
 * healthy run is shown passing.
 */
import { describe, expect, it } from 'vitest';
import {
  checkMerchantEvents,
  checkMoney,
  checkRefunds,
  checkReplays,
  checkScenario,
  type Facts,
  type MerchantDelivery,
  type MoneyEffect,
  type OrderFact,
  type ProviderRefundEffect,
  type RefundFact,
  type RefundSubmission,
  type ReplayCheck,
  type Submission,
} from '../../dev/chaos/invariants.ts';
import { parseChaosArgs, SCENARIOS, UsageError } from '../../dev/chaos/options.ts';

const wf = (id: string) => `order/acme/${id}`;

function order(id: string, status: string, lastError: string | null = null): OrderFact {
  return { orderId: id, workflowId: wf(id), status, lastError };
}

function charge(id: string, status = 'succeeded', key = `${wf(id)}/charge`): MoneyEffect {
  return { idempotencyKey: key, orderId: id, status };
}

function receipt(id: string, key = `${wf(id)}/receipt`): MoneyEffect {
  return { idempotencyKey: key, orderId: id, status: 'sent' };
}

/** A healthy world: o1 completed (charged once, one receipt), o2 declined and rejected. */
function healthy(): { submissions: Submission[]; facts: Facts & { orders: Map<string, OrderFact> } } {
  const submissions: Submission[] = [
    { clientKey: 'k1', paymentMethod: 'pm_card_visa', orderIds: ['o1'] },
    { clientKey: 'k2', paymentMethod: 'pm_card_chargeDeclined', orderIds: ['o2'] },
  ];
  const orders = new Map([
    ['o1', order('o1', 'completed')],
    ['o2', order('o2', 'rejected', 'card_declined')],
  ]);
  return {
    submissions,
    facts: {
      orders,
      outbox: new Set([wf('o1'), wf('o2')]),
      workflows: new Set([wf('o1'), wf('o2')]),
      charges: [charge('o1'), charge('o2', 'failed')],
      messages: [receipt('o1')],
      ordersForScenario: ['o1', 'o2'],
      processes: [{ name: 'api', alive: true, unexpectedExits: [] }],
    },
  };
}

const kinds = (v: { violations: { kind: string }[] }) => v.violations.map((x) => x.kind);

describe('chaos invariant checker', () => {
  it('passes a healthy scenario and counts its outcomes', () => {
    const { submissions, facts } = healthy();
    const verdict = checkScenario(submissions, facts);
    expect(verdict.violations).toEqual([]);
    expect(verdict.counts).toMatchObject({ accepted: 2, completed: 1, rejected: 1, attention: 0, stuck: 0 });
    expect(verdict.slowestSeconds).toBeNull();

    facts.orders.set('o1', { ...order('o1', 'completed'), ageAtLastUpdate: 7 });
    facts.orders.set('o2', { ...order('o2', 'rejected', 'card_declined'), ageAtLastUpdate: 3 });
    expect(checkScenario(submissions, facts).slowestSeconds).toBe(7);
  });

  it('flags a double charge: two charges under one key, or two keys charged for one order', () => {
    const sameKey = healthy();
    sameKey.facts = { ...sameKey.facts, charges: [charge('o1'), charge('o1'), charge('o2', 'failed')] };
    expect(kinds(checkScenario(sameKey.submissions, sameKey.facts))).toContain('double_charge');

    const twoKeys = healthy();
    twoKeys.facts = {
      ...twoKeys.facts,
      charges: [charge('o1'), charge('o1', 'succeeded', 'some-other-key'), charge('o2', 'failed')],
    };
    const verdict = checkScenario(twoKeys.submissions, twoKeys.facts);
    expect(verdict.violations.filter((v) => v.kind === 'double_charge').map((v) => v.subject)).toEqual([
      'o1',
    ]);
  });

  it('flags a double receipt', () => {
    const { submissions, facts } = healthy();
    const verdict = checkScenario(submissions, { ...facts, messages: [receipt('o1'), receipt('o1')] });
    expect(kinds(verdict)).toContain('double_receipt');
  });

  it('flags a lost order: a 202 without its order row, outbox row or workflow', () => {
    const noRow = healthy();
    noRow.facts.orders = new Map([['o2', order('o2', 'rejected', 'card_declined')]]);
    expect(checkScenario(noRow.submissions, noRow.facts).violations).toContainEqual(
      expect.objectContaining({ kind: 'lost_order', subject: 'o1' }),
    );

    const noWorkflow = healthy();
    noWorkflow.facts = { ...noWorkflow.facts, workflows: new Set([wf('o2')]), outbox: new Set([wf('o2')]) };
    const lost = checkScenario(noWorkflow.submissions, noWorkflow.facts).violations.filter(
      (v) => v.kind === 'lost_order',
    );
    expect(lost).toHaveLength(1);
    expect(lost[0]!.detail).toContain('no outbox row and no workflow');
  });

  it('flags a stuck order, and a parked one without a reason, but accepts needs_attention with a reason', () => {
    const stuck = healthy();
    stuck.facts.orders = new Map([
      ['o1', order('o1', 'payment_unknown')],
      ['o2', order('o2', 'rejected', 'card_declined')],
    ]);
    stuck.facts = { ...stuck.facts, messages: [] };
    const verdict = checkScenario(stuck.submissions, stuck.facts);
    expect(verdict.violations).toContainEqual(
      expect.objectContaining({ kind: 'stuck_order', subject: 'o1' }),
    );
    expect(verdict.counts.stuck).toBe(1);

    const silentPark = healthy();
    silentPark.facts.orders.set('o1', order('o1', 'needs_attention', null));
    expect(kinds(checkScenario(silentPark.submissions, silentPark.facts))).toContain('stuck_order');

    const visible = healthy();
    visible.facts.orders.set('o1', order('o1', 'needs_attention', 'receipt: provider unavailable'));
    visible.facts = { ...visible.facts, messages: [] };
    const ok = checkScenario(visible.submissions, visible.facts);
    expect(ok.violations).toEqual([]);
    expect(ok.counts.attention).toBe(1);
  });

  it('flags a duplicate order, an intent never accepted, and a process that exited on its own', () => {
    const { submissions, facts } = healthy();
    submissions[0] = { ...submissions[0]!, orderIds: ['o1', 'o3'] };
    submissions.push({ clientKey: 'k4', paymentMethod: 'pm_card_visa', orderIds: [], gaveUp: 'gave up' });
    const verdict = checkScenario(submissions, {
      ...facts,
      processes: [
        { name: 'worker-1', alive: true, unexpectedExits: ["exit code 1 (log: Unhandled 'error' event)"] },
      ],
    });
    expect(kinds(verdict)).toEqual(
      expect.arrayContaining(['duplicate_order', 'not_accepted', 'process_exited', 'lost_order']),
    );
  });

  it('flags a completed order without exactly one charge and receipt, and a charged order that was rejected', () => {
    const uncharged = healthy();
    uncharged.facts = { ...uncharged.facts, charges: [charge('o2', 'failed')] };
    expect(kinds(checkScenario(uncharged.submissions, uncharged.facts))).toContain('unexpected_outcome');

    const chargedButRejected = healthy();
    chargedButRejected.facts.orders.set('o1', order('o1', 'rejected', 'timeout'));
    chargedButRejected.facts = { ...chargedButRejected.facts, messages: [] };
    expect(checkScenario(chargedButRejected.submissions, chargedButRejected.facts).violations).toContainEqual(
      expect.objectContaining({ kind: 'unexpected_outcome', subject: 'o1' }),
    );
  });

  it('reports money violations only for the orders in scope', () => {
    const charges = [charge('a'), charge('a'), charge('b')];
    expect(checkMoney(charges, [], new Set(['b']))).toEqual([]);
    expect(checkMoney(charges, [], new Set(['a']))).toHaveLength(1);
  });
});

/** o1 (charged 3000) with two refunds of 1000: r1 succeeded (made once), r2 failed (never made). */
function refunded() {
  const { submissions, facts } = healthy();
  facts.orders.set('o1', { ...order('o1', 'completed'), amount: 3000, refundedAmount: 1000 });
  const refundSubmissions: RefundSubmission[] = [
    { clientKey: 'rk1', orderId: 'o1', amount: 1000, refundIds: ['r1'] },
    { clientKey: 'rk2', orderId: 'o1', amount: 1000, refundIds: ['r2'] },
  ];
  const refundRow = (id: string, status: string): RefundFact => ({
    refundId: id,
    orderId: 'o1',
    amount: 1000,
    status,
    lastError: status === 'failed' ? 'declined' : null,
  });
  const made = (id: string, key = `refund/acme/${id}/refund`): ProviderRefundEffect => ({
    idempotencyKey: key,
    orderId: 'o1',
    refundId: id,
    amount: 1000,
    status: 'succeeded',
  });
  const refunds = new Map([
    ['r1', refundRow('r1', 'succeeded')],
    ['r2', refundRow('r2', 'failed')],
  ]);
  return {
    submissions,
    refundSubmissions,
    refundRow,
    made,
    facts: {
      ...facts,
      refunds,
      providerRefunds: [made('r1')],
      refundReceipts: [receipt('o1', 'refund/acme/r1/receipt')],
    },
  };
}

describe('chaos refund invariants', () => {
  it('passes healthy refunds: one provider refund for the succeeded one, none for the failed one', () => {
    const w = refunded();
    expect(checkScenario(w.submissions, w.facts, w.refundSubmissions).violations).toEqual([]);
    // A refund the charge could not hold was refused with 422: not a violation.
    const refusedToo = [
      ...w.refundSubmissions,
      { clientKey: 'rk3', orderId: 'o1', amount: 9000, refundIds: [], refused: true },
    ];
    expect(checkRefunds(refusedToo, w.facts)).toEqual([]);
  });

  it('flags a refund made twice: under one key, under two keys, or one Idempotency-Key naming two refunds', () => {
    const sameKey = refunded();
    sameKey.facts.providerRefunds = [sameKey.made('r1'), sameKey.made('r1')];
    expect(kinds({ violations: checkRefunds(sameKey.refundSubmissions, sameKey.facts) })).toContain(
      'double_refund',
    );

    const twoKeys = refunded();
    twoKeys.facts.providerRefunds = [twoKeys.made('r1'), twoKeys.made('r1', 'another-key')];
    expect(checkRefunds(twoKeys.refundSubmissions, twoKeys.facts)).toContainEqual(
      expect.objectContaining({ kind: 'double_refund', subject: 'r1' }),
    );

    const twoRefunds = refunded();
    twoRefunds.refundSubmissions[0] = { ...twoRefunds.refundSubmissions[0]!, refundIds: ['r1', 'r3'] };
    expect(checkRefunds(twoRefunds.refundSubmissions, twoRefunds.facts)).toContainEqual(
      expect.objectContaining({ kind: 'double_refund', subject: 'rk1' }),
    );
  });

  it('flags a succeeded refund the provider never made, and a failed one it did make', () => {
    const missing = refunded();
    missing.facts.providerRefunds = [];
    expect(checkRefunds(missing.refundSubmissions, missing.facts)).toContainEqual(
      expect.objectContaining({ kind: 'unexpected_outcome', subject: 'r1' }),
    );
    const madeAnyway = refunded();
    madeAnyway.facts.providerRefunds = [madeAnyway.made('r1'), madeAnyway.made('r2')];
    expect(checkRefunds(madeAnyway.refundSubmissions, madeAnyway.facts)).toContainEqual(
      expect.objectContaining({ kind: 'unexpected_outcome', subject: 'r2' }),
    );
  });

  it('flags more refunded than charged: at the provider, held by refunds not failed, or in refunded_amount', () => {
    const atProvider = refunded();
    atProvider.facts.providerRefunds = [{ ...atProvider.made('r1'), amount: 3001 }];
    expect(checkRefunds(atProvider.refundSubmissions, atProvider.facts)).toContainEqual(
      expect.objectContaining({ kind: 'over_refund', subject: 'o1' }),
    );

    const held = refunded();
    held.facts.refunds.set('r2', { ...held.refundRow('r2', 'needs_attention'), amount: 2500 });
    expect(kinds({ violations: checkRefunds(held.refundSubmissions, held.facts) })).toEqual(['over_refund']);

    const column = refunded();
    column.facts.orders.set('o1', { ...order('o1', 'completed'), amount: 3000, refundedAmount: 3500 });
    expect(checkRefunds(column.refundSubmissions, column.facts)).toContainEqual(
      expect.objectContaining({ kind: 'over_refund', detail: expect.stringContaining('refunded_amount') }),
    );
  });

  it('flags a refund without its row, one not settled, one never accepted, and a refund receipt sent twice', () => {
    const w = refunded();
    w.facts.refunds.delete('r2');
    w.facts.refunds.set('r1', w.refundRow('r1', 'refund_unknown'));
    w.facts.providerRefunds = [];
    w.facts.refundReceipts = [receipt('o1', 'k'), receipt('o1', 'k')];
    const subs = [
      ...w.refundSubmissions,
      { clientKey: 'rk4', orderId: 'o1', amount: 1, refundIds: [], gaveUp: 'HTTP 400' },
    ];
    const found = checkRefunds(subs, w.facts);
    expect(found).toContainEqual(expect.objectContaining({ kind: 'stuck_refund', subject: 'r1' }));
    expect(found).toContainEqual(expect.objectContaining({ kind: 'stuck_refund', subject: 'r2' }));
    expect(found).toContainEqual(expect.objectContaining({ kind: 'not_accepted', subject: 'rk4' }));
    expect(found).toContainEqual(expect.objectContaining({ kind: 'double_receipt', subject: 'k' }));
  });
});

describe('restore drill verdict', () => {
  const body = { id: 'o1', status: 'pending', amount: 1000 };
  const replay = (r: Partial<ReplayCheck['replay']> & { kind?: 'answer' }): ReplayCheck => ({
    clientKey: 'k1',
    afterBackup: true,
    original: { orderId: 'o1', body },
    replay: { kind: 'answer', status: 202, body: { ...body }, replayed: true, ...r },
  });

  it('passes a retry that replays the original 202, and flags every other answer', () => {
    expect(checkReplays([replay({})])).toEqual([]);
    // Key order in the body does not matter; content does.
    expect(checkReplays([replay({ body: { amount: 1000, status: 'pending', id: 'o1' } })])).toEqual([]);
    const wrong = [
      replay({ body: { ...body, id: 'o9' } }),
      replay({ replayed: false }),
      replay({ body: { ...body, status: 'completed' } }),
      replay({ status: 422, body: { type: 'idempotency-key-reused' } }),
      { ...replay({}), replay: { kind: 'gave_up' as const, why: 'gave up after 12 attempts' } },
    ];
    const found = checkReplays(wrong);
    expect(found.map((v) => v.kind)).toEqual(Array(wrong.length).fill('replay_mismatch'));
    expect(found[0]!.detail).toContain('not the original o1');
    expect(found[0]!.detail).toContain('after the backup');
  });

  it('flags one intent charged twice through two orders, though each order was charged once', () => {
    const w = healthy();
    // The client's retry after a restore without recovery got a new order, which charged again.
    w.submissions[0] = { ...w.submissions[0]!, orderIds: ['o1', 'o3'] };
    w.facts.orders.set('o3', order('o3', 'completed'));
    w.facts = {
      ...w.facts,
      outbox: new Set([...w.facts.outbox, wf('o3')]),
      workflows: new Set([...w.facts.workflows, wf('o3')]),
      charges: [...w.facts.charges, charge('o3')],
      messages: [...w.facts.messages, receipt('o3')],
      ordersForScenario: ['o1', 'o2', 'o3'],
    };
    const verdict = checkScenario(w.submissions, w.facts, [], [replay({ body: { ...body, id: 'o3' } })]);
    expect(verdict.violations).toContainEqual(
      expect.objectContaining({ kind: 'double_charge', subject: 'k1' }),
    );
    expect(kinds(verdict)).toContain('duplicate_order');
    expect(kinds(verdict)).toContain('replay_mismatch');

    // The same two orders with only one of them charged is a duplicate order, not a double charge.
    w.facts = { ...w.facts, charges: [charge('o1'), charge('o2', 'failed'), charge('o3', 'failed')] };
    expect(kinds(checkScenario(w.submissions, w.facts))).not.toContain('double_charge');
  });
});

describe('merchant webhook invariants', () => {
  const delivery = (orderId: string, type: string, eventId: string, processed = true): MerchantDelivery => ({
    eventId,
    orderId,
    type,
    processed,
  });
  /** o1 completed and o2 rejected, each event delivered; o1's event once more (absorbed by the dedupe). */
  const delivered = (): MerchantDelivery[] => [
    delivery('o1', 'order.completed', 'evt_1'),
    delivery('o2', 'order.rejected', 'evt_2'),
    delivery('o1', 'order.completed', 'evt_1', false),
  ];

  it('passes every terminal event delivered, and counts the redeliveries its dedupe absorbed', () => {
    const { submissions, facts } = healthy();
    const verdict = checkScenario(submissions, {
      ...facts,
      merchant: { deliveries: delivered(), rejected: [], pending: [] },
    });
    expect(verdict.violations).toEqual([]);
    expect(verdict.webhooks).toEqual({ events: 2, redeliveries: 1, missing: 0 });
    // Without the receiver's facts the rule is not applied (and nothing is counted).
    expect(checkScenario(submissions, facts).webhooks).toBeUndefined();
  });

  it("flags a settled order whose terminal event never arrived, and ignores other scenarios' orders", () => {
    const { facts } = healthy();
    const only = [delivery('o1', 'order.completed', 'evt_1'), delivery('o9', 'order.rejected', 'evt_9')];
    const { violations, counts } = checkMerchantEvents(new Set(['o1', 'o2']), facts.orders, {
      deliveries: only,
      rejected: [],
      pending: [],
    });
    expect(violations).toEqual([expect.objectContaining({ kind: 'missing_event', subject: 'o2' })]);
    expect(counts).toEqual({ events: 1, redeliveries: 0, missing: 1 });

    // An event of another status is not the terminal one.
    facts.orders.set('o2', order('o2', 'needs_attention', 'provider down'));
    const wrong = checkMerchantEvents(new Set(['o2']), facts.orders, {
      deliveries: [delivery('o2', 'order.rejected', 'evt_2')],
      rejected: [],
      pending: [],
    });
    expect(kinds(wrong)).toEqual(['missing_event']);
    // A stuck order owes no event yet (its own rule reports it).
    facts.orders.set('o2', order('o2', 'charging'));
    expect(
      checkMerchantEvents(new Set(['o2']), facts.orders, { deliveries: [], rejected: [], pending: [] })
        .violations,
    ).toEqual([]);
  });

  it('flags two event IDs for one transition, an event processed twice, a refused delivery and one left pending', () => {
    const { facts } = healthy();
    const scope = new Set(['o1', 'o2']);
    const twoIds = [...delivered(), delivery('o1', 'order.completed', 'evt_1b')];
    expect(
      checkMerchantEvents(scope, facts.orders, { deliveries: twoIds, rejected: [], pending: [] }).violations,
    ).toEqual([expect.objectContaining({ kind: 'double_event', subject: 'o1 order.completed' })]);
    const twice = [...delivered(), delivery('o2', 'order.rejected', 'evt_2')];
    expect(
      checkMerchantEvents(scope, facts.orders, { deliveries: twice, rejected: [], pending: [] }).violations,
    ).toEqual([expect.objectContaining({ kind: 'double_event', subject: 'evt_2' })]);
    const bad = checkMerchantEvents(scope, facts.orders, {
      deliveries: delivered(),
      rejected: ['evt_3: No matching signature found'],
      pending: [],
    });
    expect(kinds(bad)).toEqual(['bad_delivery']);
    // A delivery row its workflow will never settle (a closed run the relay would not start again).
    const stuck = checkMerchantEvents(scope, facts.orders, {
      deliveries: delivered(),
      rejected: [],
      pending: ['o1 order.completed -> we_1'],
    });
    expect(stuck.violations).toEqual([
      expect.objectContaining({ kind: 'stuck_delivery', subject: 'o1 order.completed -> we_1' }),
    ]);
  });
});

describe('chaos flags', () => {
  it('parses sizes and a scenario subset, and rejects unknown flags and scenarios', () => {
    const o = parseChaosArgs([
      '--orders',
      '40',
      '--outage-seconds',
      '30',
      '--scenarios',
      'api-kill,worker-kill',
    ]);
    expect(o).toMatchObject({ orders: 40, outageSeconds: 30, scenarios: ['api-kill', 'worker-kill'] });
    expect(parseChaosArgs([]).scenarios).toEqual([...SCENARIOS]);
    expect(() => parseChaosArgs(['--bogus'])).toThrow(UsageError);
    expect(() => parseChaosArgs(['--scenarios', 'nope'])).toThrow(UsageError);
    expect(() => parseChaosArgs(['--orders', '0'])).toThrow(UsageError);
  });

  it('takes the restore drill by --scenario too, with its gap and --skip-recovery', () => {
    const o = parseChaosArgs(['--scenario', 'restore', '--restore-gap-seconds', '20', '--skip-recovery']);
    expect(o).toMatchObject({ scenarios: ['restore'], restoreGapSeconds: 20, skipRecovery: true });
    expect(parseChaosArgs([])).toMatchObject({ skipRecovery: false, restoreGapSeconds: 12 });
    expect(() => parseChaosArgs(['--scenario', 'restore', '--scenarios', 'api-kill'])).toThrow(UsageError);
    // A gap shorter than 5 s would not outlast the sandbox's key window of the drill.
    expect(() => parseChaosArgs(['--restore-gap-seconds', '4'])).toThrow(UsageError);
  });
});
