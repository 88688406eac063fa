/**
 * Parked order workflows, from Temporal visibility: a workflow whose status write failed can't say so
 * on its row, but its OrderStatus search attribute does.
 */
import type { Client } from '@temporalio/client';
import { OrderLastErrorKey, TenantIdKey } from './contract.ts';

/** Running order workflows whose OrderStatus search attribute says they wait for a human. */
const PARKED_WORKFLOWS_QUERY = `OrderStatus = 'needs_attention' AND ExecutionStatus = 'Running'`;

export interface ParkedWorkflow {
  workflowId: string;
  tenantId: string | null;
  lastError: string | null;
  startTime: Date;
}

/** Tenant IDs go into a visibility query: only plain identifiers are accepted there. */
const SAFE_TENANT = /^[A-Za-z0-9_.-]{1,200}$/;

export async function listParkedWorkflows(
  client: Client,
  opts: { tenantId?: string; limit: number },
): Promise<ParkedWorkflow[]> {
  if (opts.tenantId !== undefined && !SAFE_TENANT.test(opts.tenantId)) {
    throw new Error('tenant ID must be letters, digits, _ . - (at most 200)');
  }
  const query = opts.tenantId
    ? `${PARKED_WORKFLOWS_QUERY} AND TenantId = '${opts.tenantId}'`
    : PARKED_WORKFLOWS_QUERY;
  const parked: ParkedWorkflow[] = [];
  if (opts.limit <= 0) return parked;
  for await (const wf of client.workflow.list({ query, pageSize: Math.min(opts.limit, 1000) })) {
    parked.push({
      workflowId: wf.workflowId,
      tenantId: wf.typedSearchAttributes.get(TenantIdKey) ?? null,
      lastError: wf.typedSearchAttributes.get(OrderLastErrorKey) ?? null,
      startTime: wf.startTime,
    });
    if (parked.length >= opts.limit) break;
  }
  return parked;
}
