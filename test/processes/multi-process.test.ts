/**
 * `npm start -- --workers 2 --api-processes 2` (dev/start.ts) against the
 * run's Temporal server and a database of its own: two worker processes on
 * one task queue and two API processes sharing one port (node:cluster), each
 * with its own outbox relay.
 *
 * Concurrent orders go through the shared port, every key sent twice at once
 * and once more afterwards, while the sandbox injects provider faults; one
 * worker is killed with SIGKILL while orders are in flight (`npm start`
 * restarts it). Then: every order terminal, exactly one charge and one
 * receipt per order at the provider, one workflow per order, one order per
 * key. Nothing here is timed: the waits are generous bounds, not assertions.
 */
import fs from 'node:fs';
import http from 'node:http';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freePort, freePortRange } from '../../src/process/ports.ts';
import { createOnceflowClient, type CreateOrderBody, type OrderDetail } from '@onceflow/client';
import { DEMO_TENANTS } from '../../src/api/demo-keys.ts';
import { createPool } from '../../src/db/index.ts';
import { TERMINAL_STATUSES } from '../../src/orders/model.ts';
import { ownDatabase, temporalClient, uniq, workflowBundlePath, temporalAddress } from '../support/env.ts';
import {
  isRunning,
  killAll,
  reportedChildPids,
  spawnEntry,
  waitOutput,
  type Proc,
} from '../support/processes.ts';
import type { Client } from '@temporalio/client';

const ORDERS = 24;
const tenant = DEMO_TENANTS[0];

let db: Awaited<ReturnType<typeof ownDatabase>>;
let main: Proc;
let apiUrl: string;
let apiMetricsUrl: string;
let sandboxUrl: string;
let taskQueue: string;
let temporal: { client: Client; close: () => Promise<void> };

const childPids = () => reportedChildPids(main);

/**
 * Ports handed out to this run's stack. freePort() only asks the OS for a port
 * that is free now, and nothing holds it until the stack binds it, so two calls
 * can return the same port (seen: the API's port came back as a worker's SDK
 * metrics port, and npm start refused the clash). Every port is checked
 * against the ones already given out.
 */
const taken = new Set<number>();

/** A free port no other port of this run uses. */
async function distinctPort(): Promise<number> {
  for (;;) {
    const port = await freePort();
    if (!taken.has(port)) {
      taken.add(port);
      return port;
    }
  }
}

/**
 * The API processes the cluster primary `pid` forked, from /proc: its children
 * running src/api/main.ts. (Other children, such as the esbuild service tsx
 * starts when its transform cache is cold, are not API processes.)
 */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      // Fields after the command name (in parentheses): state, ppid, ...
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid !== pid) continue;
      const cmdline = fs.readFileSync(`/proc/${entry}/cmdline`, 'utf8');
      if (cmdline.includes('src/api/main.ts') && !stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) {
        out.push(Number(entry));
      }
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/** GET /healthz on a fresh connection (which the cluster primary hands to the next process). */
function healthz(): Promise<number | undefined> {
  return new Promise((resolve, reject) => {
    http
      .get(`${apiUrl}/healthz`, { agent: false }, (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode));
      })
      .on('error', reject);
  });
}

/** The `process` labels in one scrape of the API's metrics listener (the cluster primary's). */
async function metricsProcesses(): Promise<string[]> {
  const res = await fetch(`${apiMetricsUrl}/metrics`);
  expect(res.status).toBe(200);
  const text = await res.text();
  return [...new Set([...text.matchAll(/process="(api-\d+)"/g)].map((m) => m[1]!))].sort();
}

async function sandbox(path: string, init?: RequestInit): Promise<unknown> {
  const res = await fetch(`${sandboxUrl}${path}`, init);
  if (!res.ok) throw new Error(`sandbox ${path}: HTTP ${res.status} ${await res.text()}`);
  return res.json();
}

