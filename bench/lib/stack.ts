/**
 * The end-to-end stack the benchmarks start, and the helpers they share
 * (bench/e2e.ts, bench/growth.ts): a throwaway database, a Temporal server
 * (the dev server on SQLite, or the Temporal server on Postgres), and the
 * product's processes (sandbox providers, worker(s), API) under the one
 * supervisor, each stopped by PID at the end; the closed loop of clients and
 * one order from POST to its terminal status through the real HTTP API.
 * Bench-only.
 */
import fs from 'node:fs';
import path from 'node:path';
import { Client } from '@temporalio/client';
import pg from 'pg';
import type { Config } from '../../src/config.ts';
import { createThrowawayDatabase, ensureDatabase, withDatabase } from '../../src/db/migrate.ts';
import { createPool } from '../../src/db/index.ts';
import { seedDemoData } from '../../dev/seed.ts';
import { freePort } from '../../src/process/ports.ts';
import { Supervisor } from '../../src/process/supervisor.ts';
import { ensureTemporalCli, startDevServerOnFreePorts } from '../../dev/devserver/temporal.ts';
import { waitForHttp } from '../../dev/wait.ts';
import {
  dropTemporalDatabases,
  ensureTemporalServerTools,
  startTemporalServerOnFreePorts,
  TEMPORAL_SERVER_DYNAMIC_CONFIG,
  type PersistenceSettings,
} from '../../dev/devserver/temporal-server.ts';
import { TERMINAL_STATUSES } from '../../src/orders/model.ts';
import { cpuSeconds } from './proc-cpu.ts';

export const ROOT = path.resolve(import.meta.dirname, '../..');

/** A progress line on stdout, prefixed with the benchmark's name. */
export type Say = (line: string) => void;

export function positiveInt(raw: unknown, name: string, max: number): number {
  return intInRange(raw, name, 1, max);
}

