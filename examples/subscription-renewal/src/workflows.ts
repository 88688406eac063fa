/**
 * The renewal workflow. Deterministic: it imports only @temporalio/workflow,
 * the library's workflow-safe entry and types. Step keys derive from the
 * workflow ID, so every retry of a step, at every level, reuses its key.
 */
import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import { stepKey } from 'onceflow/workflow';
import type { RenewalActivities } from './activities.js';

export interface RenewalInput {
  tenantId: string;
  subscriptionId: string;
  /** The period paid for, e.g. `2026-12`. */
  period: string;
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
): Promise<{ chargeId: string; paidThrough: string }> {
  const { workflowId } = workflowInfo();
  const step = { tenantId: input.tenantId, subscriptionId: input.subscriptionId, period: input.period };
  const charge = await chargeRenewal({
    ...step,
    key: stepKey(workflowId, 'charge'),
    amount: input.amount,
    currency: input.currency,
  });
  const { paidThrough } = await extendSubscription({
    ...step,
    key: stepKey(workflowId, 'extend'),
    chargeId: charge.chargeId,
  });
  return { chargeId: charge.chargeId, paidThrough };
}
