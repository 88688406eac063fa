/**
 * The renewal workflow: one per subscription (`subscription/<tenant>/<id>`),
 * renewing it for each period it is given. Deterministic: it imports only
 * @temporalio/workflow and types. It passes no keys: each activity is an
 * onceflow step keyed `<workflowId>/<step name>`, and the step names carry
 * the period, so every retry of a period's charge, at every level, reuses
 * its key.
 */
import { proxyActivities } from '@temporalio/workflow';
import type { RenewalActivities } from './activities.js';

export interface RenewalInput {
  tenantId: string;
  subscriptionId: string;
  /** The periods to pay for, in order, e.g. `['2026-11', '2026-12']`. */
  periods: string[];
  amount: number;
  currency: string;
}

const { chargeRenewal, extendSubscription } = proxyActivities<RenewalActivities>({
  startToCloseTimeout: '30 seconds',
  heartbeatTimeout: '10 seconds',
  // A lost charge outcome is retried: the retry reconciles under the same key.
  retry: { initialInterval: '50 milliseconds', maximumInterval: '2 seconds', maximumAttempts: 20 },
});

export async function renewalWorkflow(
  input: RenewalInput,
): Promise<{ chargeIds: string[]; paidThrough: string | null }> {
  const { tenantId, subscriptionId, amount, currency } = input;
  const chargeIds: string[] = [];
  let paidThrough: string | null = null;
  for (const period of input.periods) {
    const charge = await chargeRenewal({ tenantId, subscriptionId, period, amount, currency });
    const extended = await extendSubscription({
      tenantId,
      subscriptionId,
      period,
      chargeId: charge.result.id,
    });
    chargeIds.push(charge.result.id);
    paidThrough = extended.result.paidThrough;
  }
  return { chargeIds, paidThrough };
}
