import { proxyActivities, workflowInfo } from '@temporalio/workflow';
import type { SmokeActivities } from '../activities/smoke.ts';

const { recordSmokeWrite } = proxyActivities<SmokeActivities>({ startToCloseTimeout: '30 seconds' });

/**
 * The foundation's end-to-end probe: one activity writes one row keyed by a
 * key derived from the workflow ID (never the run ID), so a second run under
 * the same workflow ID finds the row and writes nothing.
 */
export async function smokeWorkflow(): Promise<{ key: string; inserted: boolean }> {
  const { workflowId } = workflowInfo();
  const key = `${workflowId}/smoke-write`;
  const inserted = await recordSmokeWrite(key, workflowId);
  return { key, inserted };
}