/** A flag's integer in [min, max]; anything else ends the run with exit code 2 and says why. */
export function intInRange(raw: unknown, name: string, min: number, max: number): number {
  const n = typeof raw === 'string' && raw.trim() === '' ? Number.NaN : Number(raw);
  if (!Number.isInteger(n) || n < min || n > max) {
    console.error(`${name} must be an integer in [${min}, ${max}], got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
}

export function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

export function round(x: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/**
 * Runs `count` jobs on `concurrency` loops; prints progress every 10 % (or
 * calls `onTenth` instead); throws once `deadline` (a Date.now() value) has
 * passed. Returns the seconds it took.
 */
export async function closedLoop(
  label: string,
  count: number,
  concurrency: number,
  job: (i: number) => Promise<void>,
  opts: { say: Say; deadline: number; onTenth?: (done: number) => void },
): Promise<number> {
  let next = 0;
  let done = 0;
  const step = Math.max(1, Math.round(count / 10));
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      for (let i = next++; i < count; i = next++) {
        if (Date.now() > opts.deadline) throw new Error(`--timeout-seconds exceeded during ${label}`);
        await job(i);
        done++;
        if (done % step === 0 || done === count) {
          if (opts.onTenth) opts.onTenth(done);
          else opts.say(`  ${label}: ${done}/${count}`);
        }
      }
    }),
  );
  return (performance.now() - t0) / 1000;
}

// ------------------------------------------------------------------ processes

/**
 * The processes and resources a benchmark started, stopped in reverse order
 * by `cleanup` (also on SIGINT, SIGTERM and SIGHUP: the children have process
 * groups of their own and never see a closed terminal). Restarts are off: a
 * benchmark measures the stack as it is, so a process that dies ends the
 * run's figures' validity; the exit is reported, with where its log is.
 */
export class BenchProcesses {
  readonly children: Supervisor[] = [];
  /** Run after the children are stopped, last registered first (a server, then the databases). */
  readonly #after: (() => Promise<void>)[] = [];
  #cleaning: Promise<void> | undefined;

  constructor(
    private readonly say: Say,
    /** Write a V8 CPU profile of each Node child into <dir>/<name>. */
    private readonly cpuProfDir?: string,
  ) {
    for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
      process.once(signal, () => {
        say(`${signal}: stopping everything`);
        void this.cleanup().then(() => process.exit(130));
      });
    }
  }

  /** Registers a resource to release at cleanup, after the children (in reverse order of registration). */
  atCleanup(what: string, release: () => Promise<void>): void {
    this.#after.push(() => release().catch((err: unknown) => this.say(`could not ${what}: ${String(err)}`)));
  }

  start(
    name: string,
    argv: string[],
    env: NodeJS.ProcessEnv,
    logDir: string,
    onLine?: (line: string) => void,
  ): Supervisor {
    // One directory per process: each of its threads (main, loader, workflow threads) writes a profile.
    const profile = this.cpuProfDir
      ? ['--cpu-prof', `--cpu-prof-dir=${path.join(this.cpuProfDir, name)}`]
      : [];
    const logFile = path.join(logDir, `${name}.log`);
    const child = new Supervisor({
      name,
      args: [...profile, '--import', 'tsx', ...argv],
      cwd: ROOT,
      env,
      logFile,
      ...(onLine ? { onLine } : {}),
      restart: false,
      stopGraceMs: 15_000,
    });
    child.on('exit', (exit) => {
      if (!this.#cleaning && !exit.expected)
        this.say(`${name} exited unexpectedly (${exit.how}); see ${logFile}`);
    });
    void child.start();
    this.children.push(child);
    return child;
  }

  /** Stops the given children (or all), newest first. */
  async stop(children: Supervisor[] = this.children): Promise<void> {
    for (const c of [...children].reverse()) await c.stop().catch(() => undefined);
  }

  cleanup(): Promise<void> {
    this.#cleaning ??= (async () => {
      await this.stop();
      for (const release of [...this.#after].reverse()) await release();
    })();
    return this.#cleaning;
  }
}

/** A migrated database with the demo tenants and keys, dropped at cleanup (unless `keep`). Returns its URL. */
export async function createSeededDatabase(
  config: Config,
  dbName: string,
  procs: BenchProcesses,
  keep = false,
): Promise<string> {
  const database = await createThrowawayDatabase(config.databaseUrl, dbName);
  if (!keep) procs.atCleanup('drop the database', database.drop);
  const seedPool = createPool(database.url, { max: 1 });
  try {
    await seedDemoData(seedPool, '127.0.0.1');
  } finally {
    await seedPool.end();
  }
  return database.url;
}

export interface TemporalOptions {
  backend: 'dev' | 'postgres';
  /** The run's database name: the Temporal server on Postgres gets `<name>_temporal` and `_temporal_vis`. */
  dbName: string;
  runDir: string;
  /** The dev server's SQLite pragmas: 'wal' (as `npm start`) or 'default' (the CLI's). */
  sqlite?: string;
  /** Eager activity dispatch on the server ('on', the default, or 'off'). */
  eager?: string;
  /** Levers of the Temporal server on Postgres (bench:e2e --server-*): each unset one keeps the project's setting. */
  server?: ServerLevers;
  /** (dev) The dev server's own Prometheus metrics on this loopback port (bench:e2e --latency counts RPCs there). */
  metricsPort?: number;
}

/** Settings of the Postgres-backed server a benchmark can change (docs/DEPLOYING.md). */
interface ServerLevers {
  /** Dynamic config keys over deploy/temporal/dynamicconfig.yaml's. */
  dynamic: Record<string, boolean | number>;
  shards?: number;
  persistence?: PersistenceSettings;
  /** Per-database Postgres settings of both Temporal databases (ALTER DATABASE ... SET). */
  db: Record<string, string>;
  /** The server's Prometheus endpoint and pprof on free loopback ports. */
  observe: boolean;
}

/** Starts the Temporal server on free ports, stopped (and its databases dropped) at cleanup. */
export async function startTemporal(
  config: Config,
  o: TemporalOptions,
  procs: BenchProcesses,
  say: Say,
): Promise<{ address: string; pid: () => number | undefined; databases: string[] }> {
  const databases = o.backend === 'postgres' ? [`${o.dbName}_temporal`, `${o.dbName}_temporal_vis`] : [];
  if (o.backend === 'postgres') {
    if (o.sqlite && o.sqlite !== 'wal') say('--sqlite has no effect with --backend=postgres');
    const tools = await ensureTemporalServerTools({ toolsDir: config.toolsDir, log: say });
    const temporalDatabases = {
      postgresUrl: config.temporal.postgres.url,
      database: databases[0]!,
      visibilityDatabase: databases[1]!,
    };
    procs.atCleanup('drop the Temporal databases', () => dropTemporalDatabases(temporalDatabases));
    const levers = o.server ?? { dynamic: {}, db: {}, observe: false };
    if (Object.keys(levers.db).length > 0) {
      // Per-database settings apply to every session opened afterwards: set before the server connects.
      const admin = new pg.Client({
        connectionString: withDatabase(temporalDatabases.postgresUrl, 'postgres'),
      });
      await admin.connect();
      try {
        for (const name of databases) {
          await ensureDatabase(withDatabase(temporalDatabases.postgresUrl, name));
          for (const [key, value] of Object.entries(levers.db)) {
            await admin.query(
              `ALTER DATABASE ${pg.escapeIdentifier(name)} SET ${pg.escapeIdentifier(key)} = ${pg.escapeLiteral(value)}`,
            );
          }
        }
      } finally {
        await admin.end();
      }
      say(`Temporal databases: ${JSON.stringify(levers.db)}`);
    }
    const dynamicConfig = {
      ...TEMPORAL_SERVER_DYNAMIC_CONFIG,
      ...(o.eager === 'off' ? { 'system.enableActivityEagerExecution': false } : {}),
      ...levers.dynamic,
    };
    const observability = levers.observe
      ? { metricsPort: await freePort(), pprofPort: await freePort() }
      : undefined;
    const server = await startTemporalServerOnFreePorts({
      tools,
      databases: temporalDatabases,
      dataDir: o.runDir,
      ui: false,
      log: say,
      ...(o.eager === 'off' || Object.keys(levers.dynamic).length > 0 ? { dynamicConfig } : {}),
      ...(levers.shards !== undefined ? { historyShards: levers.shards } : {}),
      ...(levers.persistence ? { persistence: levers.persistence } : {}),
      ...(observability ? { observability } : {}),
    });
    if (o.server) {
      say(
        `server levers: dynamic ${JSON.stringify(levers.dynamic)}, shards ${levers.shards ?? 'default'}, persistence ${JSON.stringify(levers.persistence ?? 'default')}`,
      );
    }
    if (observability) {
      say(
        `server metrics at http://127.0.0.1:${observability.metricsPort}/metrics, pprof at http://127.0.0.1:${observability.pprofPort}/debug/pprof/ (pid ${server.process.pid})`,
      );
    }
    procs.atCleanup('stop the Temporal server', () => server.stop());
    return { address: server.address, pid: () => server.process.pid, databases };
  }
  const cli = await ensureTemporalCli({ toolsDir: config.toolsDir, log: say });
  const server = await startDevServerOnFreePorts({
    cli,
    ui: false,
    dbFile: path.join(o.runDir, 'temporal.sqlite'),
    logFile: path.join(o.runDir, 'temporal.log'),
    log: say,
    ...(o.sqlite === 'default' ? { sqlitePragmas: {} } : {}),
    ...(o.eager === 'off' ? { dynamicConfig: { 'system.enableActivityEagerExecution': 'false' } } : {}),
    ...(o.metricsPort !== undefined ? { metricsPort: o.metricsPort } : {}),
  });
  procs.atCleanup('stop the Temporal dev server', () => server.stop());
  return { address: server.address, pid: () => server.process.pid, databases };
}

