/**
 * Metrics: every ledger counter moves when the ledger does (driven directly
 * on real Postgres), the backlog gauges report what is in the tables, HTTP
 * responses are counted by route pattern, and the worker's metrics server
 * serves our registry merged with other sources.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import http from 'node:http';
import Fastify from 'fastify';
import type { Registry } from 'prom-client';
import { createPool, type Pool } from '../../src/db/index.ts';
import { Ledger, LedgerError } from 'onceflow';
import { createMetrics, metricsPlugin, startMetricsServer, type Metrics } from '../../src/metrics/index.ts';
import { PortInUseError } from '../../src/process/ports.ts';
import { testDatabaseUrl, testPool, uniq } from '../support/env.ts';
import { until } from '../support/wait.ts';
import { reconcileOnly, untilLeaseExpired } from '../support/ledger.ts';

let pool: Pool;
beforeAll(() => {
  pool = testPool(5);
});
afterAll(async () => {
  await pool?.end();
});

/** The value of one series, or undefined if it was never set. */
async function sample(
  registry: Registry,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const metric = registry.getSingleMetric(name);
  if (!metric) throw new Error(`metric ${name} is not registered`);
  const { values } = await metric.get();
  const hit = values.find((v) => Object.entries(labels).every(([k, want]) => String(v.labels[k]) === want));
  return hit?.value;
}