beforeAll(async () => {
  db = await ownDatabase('multiproc');
  const apiPort = await distinctPort();
  const sandboxPort = await distinctPort();
  apiUrl = `http://127.0.0.1:${apiPort}`;
  const apiMetricsPort = await distinctPort();
  apiMetricsUrl = `http://127.0.0.1:${apiMetricsPort}`;
  sandboxUrl = `http://127.0.0.1:${sandboxPort}`;
  taskQueue = uniq('multiproc');
  main = spawnEntry(
    'main',
    'dev/start.ts',
    {
      DATABASE_URL: db.url,
      TEMPORAL_ADDRESS: temporalAddress(),
      TEMPORAL_TASK_QUEUE: taskQueue,
      WORKFLOW_BUNDLE_PATH: workflowBundlePath(),
      API_PORT: String(apiPort),
      API_METRICS_PORT: String(apiMetricsPort),
      SANDBOX_PORT: String(sandboxPort),
      // Per-worker series (worker 2 gets base + 2), below the ephemeral range (freePortRange).
      WORKER_METRICS_PORT: String(await freePortRange(3)),
      WORKER_SDK_METRICS_PORT: String(await freePortRange(3)),
      // A killed worker's claimed step is taken over after this lease.
      LEDGER_LEASE_MS: '6000',
      PROVIDER_TIMEOUT_MS: '3000',
      LOG_LEVEL: 'warn',
    },
    ['--workers', '2', '--api-processes', '2'],
  );
  await waitOutput(main, /onceflow is up/, 420_000);
  temporal = await temporalClient();
}, 480_000);

afterAll(async () => {
  const leftovers = main ? [...childPids().values()] : [];
  if (main?.alive()) {
    main.child.kill('SIGTERM');
    const timer = setTimeout(() => killAll([main]), 60_000);
    await main.exited;
    clearTimeout(timer);
  }
  for (const pid of leftovers) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
  await temporal?.close();
  await db?.drop();
}, 120_000);

