import { createOrderActivities, type OrderActivityDeps } from './order.ts';
import { createRefundActivities } from './refund.ts';
import { createSmokeActivities } from './smoke.ts';
import { createRetentionActivities } from './retention.ts';
import { createDeliveryActivities, type DeliveryActivityDeps } from './delivery.ts';

export type ActivityDeps = OrderActivityDeps & DeliveryActivityDeps;

/**
 * The one place activities are wired to their dependencies. The smoke probe's
 * activity only when asked (`smoke`: `npm start`'s self-check, tests, bench).
 */
export function createActivities(deps: ActivityDeps, opts: { smoke?: boolean } = {}) {
  return {
    ...(opts.smoke ? createSmokeActivities(deps) : {}),
    ...createOrderActivities(deps),
    ...createRefundActivities(deps),
    ...createRetentionActivities(deps),
    ...createDeliveryActivities(deps),
  };
}