export interface OrderStackOptions {
  databaseUrl: string;
  /** The Temporal server's address. */
  address: string;
  /** Logs and the processes' data directory. */
  runDir: string;
  /** The order task queue (one per stack, so two stacks can share one Temporal server). */
  taskQueue: string;
  /** Order worker processes (as `npm start -- --workers N`). */
  workers: number;
  /** API processes sharing the API port through node:cluster (as `npm start -- --api-processes M`). */
  apiProcesses: number;
  /** Prefix of the processes' names (their log files), for a run with several stacks. */
  name?: string;
  client: Client;
  /**
   * Where the worker(s) and the API reach Postgres and Temporal, when not at `databaseUrl` and
   * `address` (bench:e2e --latency: through toxiproxy). The sandbox provider, an outside system,
   * and the benchmark's own client keep the direct ones.
   */
  services?: { databaseUrl: string; address: string };
}

export interface OrderStack {
  /** The API's base URL. */
  api: string;
  /** The API's metrics listener (under several API processes, the cluster primary's). */
  apiMetrics: string;
  sandbox: Supervisor;
  workers: Supervisor[];
  apiProc: Supervisor;
  /** Seconds from the worker's spawn to its first (smoke) workflow run. */
  workerReadySec: number;
  /** The environment the processes got. */
  env: NodeJS.ProcessEnv;
}

