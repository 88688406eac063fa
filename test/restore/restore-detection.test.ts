/**
 * Restore detection (src/restore/gate.ts) tells a restored database from a
 * different one, by the identity each database carries (migration 0026) and
 * writes into the memo of every workflow it starts (src/api/outbox.ts).
 *
 * Issue 44: a new database beside a Temporal server that still held an
 * earlier database's order workflows was taken for a restored one; the
 * workers closed the gate and never polled, and a worker stopped while it
 * waited failed to close its Temporal connection. Here the real worker
 * process meets both cases, and the detection rule meets workflows started
 * by a build before the identity existed (no identity in their memo).
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Client } from '@temporalio/client';
import { waitForHttp } from '../../dev/wait.ts';
import { migrate } from '../../src/db/migrate.ts';
import type { Pool } from '../../src/db/index.ts';
import { freePort } from '../../src/process/ports.ts';
import { detectRestore } from '../../src/restore/gate.ts';
import { databaseMemo, readDatabaseIdentity } from '../../src/restore/memo.ts';
import { selectDatabaseIdentity, selectPendingRecovery } from '../../src/restore/sql.ts';
import {
  emptyDatabase,
  ownDatabase,
  temporalAddress,
  temporalClient,
  testPool,
  uniq,
  workflowBundlePath,
} from '../support/env.ts';
import { killAll, spawnEntry, waitHttpOk, type Proc } from '../support/processes.ts';
import { until } from '../support/wait.ts';
import { call, newTenant, startApi, validOrder } from '../api/support.ts';

const ORDER_WORKFLOW = 'orderWorkflow';
let temporal: { client: Client; close: () => Promise<void> };
const procs: Proc[] = [];
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  temporal = await temporalClient();
});

afterAll(async () => {
  killAll(procs);
  await Promise.all(procs.map((p) => p.exited));
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  await temporal?.close();
});

function listQuery(taskQueue: string): string {
  return `WorkflowType = '${ORDER_WORKFLOW}' AND TaskQueue = '${taskQueue}'`;
}

/** Waits until Temporal's visibility lists `n` order workflows on `taskQueue`; returns their IDs. */
async function listedOrders(taskQueue: string, n: number): Promise<string[]> {
  return until(
    `${n} order workflows listed on ${taskQueue}`,
    async () => {
      const ids: string[] = [];
      for await (const wf of temporal.client.workflow.list({ query: listQuery(taskQueue) }))
        ids.push(wf.workflowId);
      return ids;
    },
    { done: (ids) => ids.length >= n },
  );
}

/**
 * Orders accepted by a real API on `databaseUrl` (its relay starts their workflows on `taskQueue`),
 * then terminated: no worker of these tests should run them, and Temporal still lists them.
 */
async function ordersOf(databaseUrl: string, taskQueue: string, n: number): Promise<string[]> {
  const api = await startApi({ env: { DATABASE_URL: databaseUrl, TEMPORAL_TASK_QUEUE: taskQueue } });
  try {
    const tenant = await newTenant(api.pool, 'rd');
    for (let i = 0; i < n; i++) {
      const res = await call(api, 'POST', '/v1/orders', {
        key: tenant.key,
        idem: uniq('rd'),
        body: validOrder(),
      });
      expect(res.status).toBe(202);
    }
  } finally {
    await api.close();
  }
  const ids = await listedOrders(taskQueue, n);
  for (const id of ids) await temporal.client.workflow.getHandle(id).terminate('test: never to run');
  return ids;
}

async function identityOf(databaseUrl: string): Promise<string | null> {
  const pool = testPool(1, databaseUrl);
  try {
    return await selectDatabaseIdentity(pool);
  } finally {
    await pool.end();
  }
}

/** The real worker process on `databaseUrl` and `taskQueue`; its /readyz URL. */
async function spawnWorker(databaseUrl: string, taskQueue: string): Promise<{ proc: Proc; readyz: string }> {
  const metricsPort = await freePort();
  const proc = spawnEntry('worker', 'src/worker/main.ts', {
    DATABASE_URL: databaseUrl,
    TEMPORAL_ADDRESS: temporalAddress(),
    TEMPORAL_TASK_QUEUE: taskQueue,
    WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
    WORKER_METRICS_PORT: String(metricsPort),
    WORKER_SDK_METRICS_PORT: String(await freePort()),
    // debug: each resource's "closed" line.
    LOG_LEVEL: 'debug',
  });
  procs.push(proc);
  return { proc, readyz: `http://127.0.0.1:${metricsPort}/readyz` };
}

