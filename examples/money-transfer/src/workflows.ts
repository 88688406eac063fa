/**
 * A transfer: withdraw from one account, deposit into the other; if the
 * deposit is refused, refund the withdrawal. Deterministic: it imports only
 * @temporalio/workflow and types. The workflow ID is the transfer's own
 * reference (`transfer/<reference>`), so submitting one transfer twice is one
 * workflow, and every step's key (`<workflowId>/withdraw`, ...) is the same
 * on every attempt, on every worker.
 */
import { ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { TransferActivities } from './activities.js';
import type { LegReport, Transfer, TransferResult } from './shared.js';

const { withdraw, deposit, refund } = proxyActivities<TransferActivities>({
  startToCloseTimeout: '1 minute',
  // A leg whose worker died is retried elsewhere after this; the retry reconciles before it sends.
  heartbeatTimeout: '5 seconds',
  // No attempt limit: a lost answer is retried (and reconciled) until the bank answers.
  retry: { initialInterval: '200 milliseconds', maximumInterval: '5 seconds' },
});

type Leg = Awaited<ReturnType<TransferActivities['withdraw']>>;

const report = (step: LegReport['step'], leg: Leg): LegReport => ({
  step,
  entryId: leg.result.id,
  state: leg.state,
  reconciled: leg.reconciled,
});

export async function transferWorkflow(transfer: Transfer): Promise<TransferResult> {
  const withdrawal = await withdraw(transfer);
  const legs = [report('withdraw', withdrawal)];
  if (withdrawal.state === 'failed') return { status: 'declined', reason: withdrawal.result.reason, legs };

  const credit = await deposit(transfer);
  legs.push(report('deposit', credit));
  if (credit.state === 'succeeded') return { status: 'completed', reason: null, legs };

  // The deposit was refused: the money goes back where it came from, once.
  const giveBack = await refund(transfer, withdrawal.result.id);
  legs.push(report('refund', giveBack));
  if (giveBack.state === 'failed') {
    throw ApplicationFailure.create({
      type: 'RefundRefused',
      message: `the bank refused to refund withdrawal ${withdrawal.result.id}: ${giveBack.result.reason}`,
      nonRetryable: true,
    });
  }
  return { status: 'refunded', reason: credit.result.reason, legs };
}