/**
 * The product's processes as `npm start` runs them, on free ports: the
 * sandbox providers, the worker(s) (ready once the smoke workflow ran on
 * them: that time is `workerReadySec`), then the API.
 */
export async function startOrderStack(o: OrderStackOptions, procs: BenchProcesses): Promise<OrderStack> {
  const prefix = o.name ? `${o.name}-` : '';
  const ports = {
    api: await freePort(),
    apiMetrics: await freePort(),
    sandbox: await freePort(),
    // Each worker process gets its own pair of metrics ports.
    workers: await Promise.all(
      Array.from({ length: o.workers }, async () => ({ metrics: await freePort(), sdk: await freePort() })),
    ),
  };
  const api = `http://127.0.0.1:${ports.api}`;
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATABASE_URL: o.databaseUrl,
    TEMPORAL_ADDRESS: o.address,
    TEMPORAL_TASK_QUEUE: o.taskQueue,
    API_PORT: String(ports.api),
    API_METRICS_PORT: String(ports.apiMetrics),
    SANDBOX_PORT: String(ports.sandbox),
    SANDBOX_URL: `http://127.0.0.1:${ports.sandbox}`,
    WEBHOOK_URL: `${api}/v1/webhooks/payments`,
    ONCEFLOW_DATA_DIR: o.runDir,
    API_RATE_LIMIT_MAX: '100000000',
    LOG_LEVEL: 'warn',
    ...(process.env.WEBHOOK_CHARGE_WAIT_MS
      ? { WEBHOOK_CHARGE_WAIT_MS: process.env.WEBHOOK_CHARGE_WAIT_MS }
      : {}),
  };
  const serviceEnv: NodeJS.ProcessEnv = o.services
    ? { ...env, DATABASE_URL: o.services.databaseUrl, TEMPORAL_ADDRESS: o.services.address }
    : env;
  const sandbox = procs.start(`${prefix}sandbox`, ['dev/sandbox/main.ts'], env, o.runDir);
  await waitForHttp(`${env.SANDBOX_URL}/healthz`, 60_000);
  // Worker start-up, measured alone: spawn -> the smoke workflow has run on it (as `npm start`
  // checks). Includes Node + tsx start, finding the bundle by hash, connecting and polling.
  const workerSpawned = performance.now();
  const workers = ports.workers.map((p, i) =>
    procs.start(
      o.workers > 1 ? `${prefix}worker-${i + 1}` : `${prefix}worker`,
      ['src/worker/main.ts'],
      {
        ...serviceEnv,
        WORKER_SMOKE_WORKFLOW: 'on', // start-up is timed by the smoke workflow, as `npm start` checks
        WORKER_METRICS_PORT: String(p.metrics),
        WORKER_SDK_METRICS_PORT: String(p.sdk),
        ...(o.workers > 1 ? { ONCEFLOW_PROCESS: `worker-${i + 1}` } : {}),
      },
      o.runDir,
    ),
  );
  await o.client.workflow.execute('smokeWorkflow', {
    taskQueue: o.taskQueue,
    workflowId: `bench-smoke-${o.taskQueue}`,
    args: [],
    workflowExecutionTimeout: '3 minutes',
  });
  const workerReadySec = round((performance.now() - workerSpawned) / 1000, 1);
  const apiProc =
    o.apiProcesses > 1
      ? procs.start(
          `${prefix}api`,
          ['src/api/cluster.ts'],
          { ...serviceEnv, API_PROCESSES: String(o.apiProcesses) },
          o.runDir,
        )
      : procs.start(`${prefix}api`, ['src/api/main.ts'], serviceEnv, o.runDir);
  await waitForHttp(`${api}/healthz`, 60_000);
  return {
    api,
    apiMetrics: `http://127.0.0.1:${ports.apiMetrics}`,
    sandbox,
    workers,
    apiProc,
    workerReadySec,
    env,
  };
}

// ------------------------------------------------------------------- an order

export interface OrderOutcome {
  id: string;
  workflowId: string | undefined;
  status: string;
  /** POST to the terminal status, as the client sees it. */
  ms: number;
  /** The wall clock at the POST (Date.now()), to compare with the order's updatedAt. */
  postedAt: number;
  /** The order's updatedAt (its terminal status' commit). */
  updatedAt: string;
  /** With `preferWait`: true when the POST answered the outcome (200), false after a 202. */
  answered: boolean;
}