it('2 workers and 2 API processes: one order, charge, receipt and workflow per key, through a worker crash and provider faults', async () => {
  const pids = childPids();
  expect([...pids.keys()].sort()).toEqual(['api', 'sandbox', 'worker-1', 'worker-2']);
  expect(main.output()).toMatch(/starting 2 API processes on port \d+ \(node:cluster\)/);
  // Two API processes behind the one port, both answering: fresh connections reach each of them.
  const apiPrimary = pids.get('api')!;
  expect(childrenOf(apiPrimary)).toHaveLength(2);
  for (let i = 0; i < 8; i++) expect(await healthz()).toBe(200);
  // Metrics are not on the shared port; the primary's listener shows both processes in one scrape.
  expect((await fetch(`${apiUrl}/metrics`)).status).toBe(404);
  expect(await metricsProcesses()).toEqual(['api-1', 'api-2']);

  // Provider faults: errors before and after the effect, and lost responses, on charges and receipts.
  await sandbox('/_sandbox/faults', { method: 'DELETE' });
  for (const [endpoint, kind, count] of [
    ['charges.create', 'fail_before', 3],
    ['charges.create', 'fail_after', 3],
    ['charges.create', 'drop_after', 2],
    ['charges.lookup', 'fail_before', 1],
    ['messages.create', 'fail_before', 2],
    ['messages.create', 'drop_after', 2],
  ] as const) {
    await sandbox('/_sandbox/faults', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ endpoint, kind, count }),
    });
  }

  const client = createOnceflowClient({ baseUrl: apiUrl, apiKey: tenant.key });
  const run = uniq('mp');
  const keys = Array.from({ length: ORDERS }, (_, i) => `${run}-${i}`);
  const body = (i: number): CreateOrderBody => ({
    customer: { id: `cus_${i % 5}`, email: `buyer${i}@example.com` },
    currency: 'usd',
    items: [{ sku: `SKU-${i % 3}`, quantity: 1 + (i % 2), unitAmount: 1500 }],
    paymentMethod: 'pm_card_visa',
  });
  /** Every answer's order id, per key: all must be the same one. */
  const answers = new Map<string, string[]>(keys.map((k) => [k, []]));
  const submit = async (i: number) => {
    const key = keys[i]!;
    // The same key twice at once through the shared port (likely two processes), then once more.
    const first = await Promise.all([
      client.createOrder(body(i), { idempotencyKey: key }),
      client.createOrder(body(i), { idempotencyKey: key }),
    ]);
    const again = await client.createOrder(body(i), { idempotencyKey: key });
    for (const r of [...first, again]) answers.get(key)!.push(r.order.id);
  };

  // First half, then kill a worker while those orders are in flight, then the second half.
  const half = ORDERS / 2;
  await Promise.all(Array.from({ length: half }, (_, i) => submit(i)));
  const victim = pids.get('worker-1')!;
  process.kill(victim, 'SIGKILL');
  await Promise.all(Array.from({ length: ORDERS - half }, (_, i) => submit(half + i)));
  await waitOutput(main, /worker-1 exited unexpectedly \(signal SIGKILL\); restarting it/);

  for (const [key, ids] of answers) {
    expect(ids, key).toHaveLength(3);
    expect(new Set(ids).size, `one order for key ${key}`).toBe(1);
  }
  const orderIds = [...answers.values()].map((ids) => ids[0]!);
  expect(new Set(orderIds).size).toBe(ORDERS);

  // Generous bound (not a timing assertion): faults back off and a killed worker's lease must run out.
  const finals: OrderDetail[] = await Promise.all(
    orderIds.map((id) => client.waitForOrder(id, { timeoutMs: 600_000 })),
  );
  for (const o of finals) expect(TERMINAL_STATUSES, `${o.id} ${o.status}`).toContain(o.status);
  // Valid cards and recoverable faults only: every order ends completed.
  expect(finals.map((o) => o.status)).toEqual(finals.map(() => 'completed'));

  // The provider's own audit: exactly one succeeded charge and one receipt per order.
  const charges = (await sandbox('/_sandbox/charges')) as {
    data: { id: string; status: string; order_id: string }[];
  };
  const messages = (await sandbox('/_sandbox/messages')) as { data: { order_id: string }[] };
  const succeeded = charges.data.filter((c) => c.status === 'succeeded');
  for (const o of finals) {
    expect(
      succeeded.filter((c) => c.order_id === o.id),
      `charges of ${o.id}`,
    ).toHaveLength(1);
    expect(
      messages.data.filter((m) => m.order_id === o.id),
      `receipts of ${o.id}`,
    ).toHaveLength(1);
    expect(o.chargeId).toBe(succeeded.find((c) => c.order_id === o.id)!.id);
  }
  expect(succeeded).toHaveLength(ORDERS);
  expect(messages.data).toHaveLength(ORDERS);

  // Postgres: one order row and one started outbox row per key.
  const pool = createPool(db.url, { max: 1 });
  try {
    const { rows } = await pool.query<{ orders: number; outbox: number; started: number }>(
      `select (select count(*) from orders)::int as orders,
              (select count(*) from workflow_outbox)::int as outbox,
              (select count(*) from workflow_outbox where started_at is not null)::int as started`,
    );
    expect(rows[0]).toEqual({ orders: ORDERS, outbox: ORDERS, started: ORDERS });
  } finally {
    await pool.end();
  }

  // Temporal: exactly one execution per order's workflow ID (visibility catches up, hence the poll).
  const executions = async () => {
    const ids: string[] = [];
    for await (const wf of temporal.client.workflow.list({
      query: `TaskQueue = "${taskQueue}" AND WorkflowType = "orderWorkflow"`,
    }))
      ids.push(wf.workflowId);
    return ids;
  };
  await expect.poll(async () => (await executions()).length, { timeout: 60_000 }).toBe(ORDERS);
  const ids = await executions();
  expect(new Set(ids).size).toBe(ORDERS);
  expect(new Set(ids)).toEqual(new Set(finals.map((o) => o.workflowId)));

  // Both workers are up again, and SIGTERM stops every process (the API processes included).
  expect(childPids().get('worker-1')).not.toBe(victim);
  const apiPids = childrenOf(apiPrimary);
  expect(apiPids).toHaveLength(2);
  const all = [...childPids().values(), victim, ...apiPids];
  main.child.kill('SIGTERM');
  expect(await main.exited).toEqual({ code: 0, signal: null });
  for (const pid of all) expect(isRunning(pid), `pid ${pid} still running`).toBe(false);
}, 900_000);
