/**
 * The admin routes and the metrics plugin registered inside the real API app
 * (buildApiServer, which src/api/main.ts serves): admin routes answer only to
 * the admin token, tenant routes keep their own auth, the metrics count the
 * API's responses by route pattern (and are not served on the API's port).
 */
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import { buildApiServer } from '../../src/api/server.ts';
import { Ledger } from 'onceflow';
import { createMetrics, type Metrics } from '../../src/metrics/index.ts';
import { loadConfig } from '../../src/config.ts';
import type { Pool } from '../../src/db/index.ts';
import { testDatabaseUrl, temporalAddress, temporalClient, testPool, uniq } from '../support/env.ts';

let app: FastifyInstance;
let pool: Pool;
let metrics: Metrics;
let closeClient: () => Promise<void>;
const ADMIN = randomBytes(32).toString('hex');

beforeAll(async () => {
  const config = loadConfig({
    DATABASE_URL: testDatabaseUrl(),
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: uniq('wiring'),
    ONCEFLOW_ADMIN_TOKEN: ADMIN,
    OUTBOX_RELAY: 'off',
  });
  pool = testPool(5);
  metrics = createMetrics({ pool });
  const ledger = new Ledger(pool, { hooks: metrics.ledgerHooks });
  const tc = await temporalClient();
  closeClient = tc.close;
  app = await buildApiServer({ pool, ledger, temporal: tc.client, config, metrics });
  await app.ready();
});
afterAll(async () => {
  await app?.close();
  await closeClient?.();
  await pool?.end();
});

it('serves the admin routes behind the admin token and counts responses in the metrics', async () => {
  const denied = await app.inject({ method: 'GET', url: '/admin/attention' });
  expect(denied.statusCode).toBe(401);
  expect(denied.headers['content-type']).toContain('application/problem+json');

  const ok = await app.inject({
    method: 'GET',
    url: '/admin/attention',
    headers: { authorization: `Bearer ${ADMIN}` },
  });
  expect(ok.statusCode).toBe(200);

  // The admin token is not a tenant key.
  const tenantRoute = await app.inject({
    method: 'GET',
    url: '/v1/orders',
    headers: { authorization: `Bearer ${ADMIN}` },
  });
  expect(tenantRoute.statusCode).toBe(401);

  // Every tenant's figures: served on the metrics listener (src/api/main.ts), never here.
  const res = await app.inject({ method: 'GET', url: '/metrics' });
  expect(res.statusCode).toBe(404);
  const text = await metrics.registry.metrics();
  expect(text).toContain('http_requests_total{route="/admin/attention",method="GET",status="401"} 1');
  expect(text).toContain('http_requests_total{route="/admin/attention",method="GET",status="200"} 1');
  expect(text).toContain('http_requests_total{route="/v1/orders",method="GET",status="401"} 1');
  expect(text).toContain('onceflow_metrics_db_up 1');
});

it('the OpenAPI document lists the admin routes under the adminToken scheme, and serving it grants nothing', async () => {
  for (const url of ['/openapi.json', '/docs/json']) {
    const res = await app.inject({ method: 'GET', url });
    expect(res.statusCode, url).toBe(200);
    const doc = res.json<{ paths: Record<string, Record<string, { security?: unknown }>> }>();
    expect(Object.keys(doc.paths)).toContain('/v1/orders');
    const admin = Object.entries(doc.paths).filter(([p]) => p.startsWith('/admin'));
    expect(admin.length, url).toBe(14); // paths; the console's order view, re-drive preview and webhooks included
    for (const [, item] of admin) {
      for (const op of Object.values(item)) expect(op.security).toEqual([{ adminToken: [] }]);
    }
  }
  // Documented is not open: the routes still answer 401 without the token.
  const res = await app.inject({ method: 'GET', url: '/admin/audit' });
  expect(res.statusCode).toBe(401);
});

it('unknown admin paths and framework errors are problem+json from the same implementation', async () => {
  for (const url of ['/admin/nope', '/admin/orders/acme/%ff/redrive']) {
    const res = await app.inject({ method: 'GET', url, headers: { authorization: `Bearer ${ADMIN}` } });
    expect(res.statusCode, url).toBeGreaterThanOrEqual(400);
    expect(res.statusCode, url).toBeLessThan(500);
    expect(res.headers['content-type'], url).toContain('application/problem+json');
    expect(res.body, url).not.toContain('/admin/');
  }
});
