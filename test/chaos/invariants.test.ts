/**
 * The chaos harness's judge, on crafted facts: a harness whose checker can't
 * fail proves nothing, so each rule is shown flagging its violation, and a
 * healthy run is shown passing.
 */
import { describe, expect, it } from 'vitest';
import {
  checkMoney,
  checkScenario,
  type Facts,
  type MoneyEffect,
  type OrderFact,
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
});
