import { createOrderActivities, type OrderActivityDeps } from './order.ts';
import { createSmokeActivities } from './smoke.ts';
import { createRetentionActivities } from './retention.ts';

export type ActivityDeps = OrderActivityDeps;

/** The one place activities are wired to their dependencies. */
export function createActivities(deps: ActivityDeps) {
  return {
    ...createSmokeActivities(deps),
    ...createOrderActivities(deps),
    ...createRetentionActivities(deps),
  };
}
