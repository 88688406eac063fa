/**
 * The real processes (sandbox, worker, API: their `main.ts` entry points) on
 * a database of this file's own, while Postgres drops every one of their
 * connections (pg_terminate_backend, as a Postgres restart does) again and
 * again under order traffic. None of them may exit; the API answers 5xx while
 * its requests fail and serves 2xx again afterwards, with no restart; every
 * accepted order's workflow is started.
 */
import { afterAll, beforeAll, expect, it } from 'vitest';
import type { Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import {
  ownDatabase,
  temporalAddress,
  terminateConnections,
  testPool,
  uniq,
  workflowBundlePath,
} from '../support/env.ts';
import { killAll, spawnEntry, waitHttpOk, waitOutput, type Proc } from '../support/processes.ts';
import { call, newTenant, validOrder } from '../api/support.ts';

let db: Awaited<ReturnType<typeof ownDatabase>>;
let pool: Pool;
const procs: Proc[] = [];
let api: { url: string };
let t: { tenantId: string; key: string };

beforeAll(async () => {
  db = await ownDatabase('pgdrop');
  pool = testPool(2, db.url);
  t = await newTenant(pool, 'drop');
  const [apiPort, sandboxPort, metricsPort, sdkMetricsPort] = [
    await freePort(),
    await freePort(),
    await freePort(),
    await freePort(),
  ];
  const env = {
    DATABASE_URL: db.url,
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: uniq('pgdrop'),
    WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
    API_PORT: String(apiPort),
    API_METRICS_PORT: String(await freePort()),
    SANDBOX_PORT: String(sandboxPort),
    WORKER_METRICS_PORT: String(metricsPort),
    WORKER_SDK_METRICS_PORT: String(sdkMetricsPort),
    OUTBOX_POLL_MS: '200',
    LOG_LEVEL: 'info',
  };
  const sandbox = spawnEntry('sandbox', 'dev/sandbox/main.ts', env);
  procs.push(sandbox);
  await waitHttpOk(`http://127.0.0.1:${sandboxPort}/healthz`, sandbox);
  const worker = spawnEntry('worker', 'src/worker/main.ts', env);
  procs.push(worker);
  await waitOutput(worker, /worker started/);
  const apiProc = spawnEntry('api', 'src/api/main.ts', env);
  procs.push(apiProc);
  api = { url: `http://127.0.0.1:${apiPort}` };
  await waitHttpOk(`${api.url}/healthz`, apiProc);
});

afterAll(async () => {
  killAll(procs);
  await Promise.all(procs.map((p) => p.exited));
  await pool?.end();
  await db?.drop();
});

it('sandbox, worker and API survive repeated connection drops under load, and the API serves again', async () => {
  let faulting = true;
  const accepted: string[] = [];
  const statuses = new Map<number, number>();
  // Clients send orders back to back while the faults run; each keeps its own stream.
  const client = async () => {
    while (faulting) {
      try {
        const res = await call(api, 'POST', '/v1/orders', {
          key: t.key,
          idem: uniq('idem'),
          body: validOrder(),
        });
        statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
        if (res.status === 202) accepted.push((res.body as { workflowId: string }).workflowId);
      } catch {
        statuses.set(0, (statuses.get(0) ?? 0) + 1); // connection refused/reset: the API may be dying
        await new Promise((r) => setTimeout(r, 50)); // pace this client while the API restarts its pool
      }
    }
  };
  const clients = Array.from({ length: 4 }, () => client());
  let terminated = 0;
  for (let round = 0; round < 12; round++) {
    // The fault itself: drop every connection every 250 ms while the clients keep sending.
    await new Promise((r) => setTimeout(r, 250));
    terminated += await terminateConnections(db.name);
  }
  faulting = false;
  await Promise.all(clients);
  expect(terminated).toBeGreaterThan(12);

  // No process exited on its own.
  for (const p of procs) expect(p.alive(), `${p.name} exited:\n${p.output()}`).toBe(true);
  expect(statuses.get(0) ?? 0).toBe(0); // the API never stopped answering HTTP

  // The same API process serves 2xx again, and reports itself ready.
  await expect
    .poll(
      async () =>
        (await call(api, 'POST', '/v1/orders', { key: t.key, idem: uniq('idem'), body: validOrder() }))
          .status,
      { timeout: 60_000, interval: 250 },
    )
    .toBe(202);
  await expect.poll(async () => (await fetch(`${api.url}/readyz`)).status, { timeout: 60_000 }).toBe(200);

  // Every accepted order's workflow gets started (the relay came back on its own).
  expect(accepted.length).toBeGreaterThan(0);
  await expect
    .poll(
      async () =>
        (
          await pool.query<{ n: number }>(
            'select count(*)::int as n from workflow_outbox where workflow_id = any($1) and started_at is null',
            [accepted],
          )
        ).rows[0]!.n,
      { timeout: 60_000, interval: 500 },
    )
    .toBe(0);
  for (const p of procs) expect(p.alive(), `${p.name} exited:\n${p.output()}`).toBe(true);
});
