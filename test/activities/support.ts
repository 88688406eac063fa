/** Shared by the activity boundary tests: the arguments of one fresh charge for tenant `acme`. */
import { orderWorkflowId, stepKeys } from '../../src/orders/model.ts';
import { uniq } from '../support/env.ts';

export function chargeArgs() {
  const orderId = uniq('ord');
  const workflowId = orderWorkflowId('acme', orderId);
  return {
    tenantId: 'acme',
    orderId,
    workflowId,
    key: stepKeys.charge(workflowId),
    amount: 2500,
    currency: 'usd',
    paymentMethod: 'pm_card_visa',
  };
}
