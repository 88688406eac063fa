/**
 * The worker's /healthz and /readyz (src/worker/health.ts on the metrics
 * listener), against real Postgres servers: readiness needs the worker
 * polling and Postgres answering, and says which check failed; /healthz
 * answers whatever the dependencies do. The compiled worker's own endpoints
 * are checked in test/deploy/compiled-entrypoints.test.ts.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { createPool } from '../../src/db/index.ts';
import { startMetricsServer, type MetricsServer } from '../../src/metrics/server.ts';
import { workerReadiness } from '../../src/worker/health.ts';
import { testPool } from '../support/env.ts';
import { freePort } from '../../src/process/ports.ts';

type State = 'INITIALIZED' | 'RUNNING' | 'STOPPING' | 'DRAINING' | 'DRAINED' | 'STOPPED' | 'FAILED';
const servers: MetricsServer[] = [];
const pools: { end(): Promise<void> }[] = [];
afterAll(async () => {
  for (const s of servers) await s.close();
  for (const p of pools) await p.end();
});

async function serve(readiness: Parameters<typeof startMetricsServer>[0]['readiness']): Promise<string> {
  const server = await startMetricsServer({ registry: new Registry(), port: 0, readiness });
  servers.push(server);
  return server.url.replace(/\/metrics$/, '');
}

describe('worker health endpoints', () => {
  it('/readyz follows the worker state, with Postgres up', async () => {
    const pool = testPool(1);
    pools.push(pool);
    let state: State | undefined;
    const base = await serve(
      workerReadiness({ worker: () => (state ? { getState: () => state! } : undefined), pool }),
    );

    const starting = await fetch(`${base}/readyz`);
    expect(starting.status).toBe(503);
    expect(await starting.json()).toEqual({
      status: 'not_ready',
      checks: { worker: 'starting', postgres: 'ok' },
    });

    state = 'RUNNING';
    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', checks: { worker: 'polling', postgres: 'ok' } });

    state = 'DRAINING';
    expect((await fetch(`${base}/readyz`)).status).toBe(503);
  });

  it('/readyz is 503 naming Postgres when it does not answer; /healthz stays 200', async () => {
    const dead = createPool(`postgres://postgres@127.0.0.1:${await freePort()}/none`, { max: 1 });
    pools.push(dead);
    const base = await serve(workerReadiness({ worker: () => ({ getState: () => 'RUNNING' }), pool: dead }));
    const r = await fetch(`${base}/readyz`);
    expect(r.status).toBe(503);
    const body = (await r.json()) as { checks: { worker: string; postgres: string } };
    expect(body.checks.worker).toBe('polling');
    expect(body.checks.postgres).toMatch(/ECONNREFUSED|connect/);
    const h = await fetch(`${base}/healthz`);
    expect(h.status).toBe(200);
    expect(await h.json()).toEqual({ status: 'ok' });
  });
});