/**
 * One order through the real HTTP API: POST /v1/orders (with `Prefer:
 * wait=N` when `preferWait` is set), then GET /v1/orders/:id?wait=30 until
 * its status is terminal (no GET when the POST answered the outcome).
 */
export async function orderToTerminal(
  api: string,
  o: {
    apiKey: string;
    idempotencyKey: string;
    i: number;
    preferWait?: number | undefined;
    /** The sandbox's card: pm_card_visa (the default) completes, pm_card_chargeDeclined is declined. */
    paymentMethod?: string;
  },
): Promise<OrderOutcome> {
  const { i } = o;
  const postedAt = Date.now();
  const t0 = performance.now();
  const headers = { authorization: `Bearer ${o.apiKey}` };
  const res = await fetch(`${api}/v1/orders`, {
    method: 'POST',
    headers: {
      ...headers,
      'content-type': 'application/json',
      'idempotency-key': o.idempotencyKey,
      ...(o.preferWait !== undefined ? { prefer: `wait=${o.preferWait}` } : {}),
    },
    body: JSON.stringify({
      customer: { id: `cus_${i % 17}`, email: `customer${i}@example.com` },
      currency: 'usd',
      items: [{ sku: `SKU-${i % 5}`, quantity: 1 + (i % 3), unitAmount: 1000 + (i % 7) * 250 }],
      paymentMethod: o.paymentMethod ?? 'pm_card_visa',
    }),
  });
  type View = { id?: string; workflowId?: string; status: string; updatedAt: string };
  const created = (await res.json()) as View;
  // With Prefer: wait, a 200 is the terminal order as GET returns it: no GET needed.
  const answered = o.preferWait !== undefined && res.status === 200;
  if ((res.status !== 202 && !answered) || !created.id) throw new Error(`POST /v1/orders: ${res.status}`);
  let view = created;
  if (!answered) {
    do {
      const r = await fetch(`${api}/v1/orders/${encodeURIComponent(created.id)}?wait=30`, { headers });
      view = (await r.json()) as View;
      if (!r.ok) throw new Error(`GET order: ${r.status}`);
    } while (!(TERMINAL_STATUSES as readonly string[]).includes(view.status));
  }
  return {
    id: created.id,
    workflowId: created.workflowId,
    status: view.status,
    ms: performance.now() - t0,
    postedAt,
    updatedAt: view.updatedAt,
    answered,
  };
}

// ------------------------------------------------------------------------ CPU

/** Direct children of `pid` (from /proc/<n>/stat's ppid field). */
export function childPids(pid: number): number[] {
  const out: number[] = [];
  for (const entry of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) out.push(Number(entry));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}

/**
 * A CPU meter over named groups of PIDs (temporal, api, worker, ...) plus the
 * Postgres backends serving one database. Reports the total of the groups
 * (`stack`), Postgres, and each group on its own (where the time goes).
 */
export function cpuMeter(
  groups: () => Record<string, (number | undefined)[]>,
  pgBackends: () => Promise<number[]>,
) {
  return async () => {
    const named = groups();
    const own = Object.values(named).flat();
    const backends = await pgBackends();
    const before = new Map([...own, ...backends].map((p) => [p, cpuSeconds(p)]));
    return async () => {
      const later = await pgBackends();
      // A process that exited meanwhile (a pool closing an idle connection ends its backend) reads
      // 0: it counts nothing rather than minus its whole life's CPU. What it used between the
      // first reading and its exit is lost; a backend closed for being idle used little.
      const delta = (list: (number | undefined)[]) =>
        list.reduce<number>((sum, p) => sum + (p ? Math.max(0, cpuSeconds(p) - (before.get(p) ?? 0)) : 0), 0);
      const byGroup = Object.fromEntries(Object.entries(named).map(([k, list]) => [k, delta(list)]));
      return { stack: delta(own), postgres: delta([...new Set([...backends, ...later])]), byGroup };
    };
  };
}

/** A results table on stdout: right-aligned columns under a header row. */
export function printColumns(lines: string[][]): void {
  const widths = (lines[0] ?? []).map((_, i) => Math.max(...lines.map((l) => (l[i] ?? '').length)));
  console.log('');
  for (const l of lines) console.log(l.map((cell, i) => cell.padStart(widths[i] ?? 0)).join('  '));
  console.log('');
}
