/**
 * The production install, outside Docker: a folder holding exactly what the
 * Dockerfile's `product` stage holds (its COPY lines are read from the
 * Dockerfile, so the two cannot drift), with `npm ci --omit=dev` run in it as
 * the image's `deps` stage runs it. From that folder, under NODE_ENV=production
 * and with no dev dependency, tsx or TypeScript source present, the image's
 * entry-point commands run as compose runs them: migrate.js on a new database,
 * the API (GET /healthz) and the worker (GET /readyz on its metrics port:
 * polling, Postgres answering) against the run's Temporal server.
 *
 * Not `npm pack`: the packed tarball is the core package (packages/onceflow),
 * which the image holds as a workspace; the app ships as the image.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, expect, inject, it } from 'vitest';
import { withDatabase } from '../../src/db/migrate.ts';
import { freePort } from '../../src/process/ports.ts';
import { dropDatabase } from '../support/database.ts';
import { temporalAddress, uniq } from '../support/env.ts';
import { buildCompiledApp } from '../support/build-app.ts';
import { until } from '../support/wait.ts';

const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '../..');
const install = fs.mkdtempSync(path.join(os.tmpdir(), 'onceflow-prod-'));
const dbName = uniq('prodinstall')
  .toLowerCase()
  .replace(/[^a-z0-9_]/g, '_');
const dbUrl = withDatabase(inject('postgresUrl'), dbName);
const children: ChildProcess[] = [];

/** The product stage's COPY lines: [source, destination], `--from=<stage>` sources taken from the build here. */
function productCopies(): [string, string][] {
  const lines = fs.readFileSync(path.join(root, 'Dockerfile'), 'utf8').split('\n');
  const start = lines.findIndex((l) => /^FROM \S+ AS product\b/.test(l));
  const end = lines.findIndex((l, i) => i > start && l.startsWith('FROM '));
  return lines
    .slice(start, end)
    .filter((l) => l.startsWith('COPY '))
    .map(
      (l) =>
        l
          .replace(/^COPY (--from=\S+ )?/, '')
          .trim()
          .split(/\s+/) as [string, string],
    )
    .map(([src, dest]) => [src.replace(/^\/app\//, ''), dest]);
}

beforeAll(async () => {
  // The core package's dist/ is built once by the global setup, as the image's build stage does first.
  await buildCompiledApp(root);
  // The deps stage: package.json, the lockfile and the core package's manifest (a workspace), then the
  // production dependencies alone.
  fs.mkdirSync(path.join(install, 'packages/onceflow'), { recursive: true });
  for (const f of ['package.json', 'package-lock.json', 'packages/onceflow/package.json'])
    fs.copyFileSync(path.join(root, f), path.join(install, f));
  await run('npm', ['ci', '--omit=dev', '--no-audit', '--no-fund', '--prefer-offline'], {
    cwd: install,
    timeout: 600_000,
  });
  for (const [src, dest] of productCopies()) {
    if (src === 'node_modules' || src.endsWith('package.json')) continue; // installed above
    fs.cpSync(path.join(root, src), path.join(install, dest), { recursive: true });
  }
}, 900_000);

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  fs.rmSync(install, { recursive: true, force: true });
  await dropDatabase(inject('postgresUrl'), dbName).catch(() => undefined);
});

function start(file: string, env: Record<string, string>): { child: ChildProcess; output: () => string } {
  const child = spawn(process.execPath, [file], {
    cwd: install,
    env: {
      PATH: process.env.PATH ?? '',
      HOME: process.env.HOME ?? '',
      NODE_ENV: 'production',
      DATABASE_URL: dbUrl,
      TEMPORAL_ADDRESS: temporalAddress(),
      WEBHOOK_SECRET: randomBytes(32).toString('hex'),
      ONCEFLOW_ADMIN_TOKEN: randomBytes(32).toString('hex'),
      API_KEY_SECRET: randomBytes(32).toString('hex'),
      LOG_LEVEL: 'info',
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(child);
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  return { child, output: () => out };
}

const exited = (c: ChildProcess) =>
  new Promise<number | null>((resolve) =>
    c.exitCode !== null ? resolve(c.exitCode) : c.once('exit', (code) => resolve(code)),
  );

async function answers(url: string): Promise<{ status: number; body: unknown } | undefined> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2_000) });
    return { status: res.status, body: await res.json() };
  } catch {
    return undefined;
  }
}

it('holds only what ships: production dependencies, no tsx/TypeScript/vitest, no sources', () => {
  expect(fs.existsSync(path.join(install, 'node_modules/@temporalio/worker'))).toBe(true);
  for (const dev of ['typescript', 'vitest', 'eslint'])
    expect(fs.existsSync(path.join(install, 'node_modules', dev)), dev).toBe(false);
  for (const source of ['src', 'dev', 'test', 'workflows'])
    expect(fs.existsSync(path.join(install, source)), source).toBe(false);
  expect(fs.existsSync(path.join(install, 'dist/app/src/worker/main.js'))).toBe(true);
});

it('bin/onceflow.js runs the compiled command lines (no tsx, no sources)', async () => {
  for (const command of ['ops', 'api-key']) {
    const r = await run(process.execPath, ['bin/onceflow.js', command, '--help'], {
      cwd: install,
      env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', NODE_ENV: 'production' },
    });
    expect(r.stdout, command).toMatch(new RegExp(`^Usage: ${command} `));
  }
});

it('migrate.js, then the API answers /healthz and the worker /readyz, from the production install', async () => {
  const migrate = start('dist/app/src/cli/migrate.js', {});
  expect(await exited(migrate.child), migrate.output()).toBe(0);

  const apiPort = await freePort();
  const api = start('dist/app/src/api/main.js', {
    API_PORT: String(apiPort),
    API_METRICS_PORT: String(await freePort()),
  });
  const metricsPort = await freePort();
  const worker = start('dist/app/src/worker/main.js', {
    TEMPORAL_TASK_QUEUE: uniq('prod-install'),
    WORKER_METRICS_PORT: String(metricsPort),
    WORKER_SDK_METRICS_PORT: String(await freePort()),
  });
  const alive = (p: { child: ChildProcess; output: () => string }, what: string) => {
    if (p.child.exitCode !== null) throw new Error(`${what} exited ${p.child.exitCode}:\n${p.output()}`);
  };

  await until(
    'the API answers /healthz',
    async () => {
      alive(api, 'the API');
      return (await answers(`http://127.0.0.1:${apiPort}/healthz`))?.status === 200;
    },
    { timeoutMs: 90_000 },
  );
  // The operator console's files ship too (COPY console), served by the API.
  const page = await fetch(`http://127.0.0.1:${apiPort}/console/app.js`);
  expect(page.status).toBe(200);
  expect(await page.text()).toContain('/admin/attention');
  await until(
    'the worker is ready',
    async () => {
      alive(worker, 'the worker');
      return (await answers(`http://127.0.0.1:${metricsPort}/readyz`))?.status === 200;
    },
    { timeoutMs: 120_000 },
  );
  expect(await answers(`http://127.0.0.1:${metricsPort}/readyz`)).toEqual({
    status: 200,
    body: { status: 'ready', checks: { worker: 'polling', postgres: 'ok' } },
  });

  for (const p of [api, worker]) p.child.kill('SIGTERM');
  expect(await exited(api.child), api.output()).toBe(0);
  expect(await exited(worker.child), worker.output()).toBe(0);
});
