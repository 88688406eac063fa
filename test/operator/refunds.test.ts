/**
 * The operator's recovery path for refunds (issue 27), on the real stack: a
 * worker runs the refund workflow on real Temporal and Postgres against the
 * sandbox provider, the CLI runs as a child process, the admin routes over
 * Fastify. A refund is parked for real: its provider answer is lost
 * (refunds.create fault) and every lookup fails (refunds.lookup fault) until
 * the reconciliation horizon passes, so it sits in needs_attention with its
 * provider refund's record `unknown`. Then an operator reconciles, resolves
 * or re-drives it, and the refund ends with exactly the provider refunds it
 * should have.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Fastify, { type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { withTransaction } from '../../src/db/index.ts';
import { downstreamKey } from 'onceflow';
import { opsRoutes, type AuditEntry } from '../../src/operator/index.ts';
import {
  REFUND_OPERATION_TYPES,
  REFUND_WORKFLOW_TYPE,
  refundStepKeys,
  refundWorkflowId,
  type RefundWorkflowInput,
} from '../../src/refunds/contract.ts';
import { insertPendingRefund, reserveRefund } from '../../src/refunds/sql.ts';
import { startOrderStack, TEST_TIMING, type OrderStack } from '../support/stack.ts';
import { until } from '../support/wait.ts';
import { json, runOps, testOperator } from './support.ts';

const ADMIN_TOKEN = 'admin_test_token_0123456789abcdef';
const admin = { authorization: `Bearer ${ADMIN_TOKEN}` };
const TENANT = 'acme';
let stack: OrderStack;
let app: FastifyInstance;
/** The admin routes over real HTTP, for the CLI's --api-url path. */
let adminUrl: string;
let tokenFile: string;

beforeAll(async () => {
  stack = await startOrderStack();
  const operator = testOperator({
    pool: stack.pool,
    ledger: stack.ledger,
    temporal: stack.client,
    providerUrl: stack.sandbox.url,
  });
  app = Fastify().withTypeProvider<TypeBoxTypeProvider>();
  await app.register(
    opsRoutes({
      operator,
      adminToken: ADMIN_TOKEN,
      operators: stack.pool,
      authFailure: { max: 1000, windowMs: 60_000 },
    }),
  );
  await app.listen({ host: '127.0.0.1', port: 0 });
  adminUrl = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
  tokenFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'refops-')), 'token');
  writeFileSync(tokenFile, `${ADMIN_TOKEN}\n`);
});
afterAll(async () => {
  await app?.close();
  await stack?.close();
});

interface ParkedRefund {
  orderId: string;
  refundId: string;
  workflowId: string;
  /** The provider refund step's scope. */
  key: string;
  amount: number;
}

type SandboxRefund = { id: string; amount: number; idempotency_key: string; status: string };

const sandboxRefunds = async (orderId: string): Promise<SandboxRefund[]> => {
  const res = await fetch(`${stack.sandbox.url}/_sandbox/refunds?order_id=${encodeURIComponent(orderId)}`);
  expect(res.status).toBe(200);
  return ((await res.json()) as { data: SandboxRefund[] }).data;
};

const refundRow = async (refundId: string) =>
  (
    await stack.pool.query<{ status: string; provider_refund_id: string | null; refunded_amount: string }>(
      `select r.status, r.provider_refund_id, o.refunded_amount
         from refunds r join orders o on o.tenant_id = r.tenant_id and o.id = r.order_id
        where r.tenant_id = $1 and r.id = $2`,
      [TENANT, refundId],
    )
  ).rows[0]!;

const untilRefundStatus = (refundId: string, status: string) =>
  until(`refund ${refundId} in ${status}`, () => refundRow(refundId), {
    done: (r) => r.status === status,
    timeoutMs: 60_000,
    intervalMs: 100,
  });

const auditRows = async (workflowId: string) =>
  (
    await stack.pool.query<{ action: string; actor: string; source: string; reason: string | null }>(
      'select action, actor, source, reason from audit_log where workflow_id = $1 order by id',
      [workflowId],
    )
  ).rows;

/**
 * A completed order and one refund of it, parked in needs_attention with its
 * provider refund `unknown`: the refund request hit `createFault` and no
 * lookup answered until the horizon. The API's route does the same reserve
 * and insert; the workflow is started here to give it the tests' short timing.
 */
