/**
 * The image's entry points (Dockerfile) are files that run here too: this
 * builds the compiled JavaScript the way the image does (`npm run build:app`,
 * then the workflow bundle from the compiled workflows) and starts each entry
 * point with plain `node`, no tsx, against a throwaway database and the run's
 * Temporal server: the migrations apply, the API answers /healthz (alone and
 * as a cluster), and the worker finds the prebuilt bundle and polls.
 */
import fs from 'node:fs';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { inject } from 'vitest';
import { freePort } from '../../src/process/ports.ts';
import { MIGRATIONS_DIR, withDatabase } from '../../src/db/migrate.ts';
import { cloneName, dropDatabase } from '../support/database.ts';
import { ownDatabase, temporalAddress, temporalClient, uniq } from '../support/env.ts';
import { killAll, spawnNode, waitHttpOk, waitOutput, type Proc } from '../support/processes.ts';
import { buildCompiledApp } from '../support/build-app.ts';
import { until } from '../support/wait.ts';

const root = path.resolve(import.meta.dirname, '../..');
const compiled = (file: string) => path.join(root, 'dist/app', file);

const procs: Proc[] = [];
let db: Awaited<ReturnType<typeof ownDatabase>>;
const fresh = cloneName(inject('databaseTemplate'), 'compiled');

beforeAll(async () => {
  // As the Dockerfile does: the bundle from the compiled workflows, where workers look for it.
  await buildCompiledApp(root);
  db = await ownDatabase('compiled');
});

afterAll(async () => {
  killAll(procs);
  await Promise.all(procs.map((p) => p.exited));
  await db?.drop();
  await dropDatabase(inject('postgresUrl'), fresh);
});

function start(name: string, file: string, env: Record<string, string>): Proc {
  const proc = spawnNode(name, [compiled(file)], {
    DATABASE_URL: db.url,
    TEMPORAL_ADDRESS: temporalAddress(),
    LOG_LEVEL: 'info',
    ...env,
  });
  procs.push(proc);
  return proc;
}

it('builds JavaScript only: no TypeScript source is needed to run dist/app', () => {
  for (const file of ['src/api/main.js', 'src/api/cluster.js', 'src/worker/main.js', 'src/cli/migrate.js']) {
    const text = fs.readFileSync(compiled(file), 'utf8');
    // Every relative import points at a .js file of the build.
    for (const [, spec] of text.matchAll(/from '(\.[^']+)'/g)) expect(spec, file).toMatch(/\.js$/);
  }
});

it('migrate.js applies the migrations to a new database', async () => {
  const url = withDatabase(inject('postgresUrl'), fresh);
  const proc = spawnNode('migrate', [compiled('src/cli/migrate.js'), '--json'], { DATABASE_URL: url });
  procs.push(proc);
  expect(await proc.exited).toEqual({ code: 0, signal: null });
  const result = JSON.parse(proc.output().trim().split('\n').at(-1)!) as { applied: string[] };
  const files = fs
    .readdirSync(MIGRATIONS_DIR)
    // SQL migrations, and JavaScript ones (an index built CONCURRENTLY runs outside a transaction).
    .filter((f) => /^\d{4}_.*\.(sql|js)$/.test(f))
    .map((f) => f.replace(/\.(sql|js)$/, ''))
    .sort();
  expect(result.applied).toEqual(files);
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    expect((await client.query(`select to_regclass('orders') as t`)).rows).toEqual([{ t: 'orders' }]);
  } finally {
    await client.end();
  }
});

it('the API (main.js, and cluster.js with two processes) answers /healthz and stops on SIGTERM', async () => {
  for (const [file, extra] of [
    ['src/api/main.js', {}],
    ['src/api/cluster.js', { API_PROCESSES: '2' }],
  ] as const) {
    const port = await freePort();
    const api = start('api', file, {
      API_PORT: String(port),
      API_METRICS_PORT: String(await freePort()),
      ...extra,
    });
    await waitHttpOk(`http://127.0.0.1:${port}/healthz`, api);
    if (file.endsWith('cluster.js')) await waitOutput(api, /"msg":"api processes listening"/);
    api.child.kill('SIGTERM');
    expect(await api.exited, file).toEqual({ code: 0, signal: null });
  }
});

it('the worker (main.js) uses the prebuilt bundle, polls its task queue, and says so on /readyz', async () => {
  const taskQueue = uniq('compiled-worker');
  const metricsPort = await freePort();
  const worker = start('worker', 'src/worker/main.js', {
    TEMPORAL_TASK_QUEUE: taskQueue,
    WORKER_METRICS_PORT: String(metricsPort),
    WORKER_SDK_METRICS_PORT: String(await freePort()),
  });
  await waitOutput(worker, /"msg":"worker started"/, 120_000);
  // Found by the hash of the compiled workflows: the worker did not bundle them itself.
  expect(worker.output()).not.toMatch(/workflow code changed or never bundled/);
  const { client, close } = await temporalClient();
  try {
    await until('a workflow poller on the task queue', async () => {
      const res = await client.workflowService.describeTaskQueue({
        namespace: 'default',
        taskQueue: { name: taskQueue },
        taskQueueType: 1, // TASK_QUEUE_TYPE_WORKFLOW
      });
      return (res.pollers ?? []).length > 0;
    });
  } finally {
    await close();
  }
  // The health endpoints compose probes (docker-compose.yml), on the metrics port.
  const health = await fetch(`http://127.0.0.1:${metricsPort}/healthz`);
  expect(health.status).toBe(200);
  expect(await health.json()).toEqual({ status: 'ok' });
  const ready = await fetch(`http://127.0.0.1:${metricsPort}/readyz`);
  expect(await ready.json()).toEqual({ status: 'ready', checks: { worker: 'polling', postgres: 'ok' } });
  expect(ready.status).toBe(200);
  worker.child.kill('SIGTERM');
  expect(await worker.exited).toEqual({ code: 0, signal: null });
});
