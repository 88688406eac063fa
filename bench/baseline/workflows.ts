/**
 * The e2e benchmark's baseline (bench/e2e.ts): a no-op workflow with the
 * shape of today's order workflow and nothing else. Six regular activities
 * that return at once, and a search-attribute upsert after each, as the
 * order workflow records each status. Its throughput on the same server is
 * what orchestration alone costs; the real order is compared against it.
 * Bench-only: registered by bench/baseline/worker.ts, never by the product.
 */
import { proxyActivities, upsertSearchAttributes } from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { BaselineActivities } from './worker.ts';

const OrderStatusKey = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);
export const BASELINE_STEPS = 6;

const { noop } = proxyActivities<BaselineActivities>({
  startToCloseTimeout: '30 seconds',
  retry: { initialInterval: '1 second', maximumAttempts: 5 },
});

export async function baselineWorkflow(): Promise<number> {
  for (let step = 0; step < BASELINE_STEPS; step++) {
    await noop(step);
    upsertSearchAttributes([{ key: OrderStatusKey, value: `step_${step}` }]);
  }
  return BASELINE_STEPS;
}
