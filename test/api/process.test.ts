/**
 * The real API process (`node --import tsx src/api/main.ts`): SIGKILL after
 * the order committed and before its workflow started; after a restart the
 * workflow is started exactly once. Also: graceful SIGTERM, and a clear
 * failure when the port is taken.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WorkflowNotFoundError, type Client } from '@temporalio/client';
import type { Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/devserver/ports.ts';
import { databaseUrl, temporalAddress, temporalClient, testPool, uniq } from '../support/env.ts';
import { call, newTenant, validOrder } from './support.ts';

const root = path.resolve(import.meta.dirname, '../..');

interface Proc {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

function spawnApi(env: Record<string, string>): Proc {
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'src/api/main.ts')], {
    cwd: root,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.once('exit', (code, signal) => resolve({ code, signal })),
  );
  return { child, output: () => out, exited };
}

async function waitHealthy(url: string, proc: Proc, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (proc.child.exitCode !== null) throw new Error(`api exited during startup:\n${proc.output()}`);
    try {
      if ((await fetch(`${url}/healthz`)).ok) return;
    } catch {
      // not listening yet
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`api did not become healthy:\n${proc.output()}`);
}

describe('API process: crash between commit and workflow start', () => {
  let pool: Pool;
  let client: Client;
  let closeClient: () => Promise<void>;
  const procs: Proc[] = [];

  beforeAll(async () => {
    pool = testPool(3);
    ({ client, close: closeClient } = await temporalClient());
  });
  afterAll(async () => {
    for (const p of procs)
      if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill('SIGKILL');
    await closeClient?.();
    await pool?.end();
  });

  it('SIGKILL after commit, before start: after a restart the workflow is started exactly once', async () => {
    const t = await newTenant(pool, 'kill');
    const port = await freePort();
    const url = `http://127.0.0.1:${port}`;
    const env = {
      DATABASE_URL: databaseUrl(),
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: uniq('api-process'),
      API_PORT: String(port),
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
    const clash = spawnApi({ ...env });
    procs.push(clash);
    const clashExit = await clash.exited;
    expect(clashExit.code).toBe(1);
    expect(clash.output()).toMatch(/Port \d+ \(API \(API_PORT\)\) is already in use/);

    // 4. SIGTERM closes everything and exits 0.
    second.child.kill('SIGTERM');
    expect(await second.exited).toEqual({ code: 0, signal: null });
    expect(second.output()).toMatch(/api stopped/);
  });
});
