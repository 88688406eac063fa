/**
 * One delivery of one merchant event to one endpoint (`delivery/<endpointId>/<eventId>`): the
 * activity retries itself with backoff (activities/delivery.ts) until a 2xx or the retry window's
 * end, when the delivery is marked failed. Nothing here waits on an order or on another endpoint.
 */
import { ActivityFailure, ApplicationFailure, proxyActivities } from '@temporalio/workflow';
import type { DeliveryActivities } from '../activities/delivery.ts';
import {
  DELIVERY_FAILURE,
  type DeliveryOutcome,
  type DeliveryWorkflowInput,
} from '../src/merchant-events/contract.ts';

const { deliverEvent, failDelivery } = proxyActivities<DeliveryActivities>({
  // An attempt is bounded by its 10 s HTTP timeout; the rest is a few statements.
  startToCloseTimeout: '1 minute',
  retry: {
    initialInterval: '5 seconds',
    backoffCoefficient: 2,
    maximumInterval: '1 hour',
    nonRetryableErrorTypes: [DELIVERY_FAILURE.expired, 'DeliveryNotFound'],
  },
});

export async function deliveryWorkflow(input: DeliveryWorkflowInput): Promise<DeliveryOutcome> {
  try {
    return await deliverEvent(input);
  } catch (err) {
    const expired =
      err instanceof ActivityFailure &&
      err.cause instanceof ApplicationFailure &&
      err.cause.type === DELIVERY_FAILURE.expired;
    if (!expired) throw err;
    await failDelivery(input);
    return 'failed';
  }
}
