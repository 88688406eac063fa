/**
 * Internal error text never reaches tenants (issue #24, item 9). An order
 * parked with a raw internal error (a connection refused to an internal
 * address, a Postgres message) shows the tenant a stable `reason` code and a
 * fixed, safe `message` from the table in src/orders/model.ts, in every
 * tenant-facing response (GET, ?wait, the list, a POST replay); the operator's
 * view (the admin routes and `npm run ops` read it) keeps the raw text.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { Operator } from '../../src/operator/index.ts';
import { OPERATION_TYPES, ORDER_REASONS, stepKeys, type OrderStatus } from '../../src/orders/model.ts';
import { orderTransitionStatement } from '../../src/orders/sql.ts';
import { uniq } from '../support/env.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';
import { testOperator } from '../operator/support.ts';

let api: TestApi;
let tenant: { tenantId: string; key: string };
let operator: Operator;

beforeAll(async () => {
  api = await startApi();
  tenant = await newTenant(api.pool, 'errors');
  // Never reached: listing the attention list reads Postgres and Temporal visibility only.
  operator = testOperator({
    pool: api.pool,
    ledger: api.ledger,
    temporal: api.client,
    providerTimeoutMs: 1_000,
  });
});
afterAll(async () => api?.close());

const RAW_CONNECT = 'status paid could not be recorded: connect ECONNREFUSED 10.0.0.7:4010';
const RAW_PG = 'duplicate key value violates unique constraint "operations_pkey" (SQLSTATE 23505)';
const SECRETS = [/ECONNREFUSED/, /10\.0\.0\.7/, /4010/, /duplicate key/, /operations_pkey/, /SQLSTATE/];

/** A new order, moved by the real status statement (as the workflow's status step does). */
async function orderEndingIn(
  status: OrderStatus,
  lastError: string,
  reason: string,
): Promise<{ id: string; idem: string }> {
  const idem = uniq('idem');
  const created = await call(api, 'POST', '/v1/orders', { key: tenant.key, idem, body: validOrder() });
  expect(created.status).toBe(202);
  const { id, workflowId } = created.body as { id: string; workflowId: string };
  const ran = await api.ledger.runLocalStatement(
    {
      tenantId: tenant.tenantId,
      operationType: OPERATION_TYPES.status,
      key: stepKeys.status(workflowId, status),
    },
    { schemaVersion: 1, value: { orderId: id, status } },
    orderTransitionStatement({
      tenantId: tenant.tenantId,
      orderId: id,
      to: status,
      chargeId: null,
      receiptId: null,
      lastError,
      reason,
      stepKey: stepKeys.status(workflowId, status),
      taskQueue: 'order-errors-test',
    }),
  );
  expect(ran?.result).toMatchObject({ applied: true, status });
  return { id, idem };
}

function expectNoInternalText(text: string) {
  for (const secret of SECRETS) expect(text).not.toMatch(secret);
}

it('a parked order with a raw connection error shows the tenant its reason code and a safe message, everywhere', async () => {
  const { id, idem } = await orderEndingIn('needs_attention', RAW_CONNECT, ORDER_REASONS.statusWriteFailed);

  for (const path of [`/v1/orders/${id}`, `/v1/orders/${id}?wait=1`]) {
    const res = await call(api, 'GET', path, { key: tenant.key });
    expect(res.status).toBe(200);
    expectNoInternalText(res.text);
    expect(res.body).toMatchObject({
      status: 'needs_attention',
      reason: 'status_write_failed',
      message:
        'The order could not be updated because of a temporary problem on our side. Our team has been alerted.',
    });
    expect(res.body).not.toHaveProperty('lastError');
  }

  const list = await call(api, 'GET', '/v1/orders?status=needs_attention', { key: tenant.key });
  expect(list.status).toBe(200);
  expectNoInternalText(list.text);

  const replay = await call(api, 'POST', '/v1/orders', { key: tenant.key, idem, body: validOrder() });
  expect(replay.status).toBe(202);
  expect(replay.headers.get('idempotent-replayed')).toBe('true');
  expectNoInternalText(replay.text);

  // The operator's view keeps the raw text: it is what they need to act.
  const attention = await operator.listAttention({ tenantId: tenant.tenantId });
  expect(attention.find((o) => o.orderId === id)?.lastError).toBe(RAW_CONNECT);
});

it('a rejected order with a Postgres message shows the safe message of its code', async () => {
  const { id } = await orderEndingIn('rejected', RAW_PG, ORDER_REASONS.providerRejected);
  const res = await call(api, 'GET', `/v1/orders/${id}`, { key: tenant.key });
  expectNoInternalText(res.text);
  expect(res.body).toMatchObject({
    status: 'rejected',
    reason: 'provider_rejected',
    message: 'The payment provider refused the charge request. Nothing was charged.',
  });
});

it('a reason whose detail is not a plain code is cut to its family; an unknown code is not shown', async () => {
  const odd = await orderEndingIn(
    'needs_attention',
    RAW_CONNECT,
    ORDER_REASONS.chargeFailed('Error: connect ECONNREFUSED 10.0.0.7:4010'),
  );
  const oddRes = await call(api, 'GET', `/v1/orders/${odd.id}`, { key: tenant.key });
  expectNoInternalText(oddRes.text);
  expect(oddRes.body).toMatchObject({
    reason: 'charge_failed',
    message:
      'The payment could not be completed. Our team has been alerted; do not ask the customer to pay again.',
  });

  const typed = await orderEndingIn('needs_attention', RAW_PG, ORDER_REASONS.chargeFailed('ProviderTimeout'));
  expect((await call(api, 'GET', `/v1/orders/${typed.id}`, { key: tenant.key })).body).toMatchObject({
    reason: 'charge_failed:ProviderTimeout',
  });

  const unknown = await orderEndingIn('needs_attention', RAW_PG, 'pg: relation "x" does not exist');
  const unknownRes = await call(api, 'GET', `/v1/orders/${unknown.id}`, { key: tenant.key });
  expectNoInternalText(unknownRes.text);
  expect(unknownRes.text).not.toMatch(/relation/);
  expect(unknownRes.body).toMatchObject({
    reason: null,
    message: 'The order needs attention from our team.',
  });
});