async function parkedRefund(createFault: 'drop_after' | 'fail_before'): Promise<ParkedRefund> {
  const orderId = `ord_${randomBytes(12).toString('hex')}`;
  const { input: order, handle } = await stack.startOrder({ tenantId: TENANT, orderId, amount: 3000 });
  expect((await handle.result()).status).toBe('completed');

  const refundId = `re_${randomBytes(12).toString('hex')}`;
  const workflowId = refundWorkflowId(TENANT, refundId);
  const amount = 1200;
  const input = await withTransaction(stack.pool, async (tx) => {
    const reserved = await reserveRefund(tx, { tenantId: TENANT, orderId, amount });
    if (reserved.refused) throw new Error(`reserve refused: ${reserved.refused}`);
    await insertPendingRefund(tx, {
      tenantId: TENANT,
      refundId,
      orderId,
      workflowId,
      amount,
      currency: reserved.currency,
      reason: null,
    });
    const started: RefundWorkflowInput = {
      tenantId: TENANT,
      refundId,
      orderId,
      amount,
      currency: reserved.currency,
      chargeId: reserved.chargeId,
      customerEmail: order.customer.email,
      reason: null,
    };
    return started;
  });

  await stack.fault('refunds.create', createFault, 1);
  await stack.fault('refunds.lookup', 'fail_before', 10_000);
  try {
    const refund = await stack.client.workflow.start(REFUND_WORKFLOW_TYPE, {
      taskQueue: stack.taskQueue,
      workflowId,
      args: [{ ...input, timing: TEST_TIMING }],
    });
    await untilRefundStatus(refundId, 'needs_attention');
    await until(
      `${workflowId} waiting for an operator`,
      () => refund.query<{ awaitingOperator: boolean }>('refundStatus'),
      { done: (s) => s.awaitingOperator, timeoutMs: 30_000, intervalMs: 100 },
    );
  } finally {
    await stack.clearFaults();
  }
  const key = refundStepKeys.refund(workflowId);
  expect(
    await stack.ledger.get({ tenantId: TENANT, operationType: REFUND_OPERATION_TYPES.providerRefund, key }),
  ).toMatchObject({ state: 'unknown' });
  return { orderId, refundId, workflowId, key, amount };
}

const sandbox = () => ({ sandboxUrl: stack.sandbox.url });

