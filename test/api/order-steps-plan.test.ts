/**
 * GET /v1/orders/{id} reads the order's steps by index, whatever the size of
 * the tenant's ledger (issue #24, item 8): with ~60,000 other records of the
 * same tenant, every statement the route runs against `operations` is an
 * index scan, never a sequential scan, and the route still lists exactly the
 * order's steps, oldest first (re-drive epochs included).
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import pg from 'pg';
import { OPERATION_TYPES, stepKeys } from '../../src/orders/model.ts';
import { uniq } from '../support/env.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';

let api: TestApi;
let tenant: { tenantId: string; key: string };

beforeAll(async () => {
  api = await startApi();
  tenant = await newTenant(api.pool, 'steps');
});
afterAll(async () => api?.close());

/** Every statement against `operations` that any pg client of this process sends while `fn` runs. */
async function recordOperationsQueries(
  fn: () => Promise<void>,
): Promise<{ text: string; values: unknown[] }[]> {
  const seen: { text: string; values: unknown[] }[] = [];
  const original = pg.Client.prototype.query;
  // Records only: the statement still runs, unchanged, on the real database.
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const [first, second] = args as [unknown, unknown];
    const config =
      typeof first === 'string'
        ? { text: first, values: Array.isArray(second) ? second : [] }
        : (first as { text?: string; values?: unknown[] } | undefined);
    if (config?.text && /\b(from|join)\s+operations\b/i.test(config.text)) {
      seen.push({ text: config.text, values: config.values ?? [] });
    }
    return (original as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof original;
  try {
    await fn();
  } finally {
    pg.Client.prototype.query = original;
  }
  return seen;
}

type PlanNode = { 'Node Type': string; 'Relation Name'?: string; Plans?: PlanNode[] };
function planNodes(node: PlanNode): PlanNode[] {
  return [node, ...(node.Plans ?? []).flatMap(planNodes)];
}

it('lists exactly the order’s steps through index scans, with 60,000 other records of the tenant', async () => {
  const { tenantId } = tenant;
  const created = await call(api, 'POST', '/v1/orders', {
    key: tenant.key,
    idem: uniq('idem'),
    body: validOrder(),
  });
  expect(created.status).toBe(202);
  const { id, workflowId } = created.body as { id: string; workflowId: string };

  // The tenant's history: 20,000 other orders' charge, receipt and status records.
  await api.pool.query(
    `insert into operations (tenant_id, operation_type, key, fingerprint, schema_version, state, attempts,
                             result, created_at, updated_at, completed_at)
     select $1, t.operation_type, 'order/' || $1 || '/ord_bulk' || g || t.suffix, 'f', 1, 'succeeded', 1,
            '{}'::json, now() - interval '1 hour', now(), now()
       from generate_series(1, 20000) g,
            (values ('${OPERATION_TYPES.charge}', '/charge'), ('${OPERATION_TYPES.receipt}', '/receipt'),
                    ('${OPERATION_TYPES.status}', '/status/paid')) as t(operation_type, suffix)`,
    [tenantId],
  );

  // The order's own steps, first run and two re-drive epochs (one past the first read's batch),
  // each a second apart so their order is known.
  const own: [string, string][] = [
    [OPERATION_TYPES.status, stepKeys.status(workflowId, 'payment_pending')],
    [OPERATION_TYPES.charge, stepKeys.charge(workflowId)],
    [OPERATION_TYPES.status, stepKeys.status(workflowId, 'needs_attention')],
    [OPERATION_TYPES.status, stepKeys.status(workflowId, 'paid', 1)],
    [OPERATION_TYPES.status, stepKeys.status(workflowId, 'needs_attention', 1)],
    [OPERATION_TYPES.status, stepKeys.status(workflowId, 'paid', 9)],
    [OPERATION_TYPES.receipt, stepKeys.receipt(workflowId)],
    [OPERATION_TYPES.status, stepKeys.status(workflowId, 'completed', 9)],
  ];
  // Not the order's steps: the tenant's own Idempotency-Key that looks like a step key, and
  // another tenant's record under the very same step key.
  const decoys: [string, string, string][] = [
    [tenantId, OPERATION_TYPES.createOrder, stepKeys.charge(workflowId)],
    ['another-tenant', OPERATION_TYPES.charge, stepKeys.charge(workflowId)],
  ];
  const rows = [...own.map(([t, k]) => [tenantId, t, k] as const), ...decoys];
  for (const [i, [rowTenant, type, key]] of rows.entries()) {
    await api.pool.query(
      `insert into operations (tenant_id, operation_type, key, fingerprint, schema_version, state, attempts,
                               result, created_at, updated_at, completed_at)
       values ($1, $2, $3, 'f', 1, 'succeeded', 1, '{}'::json,
               now() + $4 * interval '1 second', now(), now())`,
      [rowTenant, type, key, i],
    );
  }
  await api.pool.query('analyze operations');

  let res: Awaited<ReturnType<typeof call>> | undefined;
  const statements = await recordOperationsQueries(async () => {
    res = await call(api, 'GET', `/v1/orders/${id}`, { key: tenant.key });
  });
  expect(res!.status).toBe(200);
  const steps = (res!.body as { steps: { name: string; operationType: string; operationKey: string }[] })
    .steps;
  expect(steps.map((s) => [s.operationType, s.operationKey])).toEqual(own);
  expect(steps.map((s) => s.name)).toEqual([
    'status/payment_pending',
    'charge',
    'status/needs_attention',
    'status/paid/redrive-1',
    'status/needs_attention/redrive-1',
    'status/paid/redrive-9',
    'receipt',
    'status/completed/redrive-9',
  ]);

  expect(statements.length).toBeGreaterThan(0);
  const c = await api.pool.connect();
  try {
    for (const [i, s] of statements.entries()) {
      // The plan for these values, and the generic plan a named statement may switch to after
      // five executions.
      const custom = await c.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `explain (format json) ${s.text}`,
        s.values,
      );
      await c.query(`prepare steps_${i} as ${s.text}`);
      await c.query('set plan_cache_mode = force_generic_plan');
      // EXECUTE takes no bind parameters: the values as literals (strings and string arrays).
      const literal = (v: unknown): string =>
        Array.isArray(v) ? `array[${v.map(literal).join(', ')}]::text[]` : c.escapeLiteral(String(v));
      const generic = await c.query<{ 'QUERY PLAN': [{ Plan: PlanNode }] }>(
        `explain (format json) execute steps_${i}(${s.values.map(literal).join(', ')})`,
      );
      await c.query('reset plan_cache_mode');
      for (const explained of [custom, generic]) {
        const kinds = planNodes(explained.rows[0]!['QUERY PLAN'][0].Plan)
          .filter((n) => n['Relation Name'] === 'operations')
          .map((n) => n['Node Type']);
        expect(kinds, s.text).not.toContain('Seq Scan');
        expect(
          kinds.some((k) => k === 'Index Scan' || k === 'Index Only Scan'),
          `${s.text}\n${kinds.join(', ')}`,
        ).toBe(true);
      }
    }
  } finally {
    await c.query('deallocate all');
    c.release();
  }
});