describe('ledger counters', () => {
  let metrics: Metrics;
  let ledger: Ledger;
  /** A type of our own, so no other test's events land in these series. */
  const type = `metrics.${uniq('t')}`;
  const scope = (key: string) => ({ tenantId: 'acme', operationType: type, key });
  const input = (value: unknown) => ({ schemaVersion: 1, value });
  const count = (name: string, labels: Record<string, string> = {}) =>
    sample(metrics.registry, name, { operation_type: type, ...labels });

  beforeAll(() => {
    metrics = createMetrics({ defaultMetrics: false });
    ledger = new Ledger(pool, { hooks: metrics.ledgerHooks, leaseMs: 5_000 });
  });

  it('claim, replay, conflict (local mode)', async () => {
    const s = scope(uniq('local'));
    expect(await count('onceflow_ledger_claims_total', { mode: 'local' })).toBeUndefined();
    await ledger.runLocal(s, input({ n: 1 }), async () => ({ ok: true }));
    expect(await count('onceflow_ledger_claims_total', { mode: 'local' })).toBe(1);
    expect(await count('onceflow_ledger_completions_total', { state: 'succeeded' })).toBe(1);

    await ledger.runLocal(s, input({ n: 1 }), async () => ({ ok: true }));
    await ledger.runLocal(s, input({ n: 1 }), async () => ({ ok: true }));
    expect(await count('onceflow_ledger_replays_total', { state: 'succeeded' })).toBe(2);
    expect(await count('onceflow_ledger_claims_total', { mode: 'local' })).toBe(1);

    await expect(ledger.runLocal(s, input({ n: 2 }), async () => ({ ok: true }))).rejects.toMatchObject({
      code: 'conflict',
    });
    expect(await count('onceflow_ledger_conflicts_total')).toBe(1);
  });

  it('in_progress refusal, takeover after the lease, ownership_lost for the stale owner', async () => {
    const s = scope(uniq('ext'));
    const first = await ledger.claim(s, input({ n: 1 }), { leaseMs: 300 });
    expect(first.kind).toBe('claimed');
    expect(await count('onceflow_ledger_claims_total', { mode: 'external' })).toBe(1);

    await expect(ledger.claim(s, input({ n: 1 }))).rejects.toMatchObject({ code: 'in_progress' });
    expect(await count('onceflow_ledger_in_progress_refusals_total')).toBe(1);

    await untilLeaseExpired(pool, s);
    const second = await ledger.claim(s, input({ n: 1 }));
    expect(second).toMatchObject({ kind: 'claimed', takeover: true });
    expect(await count('onceflow_ledger_takeovers_total', { from_state: 'in_progress' })).toBe(1);

    if (first.kind !== 'claimed') throw new Error('unreachable');
    await expect(
      ledger.complete(s, first.ownerToken, { state: 'succeeded', result: { late: true } }),
    ).rejects.toMatchObject({ code: 'ownership_lost' });
    expect(await count('onceflow_ledger_ownership_lost_total')).toBe(1);
  });

  it('unknown outcome, then reconciliations by outcome', async () => {
    const s = scope(uniq('unk'));
    const lost = Object.assign(new Error('socket hang up'), { definite: false });
    await expect(
      ledger.runExternal(s, input({ n: 1 }), {
        perform: async () => {
          throw lost;
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toMatchObject({ code: 'outcome_unknown' });
    expect(await count('onceflow_ledger_unknown_outcomes_total', { reason: 'perform_error' })).toBe(1);

    // The provider doesn't know the key yet: still unknown, counted both ways.
    const notFound = await reconcileOnly(ledger, s, async () => ({ state: 'not_found' }));
    expect(notFound.state).toBe('unknown');
    expect(await count('onceflow_ledger_takeovers_total', { from_state: 'unknown' })).toBe(1);
    expect(await count('onceflow_ledger_reconciliations_total', { outcome: 'not_found' })).toBe(1);
    expect(await count('onceflow_ledger_unknown_outcomes_total', { reason: 'reconcile_not_found' })).toBe(1);

    // Now it does: settled from the provider's answer.
    const settled = await reconcileOnly(ledger, s, async () => ({
      state: 'succeeded',
      result: { chargeId: 'ch_1' },
      providerRef: 'ch_1',
    }));
    expect(settled.state).toBe('succeeded');
    expect(await count('onceflow_ledger_reconciliations_total', { outcome: 'succeeded' })).toBe(1);

    // A settlement from outside (webhook/operator) is a reconciliation too.
    const s2 = scope(uniq('unk'));
    await expect(
      ledger.runExternal(s2, input({ n: 1 }), {
        perform: async () => {
          throw lost;
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toBeInstanceOf(LedgerError);
    await ledger.settle(s2, { state: 'failed', result: { declined: true } });
    expect(await count('onceflow_ledger_reconciliations_total', { outcome: 'settled:failed' })).toBe(1);
    expect(await count('onceflow_ledger_unknown_outcomes_total', { reason: 'perform_error' })).toBe(2);
  });

  it('a definite failure releases the claim (aborted, not unknown)', async () => {
    const s = scope(uniq('rel'));
    await expect(
      ledger.runExternal(s, input({ n: 1 }), {
        perform: async () => {
          throw Object.assign(new Error('rejected'), { definite: true });
        },
        reconcile: async () => ({ state: 'not_found' }),
      }),
    ).rejects.toThrow('rejected');
    expect(await count('onceflow_ledger_aborted_total', { reason: 'released' })).toBe(1);
  });

  it('the text exposition names the series', async () => {
    const text = await metrics.registry.metrics();
    expect(text).toContain(`onceflow_ledger_claims_total{operation_type="${type}",mode="local"} 1`);
    expect(text).toContain('# TYPE onceflow_ledger_replays_total counter');
  });
});

describe('backlog gauges', () => {
  // A private schema with its own tables, so the counts are exactly ours while other files run.
  const schema = `metrics_${uniq('s').replace(/-/g, '_')}`;
  let scoped: Pool;
  let metrics: Metrics;

  beforeAll(async () => {
    await pool.query(`create schema ${schema}`);
    await pool.query(`create table ${schema}.operations (like public.operations including all)`);
    await pool.query(`create table ${schema}.orders (like public.orders including all)`);
    await pool.query(`create table ${schema}.workflow_outbox (like public.workflow_outbox including all)`);
    await pool.query(`create table ${schema}.refunds (like public.refunds including all)`);
    await pool.query(
      `create table ${schema}.webhook_deliveries (like public.webhook_deliveries including all)`,
    );
    scoped = createPool(testDatabaseUrl(), { max: 2, options: `-c search_path=${schema}` });
    metrics = createMetrics({ pool: scoped, defaultMetrics: false });
  });
  afterAll(async () => {
    await scoped?.end();
    await pool.query(`drop schema if exists ${schema} cascade`);
  });

  const gauge = (name: string, labels: Record<string, string> = {}) => sample(metrics.registry, name, labels);

  it('are zero on an empty database, and the database is up', async () => {
    await metrics.registry.metrics();
    expect(await gauge('onceflow_metrics_db_up')).toBe(1);
    expect(await gauge('onceflow_ledger_oldest_age_seconds', { state: 'unknown' })).toBe(0);
    expect(await gauge('onceflow_orders_in_status', { status: 'needs_attention' })).toBe(0);
    expect(await gauge('onceflow_outbox_unstarted_rows')).toBe(0);
    expect(await gauge('onceflow_outbox_oldest_unstarted_age_seconds')).toBe(0);
    expect(await gauge('onceflow_refunds_in_status', { status: 'refund_unknown' })).toBe(0);
    expect(await gauge('onceflow_webhook_deliveries_pending')).toBe(0);
    expect(await gauge('onceflow_webhook_oldest_pending_age_seconds')).toBe(0);
  });

  it('report the oldest in_progress and unknown ages, backlog counts and parked orders', async () => {
    const op = (key: string, state: string, ageSeconds: number) =>
      pool.query(
        `insert into ${schema}.operations (tenant_id, operation_type, key, fingerprint, schema_version, state,
           owner_token, lease_expires_at, created_at)
         values ('acme', 'payment.charge', $1, 'fp', 1, $2, $3, $4, now() - $5 * interval '1 second')`,
        [
          key,
          state,
          state === 'in_progress' ? 'tok' : null,
          state === 'in_progress' ? new Date() : null,
          ageSeconds,
        ],
      );
    await op('a', 'in_progress', 90);
    await op('b', 'in_progress', 30);
    await op('c', 'unknown', 3600);
    await op('d', 'unknown', 10);
    await op('e', 'unknown', 5);
    const order = (id: string, status: string) =>
      pool.query(
        `insert into ${schema}.orders (tenant_id, id, workflow_id, status, amount, currency, customer_id,
           customer_email, items, payment_method)
         values ('acme', $1, $2, $3, 100, 'usd', 'c', 'c@example.com', '[]', 'pm_card_visa')`,
        [id, `order/acme/${id}`, status],
      );
    await order('o1', 'needs_attention');
    await order('o2', 'needs_attention');
    await order('o3', 'payment_unknown');
    await order('o4', 'completed');
    const refund = (id: string, status: string) =>
      pool.query(
        `insert into ${schema}.refunds (tenant_id, id, order_id, workflow_id, amount, currency, status)
         values ('acme', $1, 'o4', $2, 10, 'usd', $3)`,
        [id, `refund/acme/${id}`, status],
      );
    await refund('r1', 'refund_unknown');
    await refund('r2', 'needs_attention');
    await refund('r3', 'needs_attention');
    await refund('r4', 'succeeded');
    await refund('r5', 'pending');

    // A scrape reuses the snapshot of the last second: wait until one shows the new rows.
    await until(
      'a metrics snapshot with the new orders',
      () => gauge('onceflow_orders_in_status', { status: 'needs_attention' }),
      { done: (n) => n === 2 },
    );
    const text = await metrics.registry.metrics();
    const inProgressAge = await gauge('onceflow_ledger_oldest_age_seconds', { state: 'in_progress' });
    const unknownAge = await gauge('onceflow_ledger_oldest_age_seconds', { state: 'unknown' });
    expect(inProgressAge).toBeGreaterThanOrEqual(90);
    expect(inProgressAge).toBeLessThan(100);
    expect(unknownAge).toBeGreaterThanOrEqual(3600);
    expect(unknownAge).toBeLessThan(3610);
    expect(await gauge('onceflow_ledger_unresolved_records', { state: 'in_progress' })).toBe(2);
    expect(await gauge('onceflow_ledger_unresolved_records', { state: 'unknown' })).toBe(3);
    expect(await gauge('onceflow_orders_in_status', { status: 'needs_attention' })).toBe(2);
    expect(await gauge('onceflow_orders_in_status', { status: 'payment_unknown' })).toBe(1);
    expect(text).toMatch(/onceflow_orders_in_status\{status="needs_attention"\} 2/);
    expect(await gauge('onceflow_refunds_in_status', { status: 'pending' })).toBe(1);
    expect(await gauge('onceflow_refunds_in_status', { status: 'refund_unknown' })).toBe(1);
    expect(await gauge('onceflow_refunds_in_status', { status: 'needs_attention' })).toBe(2);
  });

  it('read NaN (never a reassuring 0) when Postgres does not answer', async () => {
    const dead = createPool('postgres://postgres@127.0.0.1:1/none', { max: 1, connectionTimeoutMillis: 300 });
    try {
      const m = createMetrics({ pool: dead, defaultMetrics: false, queryTimeoutMs: 500 });
      await m.registry.metrics();
      expect(await sample(m.registry, 'onceflow_metrics_db_up')).toBe(0);
      expect(await sample(m.registry, 'onceflow_ledger_oldest_age_seconds', { state: 'unknown' })).toBeNaN();
      expect(await sample(m.registry, 'onceflow_orders_in_status', { status: 'needs_attention' })).toBeNaN();
    } finally {
      await dead.end();
    }
  });
});

describe('HTTP metrics (Fastify plugin)', () => {
  it('counts responses by route pattern, method and status, and serves nothing on the app', async () => {
    const metrics = createMetrics();
    const app = Fastify();
    await app.register(metricsPlugin({ metrics }));
    app.get('/things/:id', async (request, reply) =>
      (request.params as { id: string }).id === 'missing' ? reply.code(404).send({}) : { ok: true },
    );
    app.post('/things', async () => ({ ok: true }));
    try {
      await app.inject({ method: 'GET', url: '/things/1' });
      await app.inject({ method: 'GET', url: '/things/2?x=1' });
      await app.inject({ method: 'GET', url: '/things/missing' });
      await app.inject({ method: 'POST', url: '/things', payload: {} });
      await app.inject({ method: 'GET', url: '/nope/at/all' });

      const r = metrics.registry;
      expect(
        await sample(r, 'http_requests_total', { route: '/things/:id', method: 'GET', status: '200' }),
      ).toBe(2);
      expect(
        await sample(r, 'http_requests_total', { route: '/things/:id', method: 'GET', status: '404' }),
      ).toBe(1);
      expect(
        await sample(r, 'http_requests_total', { route: '/things', method: 'POST', status: '200' }),
      ).toBe(1);
      expect(
        await sample(r, 'http_requests_total', { route: 'unmatched', method: 'GET', status: '404' }),
      ).toBe(1);

      // The registry is scraped on a listener of its own (startMetricsServer), never on the app.
      expect((await app.inject({ method: 'GET', url: '/metrics' })).statusCode).toBe(404);
      const text = await r.metrics();
      expect(text).toContain(
        'http_request_duration_seconds_bucket{le="0.005",route="/things/:id",method="GET",status="200"}',
      );
      expect(text).toContain('process_cpu_user_seconds_total');
      expect(text).not.toContain('/things/2'); // raw URLs never become labels
    } finally {
      await app.close();
    }
  });
});

describe('metrics server', () => {
  it('serves the registry merged with other sources, and reports a source that is down', async () => {
    const metrics = createMetrics({ defaultMetrics: false });
    metrics.observeHttp({ route: '/x', method: 'GET', status: 200, durationMs: 3 });
    const source = http.createServer((_req, res) =>
      res.end('# TYPE temporal_fake_total counter\ntemporal_fake_total 3\n'),
    );
    await new Promise<void>((r) => source.listen(0, '127.0.0.1', () => r()));
    const addr = source.address();
    const sourceUrl = `http://127.0.0.1:${typeof addr === 'object' && addr ? addr.port : 0}/metrics`;
    const deadUrl = 'http://127.0.0.1:1/metrics';
    const server = await startMetricsServer({
      registry: metrics.registry,
      port: 0,
      merge: [sourceUrl, deadUrl],
    });
    try {
      const res = await fetch(server.url);
      expect(res.status).toBe(200);
      const body = await res.text();
      expect(body).toContain('http_requests_total{route="/x",method="GET",status="200"} 1');
      expect(body).toContain('temporal_fake_total 3');
      expect(body).toContain(`onceflow_metrics_source_up{source="${sourceUrl}"} 1`);
      expect(body).toContain(`onceflow_metrics_source_up{source="${deadUrl}"} 0`);
      expect((await fetch(server.url.replace('/metrics', '/other'))).status).toBe(404);

      // A second server on the same port fails with a message that names the setting.
      const clash = startMetricsServer({ registry: metrics.registry, port: server.port });
      await expect(clash).rejects.toBeInstanceOf(PortInUseError);
      await expect(clash).rejects.toThrow(/WORKER_METRICS_PORT/);
      const named = startMetricsServer({
        registry: metrics.registry,
        port: server.port,
        what: 'API metrics (API_METRICS_PORT)',
      });
      await expect(named).rejects.toThrow(/API_METRICS_PORT/);
    } finally {
      await server.close();
      await new Promise((r) => source.close(r));
    }
  });
});