describe('refunds: the operator recovery path', () => {
  it('attention lists the parked refund with its key; reconcile (CLI) finds the lost refund and the refund succeeds, made once', async () => {
    const r = await parkedRefund('drop_after');
    // The provider made it; nobody was told. It is never presumed failed.
    expect(await sandboxRefunds(r.orderId)).toHaveLength(1);
    expect((await refundRow(r.refundId)).refunded_amount).toBe(String(r.amount));

    const attention = json<{ kind?: string; refundId?: string; operationKey?: string; status?: string }[]>(
      await runOps(['attention', '--tenant', TENANT, '--json'], sandbox()),
    );
    expect(attention.find((i) => i.kind === 'refund' && i.refundId === r.refundId)).toMatchObject({
      status: 'needs_attention',
      operationKey: r.key,
    });

    const reconciled = json<{ changed: boolean; before: string; after: string; providerAnswer: string }>(
      await runOps(
        [
          'reconcile',
          TENANT,
          REFUND_OPERATION_TYPES.providerRefund,
          r.key,
          '--actor',
          'erin',
          '--reason',
          'provider was down',
          '--json',
        ],
        sandbox(),
      ),
    );
    expect(reconciled).toMatchObject({
      changed: true,
      before: 'unknown',
      after: 'succeeded',
      providerAnswer: 'settled',
    });

    // Told by the reconcile, the parked workflow reads the settled record and records the outcome.
    const done = await untilRefundStatus(r.refundId, 'succeeded');
    const provider = await sandboxRefunds(r.orderId);
    expect(provider).toHaveLength(1);
    expect(done.provider_refund_id).toBe(provider[0]!.id);
    expect(done.refunded_amount).toBe(String(r.amount));
    await stack.client.workflow.getHandle(r.workflowId).result();
    const { rows } = await stack.pool.query(
      'select action, actor, source, reason from audit_log where operation_key = $1 order by id',
      [r.key],
    );
    expect(rows).toEqual([
      { action: 'reconcile', actor: 'erin', source: 'cli', reason: 'provider was down' },
    ]);
  });

  it('resolve (admin API): needs a reason, is refused when the provider contradicts it, and a failed refund gives its amount back', async () => {
    const r = await parkedRefund('fail_before');
    expect(await sandboxRefunds(r.orderId)).toHaveLength(0);
    const body = { tenant: TENANT, type: REFUND_OPERATION_TYPES.providerRefund, key: r.key };
    const resolve = (payload: Record<string, unknown>) =>
      app.inject({ method: 'POST', url: '/admin/operations/resolve', headers: admin, payload });

    const noReason = await resolve({ ...body, outcome: 'failed' });
    expect(noReason.statusCode).toBe(400);
    expect(noReason.headers['content-type']).toContain('application/problem+json');
    // The provider has no refund under the key: "succeeded" would be a lie.
    const contradicted = await resolve({ ...body, outcome: 'succeeded', reason: 'customer says so' });
    expect(contradicted.statusCode).toBe(409);
    expect(contradicted.json()).toMatchObject({ type: 'https://onceflow.dev/problems/operation-state' });
    expect(await auditRows(r.workflowId)).toEqual([]);

    const ok = await resolve({ ...body, outcome: 'failed', reason: 'provider support: never received' });
    expect(ok.statusCode).toBe(200);
    expect(ok.json()).toMatchObject({
      before: 'unknown',
      after: 'failed',
      workflowId: r.workflowId,
      signalled: true,
    });

    const done = await untilRefundStatus(r.refundId, 'failed');
    expect(done.refunded_amount).toBe('0');
    expect(await sandboxRefunds(r.orderId)).toHaveLength(0);
    await stack.client.workflow.getHandle(r.workflowId).result();
    expect(await auditRows(r.workflowId)).toEqual([
      {
        action: 'resolve',
        actor: 'admin-token',
        source: 'api',
        reason: 'provider support: never received',
      },
    ]);
    // A decision never overwrites an outcome.
    const again = await resolve({ ...body, outcome: 'failed', reason: 'again' });
    expect(again.statusCode).toBe(409);
  });

  it('redrive-refund (CLI) resumes a parked refund under the same key; the admin route refuses one that is not parked', async () => {
    const r = await parkedRefund('fail_before');
    const redriven = json<{ workflowId: string; parkedAs: { status: string; redrives: number } }>(
      await runOps(
        ['redrive-refund', TENANT, r.refundId, '--reason', 'provider is back', '--actor', 'frank', '--json'],
        sandbox(),
      ),
    );
    expect(redriven).toMatchObject({
      workflowId: r.workflowId,
      parkedAs: { status: 'needs_attention', redrives: 1 },
    });

    // The ledger reconciles first (the provider never saw the key), then performs under the SAME key.
    await untilRefundStatus(r.refundId, 'succeeded');
    const provider = await sandboxRefunds(r.orderId);
    expect(provider).toHaveLength(1);
    expect(provider[0]!.idempotency_key).toBe(
      downstreamKey({ tenantId: TENANT, operationType: REFUND_OPERATION_TYPES.providerRefund, key: r.key }),
    );
    await stack.client.workflow.getHandle(r.workflowId).result();

    const redrive = (refundId: string) =>
      app.inject({
        method: 'POST',
        url: `/admin/refunds/${TENANT}/${refundId}/redrive`,
        headers: admin,
        payload: { reason: 'once more' },
      });
    const notParked = await redrive(r.refundId);
    expect(notParked.statusCode).toBe(409);
    expect(notParked.headers['content-type']).toContain('application/problem+json');
    expect(notParked.json()).toMatchObject({ type: 'https://onceflow.dev/problems/operation-state' });
    const missing = await redrive('re_nosuchrefund');
    expect(missing.statusCode).toBe(404);
    expect(missing.json()).toMatchObject({ type: 'https://onceflow.dev/problems/not-found' });
    // The CLI through the admin API: the same refusal, exit 1, the problem as its error.
    const overApi = await runOps(
      [
        'redrive-refund',
        TENANT,
        r.refundId,
        '--reason',
        'from the CLI',
        '--json',
        '--api-url',
        adminUrl,
        '--token-file',
        tokenFile,
      ],
      sandbox(),
    );
    expect(overApi.code).toBe(1);
    expect(JSON.parse(overApi.stderr)).toMatchObject({ error: { code: 'invalid_state' } });

    expect(await sandboxRefunds(r.orderId)).toHaveLength(1);
    const audit = await auditRows(r.workflowId);
    expect(audit.map((a) => [a.action, a.actor, a.source])).toEqual([
      ['redrive_requested', 'frank', 'cli'],
      ['redrive', 'frank', 'cli'],
      ['redrive_requested', 'admin-token', 'api'],
      ['redrive_refused', 'admin-token', 'api'],
      ['redrive_requested', 'admin-token', 'api'],
      ['redrive_refused', 'admin-token', 'api'],
    ]);
    const listed = await app.inject({
      method: 'GET',
      url: `/admin/audit?workflowId=${encodeURIComponent(r.workflowId)}`,
      headers: admin,
    });
    expect(listed.json<{ data: AuditEntry[] }>().data).toHaveLength(6);
  });
});
