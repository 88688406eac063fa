/**
 * The API's request log, through a real server: one JSON line per request
 * with the route pattern, status, duration, tenant and request ID; the
 * request ID comes back in X-Request-Id (problems included); and the API
 * key, the webhook secret and the webhook signature never reach the log.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import { configureLogging } from '../../src/log.ts';
import { signWebhook } from '../../src/providers/webhook-signature.ts';
import { uniq } from '../support/env.ts';
import { captureLines } from '../log/capture.ts';
import { call, newTenant, startApi, validOrder, type TestApi } from './support.ts';

const out = captureLines();
let api: TestApi;
let t: { tenantId: string; key: string };
const secret = 'whsec_test_api';

beforeAll(async () => {
  // Everything this process logs (our lines and Fastify's) goes to memory, at every level.
  configureLogging({ level: 'debug', service: 'api', destination: out.stream });
  api = await startApi();
  t = await newTenant(api.pool, 'rlog');
});
afterAll(async () => {
  await api?.close();
});

function requestLines() {
  return out.lines().filter((l) => l.msg === 'request');
}

it('logs each request with its route pattern, status, duration, tenant and request ID', async () => {
  const requestId = uniq('req');
  const created = await call(api, 'POST', '/v1/orders', {
    key: t.key,
    idem: uniq('idem'),
    body: validOrder(),
    headers: { 'x-request-id': requestId },
  });
  expect(created.status).toBe(202);
  expect(created.headers.get('x-request-id')).toBe(requestId);
  const orderId = (created.body as { id: string }).id;

  const traceId = '4bf92f3577b34da6a3ce929d0e0e4736';
  const read = await call(api, 'GET', `/v1/orders/${orderId}`, {
    key: t.key,
    headers: { traceparent: `00-${traceId}-00f067aa0ba902b7-01` },
  });
  expect(read.status).toBe(200);
  expect(read.headers.get('x-request-id')).toBe(traceId);

  await expect.poll(() => requestLines().length).toBeGreaterThanOrEqual(2);
  const [post, get] = requestLines().slice(-2);
  expect(post).toMatchObject({
    level: 'info',
    service: 'api',
    method: 'POST',
    route: '/v1/orders',
    status: 202,
    tenantId: t.tenantId,
    requestId,
  });
  expect(typeof post!.durationMs).toBe('number');
  // The pattern, never the URL with the order's ID in it.
  expect(get).toMatchObject({ method: 'GET', route: '/v1/orders/:id', status: 200, requestId: traceId });
  expect(JSON.stringify(get)).not.toContain(orderId);
});

it('a problem+json response carries X-Request-Id too, and is logged without a tenant', async () => {
  const res = await call(api, 'GET', '/v1/orders/ord_nope', { key: 'sk_test_not_a_real_key' });
  expect(res.status).toBe(401);
  expect(res.headers.get('content-type')).toContain('application/problem+json');
  const requestId = res.headers.get('x-request-id');
  expect(requestId).toMatch(/^[0-9a-f-]{36}$/);
  await expect.poll(() => requestLines().find((l) => l.requestId === requestId)).toBeTruthy();
  expect(requestLines().find((l) => l.requestId === requestId)).toMatchObject({
    status: 401,
    route: '/v1/orders/:id',
    tenantId: null,
  });
});

it('never logs the API key, the webhook secret or the webhook signature', async () => {
  const raw = JSON.stringify({
    id: `evt_${uniq('e')}`,
    type: 'charge.succeeded',
    created: Math.floor(Date.now() / 1000),
    data: { object: { id: 'ch_x', status: 'succeeded', idempotency_key: 'nobody/charge', metadata: {} } },
  });
  const good = signWebhook(secret, raw, Math.floor(Date.now() / 1000));
  const forged = signWebhook('whsec_forged_by_someone', raw, Math.floor(Date.now() / 1000));
  const sent = [
    await call(api, 'POST', '/v1/webhooks/payments', { raw, headers: { 'onceflow-signature': good } }),
    await call(api, 'POST', '/v1/webhooks/payments', { raw, headers: { 'onceflow-signature': forged } }),
  ];
  expect(sent[1]!.status).toBe(401);
  await call(api, 'GET', '/v1/orders/ord_nope', { key: t.key });
  await expect.poll(() => requestLines().filter((l) => l.route === '/v1/webhooks/payments').length).toBe(2);
  // The lines exist (the rejected webhook's own warning included) and hold none of the secrets.
  expect(out.text()).toMatch(/webhook rejected/);
  const text = out.text();
  for (const value of [t.key, secret, good, forged, good.split('v1=')[1]!, forged.split('v1=')[1]!]) {
    expect(text).not.toContain(value);
  }
});
