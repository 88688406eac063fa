/**
 * The real API process (`node --import tsx src/api/main.ts`): SIGKILL after
 * the order committed and before its workflow started; after a restart the
 * workflow is started exactly once. Also: graceful SIGTERM, and a clear
 * failure when the port is taken.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import {
  ownDatabase,
  temporalAddress,
  temporalClient,
  testDatabaseUrl,
  testPool,
  uniq,
} from '../support/env.ts';
import { killAll, spawnEntry, waitHttpOk, waitOutput, type Proc } from '../support/processes.ts';
import { call, newTenant, validOrder } from './support.ts';

const spawnApi = (env: Record<string, string>): Proc => spawnEntry('api', 'src/api/main.ts', env);
const waitHealthy = (url: string, proc: Proc) => waitHttpOk(`${url}/healthz`, proc);

describe('API process: crash between commit and workflow start', () => {
  let pool: Pool;
  let client: Client;
  let closeClient: () => Promise<void>;
  const procs: Proc[] = [];
  // Its own database: the API's relay starts every due row of its database.
  let db: Awaited<ReturnType<typeof ownDatabase>>;

  beforeAll(async () => {
    db = await ownDatabase('apiproc');
    pool = testPool(3, db.url);
    ({ client, close: closeClient } = await temporalClient());
  });
  afterAll(async () => {
    killAll(procs);
    await Promise.all(procs.map((p) => p.exited));
    await closeClient?.();
    await pool?.end();
    await db?.drop();
  });

  it('SIGKILL after commit, before start: after a restart the workflow is started exactly once', async () => {
    const t = await newTenant(pool, 'kill');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = {
      DATABASE_URL: db.url,
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: uniq('api-process'),
      API_PORT: String(port),
      API_METRICS_PORT: String(await freePort()),
      OUTBOX_POLL_MS: '200',
      LOG_LEVEL: 'info',
    };

    // 1. An API that commits orders but never starts workflows: the state right after commit.
    const first = spawnApi({ ...env, OUTBOX_RELAY: 'off' });
    procs.push(first);
    await waitHealthy(url, first);
    const idem = uniq('idem');
    const created = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
    expect(created.status).toBe(202);
    const { id, workflowId } = created.body as { id: string; workflowId: string };
    first.child.kill('SIGKILL');
    expect((await first.exited).signal).toBe('SIGKILL');

    const { rows } = await pool.query('select started_at from workflow_outbox where workflow_id = $1', [
      workflowId,
    ]);
    expect(rows).toEqual([{ started_at: null }]);
    await expect(client.workflow.getHandle(workflowId).describe()).rejects.toBeInstanceOf(
      WorkflowNotFoundError,
    );

    // 2. Restart normally: the relay finds the intent and starts the workflow.
    const second = spawnApi({ ...env });
    procs.push(second);
    await waitHealthy(url, second);
    await expect
      .poll(
        async () =>
          (await pool.query('select started_at from workflow_outbox where workflow_id = $1', [workflowId]))
            .rows[0]?.started_at,
        { timeout: 20_000 },
      )
      .toBeInstanceOf(Date);
    const desc = await client.workflow.getHandle(workflowId).describe();
    expect(desc.type).toBe('orderWorkflow');
    expect(desc.taskQueue).toBe(env.TEMPORAL_TASK_QUEUE);

    // The client's retry after the crash is a replay of the same order, not a second one.
    const retry = await call({ url }, 'POST', '/v1/orders', { key: t.key, idem, body: validOrder() });
    expect(retry.status).toBe(202);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    expect(retry.text).toBe(created.text);
    const count = await pool.query('select count(*)::int as n from orders where tenant_id = $1', [
      t.tenantId,
    ]);
    expect(count.rows[0].n).toBe(1);
    await expect
      .poll(async () => {
        let n = 0;
        for await (const _ of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) n++;
        return n;
      })
      .toBe(1);
    const got = await call({ url }, 'GET', `/v1/orders/${id}`, { key: t.key });
    expect(got.status).toBe(200);

    // 3. A second copy on the same port fails fast with a clear message.
    // (Its own metrics port: the clash under test is the API port's.)
    const clash = spawnApi({ ...env, API_METRICS_PORT: String(await freePort()) });
    procs.push(clash);
    const clashExit = await clash.exited;
    expect(clashExit.code).toBe(1);
    expect(clash.output()).toMatch(/Port \d+ \(API \(API_PORT\)\) is already in use/);

    // 4. SIGTERM closes everything and exits 0.
    second.child.kill('SIGTERM');
    expect(await second.exited).toEqual({ code: 0, signal: null });
    expect(second.output()).toMatch(/api stopped/);
    // Three API processes start in this test; on a loaded 2-core machine each can take 30 s.
  }, 240_000);
});

describe('API process: metrics on their own listener', () => {
  const procs: Proc[] = [];
  afterAll(async () => {
    killAll(procs);
    await Promise.all(procs.map((p) => p.exited));
  });

  it('/metrics is 404 on the API port and served on API_METRICS_PORT, bound to loopback', async () => {
    const port = await freePort();
    const metricsPort = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const api = spawnApi({
      DATABASE_URL: testDatabaseUrl(),
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: uniq('api-metrics'),
      API_PORT: String(port),
      API_METRICS_PORT: String(metricsPort),
      OUTBOX_RELAY: 'off',
      LOG_LEVEL: 'info',
    });
    procs.push(api);
    await waitHealthy(url, api);

    const onApiPort = await fetch(`${url}/metrics`);
    expect(onApiPort.status).toBe(404);
    expect(onApiPort.headers.get('content-type')).toMatch(/^application\/problem\+json/);

    const scraped = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(scraped.status).toBe(200);
    const text = await scraped.text();
    // The API's own series: its responses (the 404 above included) and its database gauges.
    expect(text).toMatch(
      /http_requests_total\{route="unmatched",method="GET",status="404",service="api"\} 1/,
    );
    expect(text).toMatch(/onceflow_metrics_db_up\{service="api"\} 1/);
    expect(api.output()).toMatch(new RegExp(`"metrics":"http://127\\.0\\.0\\.1:${metricsPort}/metrics"`));
    api.child.kill('SIGTERM');
    expect(await api.exited).toEqual({ code: 0, signal: null });
  }, 120_000);

  it('under API_PROCESSES=2 the cluster primary serves every process in one scrape', async () => {
    const port = await freePort();
    const metricsPort = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const primary = spawnEntry('api-cluster', 'src/api/cluster.ts', {
      DATABASE_URL: testDatabaseUrl(),
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: uniq('api-cluster-metrics'),
      API_PORT: String(port),
      API_METRICS_PORT: String(metricsPort),
      API_PROCESSES: '2',
      OUTBOX_RELAY: 'off',
      LOG_LEVEL: 'info',
    });
    procs.push(primary);
    // Two API processes start at once on a shared 2-core machine.
    await waitOutput(primary, /api processes listening/, 120_000);
    expect((await fetch(`${url}/metrics`)).status).toBe(404);
    const scraped = await fetch(`http://127.0.0.1:${metricsPort}/metrics`);
    expect(scraped.status).toBe(200);
    const text = await scraped.text();
    for (const name of ['api-1', 'api-2']) {
      expect(text).toContain(`onceflow_metrics_source_up{source="${name}",service="api"} 1`);
      expect(text).toContain(`process_resident_memory_bytes{service="api",process="${name}"}`);
    }
    // The backlog gauges are facts about the database: api-1 alone exports them (METRICS_BACKLOG).
    expect(text).toContain('onceflow_metrics_db_up{service="api",process="api-1"} 1');
    expect(text.match(/^onceflow_metrics_db_up\{/gm)).toHaveLength(1);
    expect(text.match(/^onceflow_orders_in_status\{status="needs_attention"/gm)).toHaveLength(1);
    // One exposition: each metric's TYPE line once, whatever the number of processes.
    expect(text.match(/^# TYPE process_resident_memory_bytes /gm)).toHaveLength(1);
    primary.child.kill('SIGTERM');
    expect(await primary.exited).toEqual({ code: 0, signal: null });
  }, 180_000);
});