type Line = { msg: string; level: string; [field: string]: unknown };

function jsonLines(proc: Proc): Line[] {
  return proc
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Line);
}

/** SIGTERM, then what a clean stop looks like: exit 0, every resource closed, the connection too. */
async function expectCleanStop(proc: Proc): Promise<void> {
  proc.child.kill('SIGTERM');
  const { code } = await proc.exited;
  expect(proc.output()).not.toMatch(/Cannot close connection/);
  const lines = jsonLines(proc);
  expect(lines.filter((l) => l.msg === 'close failed')).toEqual([]);
  expect(lines.filter((l) => l.msg === 'closed').map((l) => l.resource)).toContain(
    'temporal worker connection',
  );
  expect(code).toBe(0);
}

describe('restore detection', () => {
  it("a new database beside an earlier database's order workflows: the worker polls, and the log names the shared namespace and task queue", async () => {
    const taskQueue = uniq('rd-shared');
    // The earlier database: its API's relay writes its identity into each workflow's memo.
    const earlier = await ownDatabase('rd-earlier');
    cleanups.push(earlier.drop);
    const earlierId = await identityOf(earlier.url);
    expect(earlierId).toMatch(/^[0-9a-f-]{36}$/);
    const ids = await ordersOf(earlier.url, taskQueue, 3);
    const described = await temporal.client.workflow.getHandle(ids[0]!).describe();
    expect(readDatabaseIdentity(described.memo)).toBe(earlierId);
    // ...then dropped; a new one is created and migrated, as `npm start` does on an empty server.
    await earlier.drop();
    const fresh = await emptyDatabase('rd-fresh');
    cleanups.push(fresh.drop);
    await migrate(fresh.url);
    const freshId = await identityOf(fresh.url);
    expect(freshId).toMatch(/^[0-9a-f-]{36}$/);
    expect(freshId).not.toBe(earlierId);

    const { proc, readyz } = await spawnWorker(fresh.url, taskQueue);
    // Ready: the gate stayed open, the worker polls.
    await waitHttpOk(readyz, proc, 60_000);
    const warning = jsonLines(proc).find((l) => /another database's order workflows/.test(l.msg));
    expect(warning).toMatchObject({ level: 'warn', namespace: 'default', taskQueue, foreign: 3 });
    expect(jsonLines(proc).some((l) => /a restore is declared/.test(l.msg))).toBe(false);
    const pool = testPool(1, fresh.url);
    try {
      expect(await selectPendingRecovery(pool)).toBeNull();
    } finally {
      await pool.end();
    }
    await expectCleanStop(proc);
  }, 120_000);

  it('a restore of the same database (its identity kept, rows gone) still closes the gate; /readyz says why and what clears it; a stop closes cleanly', async () => {
    const taskQueue = uniq('rd-restored');
    const db = await ownDatabase('rd-restored');
    cleanups.push(db.drop);
    const ids = await ordersOf(db.url, taskQueue, 2);
    // What a restore to a backup before the second order leaves: its row and start intent gone.
    const pool = testPool(1, db.url);
    cleanups.push(() => pool.end());
    const lost = ids[0]!;
    await pool.query('delete from workflow_outbox where workflow_id = $1', [lost]);
    await pool.query('delete from orders where workflow_id = $1', [lost]);

    const { proc, readyz } = await spawnWorker(db.url, taskQueue);
    const body = await until(
      'the worker to report the restore gate on /readyz',
      async () => {
        if (!proc.alive()) throw new Error(`worker exited:\n${proc.output()}`);
        const res = await fetch(readyz).catch(() => null);
        return res ? { status: res.status, text: await res.text() } : null;
      },
      { done: (r) => r !== null && /restore recovery pending/.test(r.text), timeoutMs: 60_000 },
    );
    expect(body?.status).toBe(503);
    expect(body?.text).toMatch(/have no order row/);
    expect(body?.text).toMatch(/npx onceflow ops recover-after-restore --since/);
    // What `npm start` (dev/start.ts) says when it gives up waiting for this worker: cause and command.
    await expect(waitForHttp(readyz, 500)).rejects.toThrow(
      /readyz did not answer within 0.5s: Error: HTTP 503: .*restore recovery pending.*recover-after-restore/,
    );
    expect((await selectPendingRecovery(pool))?.declared_by).toMatch(/^worker pid \d+: 1 of the latest 2/);
    expect(jsonLines(proc).some((l) => /another database's order workflows/.test(l.msg))).toBe(false);
    // Stopped while it waits at the gate: its Worker never ran, and the connection still closes.
    await expectCleanStop(proc);
  }, 120_000);
});

describe('the identity (migration 0026)', () => {
  it('a backup taken before 0026, restored and migrated again, gets back the identity its database had', async () => {
    const db = await emptyDatabase('rd-identity');
    cleanups.push(db.drop);
    await migrate(db.url);
    const before = await identityOf(db.url);
    expect(before).toMatch(/^[0-9a-f-]{36}$/);
    // What such a backup holds: the same history up to 0025, no identity.
    const pool = testPool(1, db.url);
    try {
      await pool.query('drop table database_identity');
      // And nothing of the migrations after it (they run again after it, as on such a backup).
      await pool.query(
        'drop table webhook_delivery_attempts, webhook_deliveries, merchant_events, webhook_endpoints',
      );
      await pool.query(`delete from pgmigrations where name >= '0026'`);
    } finally {
      await pool.end();
    }
    expect(await migrate(db.url)).toEqual(['0026_database_identity', '0027_merchant_webhooks']);
    expect(await identityOf(db.url)).toBe(before);
  });
});

describe('workflows started before the identity (no identity in their memo)', () => {
  let db: { url: string; drop: () => Promise<void> };
  let pool: Pool;

  beforeAll(async () => {
    db = await ownDatabase('rd-unmarked');
    pool = testPool(2, db.url);
  });

  afterAll(async () => {
    await pool?.end();
    await db?.drop();
  });

  /** An order workflow started as an older build did (or with a given memo), never run; no row for it. */
  async function startBare(taskQueue: string, memo?: Record<string, unknown>): Promise<string> {
    const workflowId = `order/rd/${randomUUID()}`;
    const handle = await temporal.client.workflow.start(ORDER_WORKFLOW, {
      taskQueue,
      workflowId,
      args: [{}],
      ...(memo ? { memo } : {}),
    });
    await handle.terminate('test: never to run');
    return workflowId;
  }

  async function clearPending(): Promise<void> {
    await pool.query('update restore_recoveries set completed_at = now() where completed_at is null');
  }

  it('alone, they count as before: rows missing declare a restore', async () => {
    const taskQueue = uniq('rd-old-build');
    await startBare(taskQueue);
    await listedOrders(taskQueue, 1);
    const declared = await detectRestore(pool, temporal.client, taskQueue, 'test');
    expect(declared?.declared_by).toMatch(/^test: 1 of the latest 1 order workflows have no order row/);
    await clearPending();
  });

  it("beside a workflow of another database they may be that database's: no restore is declared", async () => {
    const taskQueue = uniq('rd-mixed');
    await startBare(taskQueue);
    await startBare(taskQueue, databaseMemo(randomUUID()));
    await listedOrders(taskQueue, 2);
    expect(await detectRestore(pool, temporal.client, taskQueue, 'test')).toBeNull();
    expect(await selectPendingRecovery(pool)).toBeNull();
  });

  it("beside this database's own workflow with its row gone, a restore is declared", async () => {
    const taskQueue = uniq('rd-own');
    const identity = await selectDatabaseIdentity(pool);
    await startBare(taskQueue);
    await startBare(taskQueue, databaseMemo(identity!));
    await startBare(taskQueue, databaseMemo(randomUUID()));
    await listedOrders(taskQueue, 3);
    const declared = await detectRestore(pool, temporal.client, taskQueue, 'test');
    // Only this database's own workflow counts: the one without identity sits beside another database's.
    expect(declared?.declared_by).toMatch(/^test: 1 of the latest 3 order workflows have no order row/);
    await clearPending();
  });
});
