/**
 * End-to-end benchmark (not a test): orders through the real HTTP API, to a
 * terminal status, against a no-op workflow of today's shape on the same
 * Temporal server, in the same run.
 *
 *   npm run bench:e2e [-- --orders=500] [--concurrency=1,8,32] [--quick]
 *
 * For measuring one tuning change at a time (docs/BENCHMARKS-JOURNAL.md, "Tuning changes"):
 *   --baseline-only      skip the orders, run only the baseline workflow
 *   --sqlite=default     the CLI's SQLite defaults instead of WAL + synchronous=normal
 *   --eager=off          server flag for eager activity dispatch off
 *   --sdk-defaults       baseline worker with the SDK's slot/cache defaults
 *   --backend=postgres   the Temporal server on Postgres (per-run databases, dropped at
 *                        the end) instead of the dev server on SQLite (--backend=dev, default)
 *   --workers=N          N order worker processes (default 1), as `npm start -- --workers N`
 *   --api-processes=M    M API processes sharing the API port through node:cluster
 *                        (src/api/cluster.ts), as `npm start -- --api-processes M`
 *   --server-dynamic=k=v,...  (postgres) dynamic config keys set on top of ops/temporal/dynamicconfig.yaml
 *   --server-shards=N    (postgres) history shards of the run's throwaway cluster
 *   --server-pool=C:I    (postgres) the default store's maxConns:maxIdleConns per service
 *   --server-vis-pool=C:I  (postgres) the same for the visibility store
 *   --server-plugin=P    (postgres) the server's SQL plugin: postgres12 (lib/pq) or postgres12_pgx
 *   --server-db=k=v,...  (postgres) ALTER DATABASE ... SET k = v on both Temporal databases before start
 *   --server-observe     (postgres) the server's Prometheus endpoint and Go pprof on loopback ports,
 *                        printed at start (for sampling them during a level)
 *   --prefer-wait=N      each POST /v1/orders asks `Prefer: wait=N` (0-30) and takes a 200
 *                        as the outcome; an order still running after N s (a 202) is followed
 *                        by the usual GET ?wait= loop. p50/p99 are then POST to response
 *                        (issue #29's target: p50 <= 150 ms at C=1 with wait=10)
 *
 * It starts its own stack, like the test setup: a throwaway Postgres
 * database (dropped at the end), a Temporal dev server on free ports (the
 * settings `npm start` uses), and the sandbox providers, worker and API as
 * separate processes, plus a bench-only worker for the baseline workflow
 * (bench/baseline/). At each concurrency C it runs a closed loop of C
 * clients: POST /v1/orders, then GET /v1/orders/:id?wait=30 until the
 * order is terminal; and the same number of baseline workflows (start,
 * wait for the result), in halves: orders, baseline, baseline, orders. `--orders` is the count at the highest
 * concurrency; lower levels run min(orders, 25 x C), which bounds the run.
 *
 * Reports per concurrency: orders/s, p50/p99 from POST to the terminal
 * status as the client sees it, the same from the server's commit time
 * (the order's updated_at), the baseline's rate and latencies, the ratio,
 * and CPU seconds per order summed over every process of the stack (from
 * /proc/<pid>/stat: Temporal server, API, worker, sandbox; Postgres
 * backends of the run's database separately). History events per order
 * come from a few fetched histories. Writes bench/results/e2e.json.
 * Every process it starts is stopped by PID, also on Ctrl-C.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from '../src/config.ts';
import pg from 'pg';
import { createThrowawayDatabase, ensureDatabase, withDatabase } from '../src/db/migrate.ts';
import { createPool } from '../src/db/index.ts';
import { DEMO_TENANTS } from '../src/api/demo-keys.ts';
import { seedDemoData } from '../dev/seed.ts';
import { freePort } from '../src/process/ports.ts';
import { Supervisor } from '../src/process/supervisor.ts';
import {
  ensureTemporalCli,
  startDevServerOnFreePorts,
  waitForHttp,
  type DevServer,
} from '../dev/devserver/temporal.ts';
import {
  dropTemporalDatabases,
  ensureTemporalServerTools,
  startTemporalServerOnFreePorts,
  TEMPORAL_SERVER_DYNAMIC_CONFIG,
  TEMPORAL_PERSISTENCE,
  type SqlPool,
} from '../dev/devserver/temporal-server.ts';
import { ensureWorkflowBundle } from '../src/worker/bundle.ts';
import { TERMINAL_STATUSES } from '../src/orders/model.ts';
import { createCommand, parseCli } from '../scripts/lib/cli.ts';
import { cpuSeconds } from './lib/proc-cpu.ts';

const program = createCommand(
  'bench:e2e',
  'End-to-end benchmark: orders through the real HTTP API on a throwaway stack (see docs/BENCHMARKS.md).',
)
  .option('--orders <n>', 'orders at the highest concurrency', '500')
  .option('--concurrency <list>', 'comma-separated client counts', '1,8,32')
  .option('--quick', '64 orders, for a smoke run', false)
  .option('--timeout-seconds <n>', 'give up after this long', '1800')
  .option('--baseline-only', 'skip the orders, run only the baseline workflow', false)
  .option('--sqlite <mode>', "Temporal dev server SQLite: 'wal' or 'default'", 'wal')
  .option('--eager <on|off>', 'eager activity dispatch on the server', 'on')
  .option('--sdk-defaults', "baseline worker with the SDK's slot/cache defaults", false)
  .option('--workers <n>', 'order worker processes, as npm start -- --workers N', '1')
  .option('--api-processes <n>', 'API processes sharing the API port (node:cluster)', '1')
  .option(
    '--prefer-wait <n>',
    'POST with Prefer: wait=N (0-30): the outcome in the POST answer, GET ?wait= only after a 202',
  )
  .option(
    '--cpu-prof <dir>',
    "write a V8 CPU profile of each Node process of the stack into <dir> (Chrome DevTools' format)",
  )
  .option(
    '--backend <dev|postgres>',
    'Temporal dev server on SQLite, or the Temporal server on Postgres',
    'dev',
  )
  .option(
    '--server-dynamic <k=v,...>',
    '(postgres) dynamic config keys on top of ops/temporal/dynamicconfig.yaml',
  )
  .option('--server-shards <n>', '(postgres) history shards of the throwaway cluster')
  .option('--server-pool <maxConns:maxIdle>', "(postgres) the default store's pool per service")
  .option('--server-vis-pool <maxConns:maxIdle>', "(postgres) the visibility store's pool per service")
  .option('--server-plugin <name>', "(postgres) the server's SQL plugin: postgres12 or postgres12_pgx")
  .option('--server-db <k=v,...>', '(postgres) ALTER DATABASE ... SET on both Temporal databases')
  .option('--server-observe', "(postgres) the server's metrics and pprof on loopback ports", false)
  .addHelpText(
    'after',
    '\nRun as: npm run bench:e2e [-- options], e.g. npm run bench:e2e -- --orders=500 --quick',
  );
parseCli(program);
const opts = program.opts<{
  orders: string;
  concurrency: string;
  quick: boolean;
  timeoutSeconds: string;
  baselineOnly: boolean;
  sqlite: string;
  eager: string;
  sdkDefaults: boolean;
  backend: string;
  workers: string;
  apiProcesses: string;
  cpuProf?: string;
  preferWait?: string;
  serverDynamic?: string;
  serverShards?: string;
  serverPool?: string;
  serverVisPool?: string;
  serverPlugin?: string;
  serverDb?: string;
  serverObserve: boolean;
}>();
const CPU_PROF_DIR = opts.cpuProf ? path.resolve(opts.cpuProf) : undefined;
const args = {
  orders: opts.orders,
  concurrency: opts.concurrency,
  quick: opts.quick,
  'timeout-seconds': opts.timeoutSeconds,
  'baseline-only': opts.baselineOnly,
  sqlite: opts.sqlite,
  eager: opts.eager,
  'sdk-defaults': opts.sdkDefaults,
  backend: opts.backend,
  workers: opts.workers,
  'api-processes': opts.apiProcesses,
  'prefer-wait': opts.preferWait,
};
if (args.backend !== 'dev' && args.backend !== 'postgres') {
  console.error(`--backend must be dev or postgres, got ${JSON.stringify(args.backend)}`);
  process.exit(2);
}
const BACKEND = args.backend;
const BASELINE_ONLY = Boolean(args['baseline-only']);
const ORDERS = args.quick ? 64 : positiveInt(args.orders, '--orders', 20_000);
const LEVELS = String(args.concurrency)
  .split(',')
  .map((c) => positiveInt(c, '--concurrency', 256));
/** Worker processes on the order queue, and API processes sharing the API port (as `npm start` runs them). */
const WORKERS = positiveInt(args.workers, '--workers', 16);
const API_PROCESSES = positiveInt(args['api-processes'], '--api-processes', 16);
const TIMEOUT_MS = positiveInt(args['timeout-seconds'], '--timeout-seconds', 7200) * 1000;
/** Seconds of `Prefer: wait` on each POST, or undefined (POST, then GET ?wait=). 0 is allowed: one read. */
const PREFER_WAIT = args['prefer-wait'] === undefined ? undefined : preferWait(args['prefer-wait']);
/** Server-side levers of the Postgres-backed server (docs/BENCHMARKS-JOURNAL.md, "Topologies"). */
const SERVER = {
  dynamic: keyValues(opts.serverDynamic, '--server-dynamic', (v) =>
    v === 'true' || v === 'false' ? v === 'true' : Number.isFinite(Number(v)) ? Number(v) : v,
  ) as Record<string, boolean | number>,
  shards:
    opts.serverShards === undefined ? undefined : positiveInt(opts.serverShards, '--server-shards', 4096),
  persistence:
    opts.serverPool === undefined && opts.serverVisPool === undefined && opts.serverPlugin === undefined
      ? undefined
      : {
          plugin: serverPlugin(opts.serverPlugin ?? TEMPORAL_PERSISTENCE.plugin),
          default: opts.serverPool
            ? serverPool(opts.serverPool, '--server-pool')
            : TEMPORAL_PERSISTENCE.default,
          visibility: opts.serverVisPool
            ? serverPool(opts.serverVisPool, '--server-vis-pool')
            : TEMPORAL_PERSISTENCE.visibility,
        },
  db: keyValues(opts.serverDb, '--server-db', (v) => v),
  observe: Boolean(opts.serverObserve),
};
const SERVER_TWEAKED =
  Object.keys(SERVER.dynamic).length > 0 ||
  SERVER.shards !== undefined ||
  SERVER.persistence !== undefined ||
  Object.keys(SERVER.db).length > 0;
if (SERVER_TWEAKED && BACKEND !== 'postgres') {
  console.error('--server-* flags need --backend=postgres');
  process.exit(2);
}
const PER_CLIENT_AT_LOW_LEVELS = 25;
const HISTORY_SAMPLES = 5;
/** How many of the slowest orders per level get their history's longest gaps printed. */
const SLOWEST_SHOWN = 3;
const API_KEY = DEMO_TENANTS[0].key; // the local demo key, seeded into the throwaway database below
const root = path.resolve(import.meta.dirname, '..');
const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;
const started = Date.now();

function positiveInt(raw: unknown, name: string, max: number): number {
  const n = Number(raw);
  if (!Number.isInteger(n) || n <= 0 || n > max) {
    console.error(`${name} must be an integer in [1, ${max}], got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
}

/** --prefer-wait: 0 to 30, as the API takes it (more would be clamped to 30 and mislabel the run). */
function preferWait(raw: string): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || n > 30) {
    console.error(`--prefer-wait must be an integer in [0, 30], got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return n;
}

/** `k=v,k=v` into an object (values through `parse`); exits on a malformed pair. */
function keyValues<T>(raw: string | undefined, name: string, parse: (v: string) => T): Record<string, T> {
  if (raw === undefined) return {};
  return Object.fromEntries(
    raw.split(',').map((pair) => {
      const m = /^([\w.]+)=(.+)$/.exec(pair.trim());
      if (!m) {
        console.error(`${name} takes key=value pairs separated by commas, got ${JSON.stringify(pair)}`);
        process.exit(2);
      }
      return [m[1]!, parse(m[2]!)];
    }),
  );
}

/** --server-pool / --server-vis-pool maxConns:maxIdle. */
function serverPool(raw: string, name: string): SqlPool {
  const [conns, idle] = raw.split(':');
  const maxConns = positiveInt(conns, `${name} maxConns`, 200);
  return { maxConns, maxIdleConns: positiveInt(idle ?? conns, `${name} maxIdle`, maxConns) };
}

function serverPlugin(raw: string): 'postgres12' | 'postgres12_pgx' {
  if (raw !== 'postgres12' && raw !== 'postgres12_pgx') {
    console.error(`--server-plugin must be postgres12 or postgres12_pgx, got ${JSON.stringify(raw)}`);
    process.exit(2);
  }
  return raw;
}

const say = (line: string) => console.log(`[e2e] ${line}`);

// ------------------------------------------------------------------ processes

/**
 * The stack's processes, under the one supervisor (src/process/supervisor.ts) with restarts
 * off: a benchmark measures the stack as it is, so a process that dies ends the run's
 * figures' validity; the exit is reported, with where its log is.
 */
const children: Supervisor[] = [];
let devServer: DevServer | undefined;
let dropDatabase: (() => Promise<void>) | undefined;
let dropTemporalDbs: (() => Promise<void>) | undefined;
let cleaning: Promise<void> | undefined;

function startChild(
  name: string,
  argv: string[],
  env: NodeJS.ProcessEnv,
  logDir: string,
  onLine?: (line: string) => void,
): Supervisor {
  // One directory per process: each of its threads (main, loader, workflow threads) writes a profile.
  const profile = CPU_PROF_DIR ? ['--cpu-prof', `--cpu-prof-dir=${path.join(CPU_PROF_DIR, name)}`] : [];
  const logFile = path.join(logDir, `${name}.log`);
  const child = new Supervisor({
    name,
    args: [...profile, '--import', 'tsx', ...argv],
    cwd: root,
    env,
    logFile,
    ...(onLine ? { onLine } : {}),
    restart: false,
    stopGraceMs: 15_000,
  });
  child.on('exit', (exit) => {
    if (!cleaning && !exit.expected) say(`${name} exited unexpectedly (${exit.how}); see ${logFile}`);
  });
  void child.start();
  children.push(child);
  return child;
}

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const c of [...children].reverse()) await c.stop().catch(() => undefined);
    await devServer?.stop().catch(() => undefined);
    await dropTemporalDbs?.().catch((err: unknown) =>
      say(`could not drop the Temporal databases: ${String(err)}`),
    );
    await dropDatabase?.().catch((err: unknown) => say(`could not drop the database: ${String(err)}`));
  })();
  return cleaning;
}

// SIGHUP too (a closed terminal): the children have process groups of their own and never see it.
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.once(signal, () => {
    say(`${signal}: stopping everything`);
    void cleanup().then(() => process.exit(130));
  });
}

// ------------------------------------------------------------------------ CPU

/** Direct children of `pid` (from /proc/<n>/stat's ppid field). */
function childPids(pid: number): number[] {
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
function cpuMeter(groups: () => Record<string, (number | undefined)[]>, pgBackends: () => Promise<number[]>) {
  return async () => {
    const named = groups();
    const own = Object.values(named).flat();
    const backends = await pgBackends();
    const before = new Map([...own, ...backends].map((p) => [p, cpuSeconds(p)]));
    return async () => {
      const later = await pgBackends();
      const delta = (list: (number | undefined)[]) =>
        list.reduce<number>((sum, p) => sum + (p ? cpuSeconds(p) - (before.get(p) ?? 0) : 0), 0);
      const byGroup = Object.fromEntries(Object.entries(named).map(([k, list]) => [k, delta(list)]));
      return { stack: delta(own), postgres: delta([...new Set([...backends, ...later])]), byGroup };
    };
  };
}

// -------------------------------------------------------------------- helpers

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i] as number;
}

function round(x: number, digits = 1): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** Runs `count` jobs on `concurrency` loops; prints progress every 10 %. */
async function closedLoop(
  label: string,
  count: number,
  concurrency: number,
  job: (i: number) => Promise<void>,
): Promise<number> {
  let next = 0;
  let done = 0;
  const step = Math.max(1, Math.round(count / 10));
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: Math.min(concurrency, count) }, async () => {
      for (let i = next++; i < count; i = next++) {
        if (Date.now() - started > TIMEOUT_MS) throw new Error(`--timeout-seconds exceeded during ${label}`);
        await job(i);
        done++;
        if (done % step === 0 || done === count) say(`  ${label}: ${done}/${count}`);
      }
    }),
  );
  return (performance.now() - t0) / 1000;
}

/**
 * Where the slowest orders spent their time: the longest gaps between
 * consecutive events of each one's history (e.g. a workflow task that waited
 * to be picked up, or an activity that ran long). The tail (p99) is what
 * these show; the median is in the table.
 */
async function slowestReport(
  client: Client,
  orders: { workflowId: string; ms: number }[],
  count: number,
): Promise<void> {
  const worst = [...orders].sort((a, b) => b.ms - a.ms).slice(0, count);
  for (const o of worst) {
    const events = (await client.workflow.getHandle(o.workflowId).fetchHistory()).events ?? [];
    const at = (e: (typeof events)[number]) =>
      Number(e.eventTime?.seconds ?? 0) * 1000 + Math.round((e.eventTime?.nanos ?? 0) / 1e6);
    const type = (e: (typeof events)[number]) =>
      (Object.keys(e).find((k) => k.endsWith('EventAttributes') && e[k as keyof typeof e]) ?? '?').replace(
        /EventAttributes$/,
        '',
      );
    const gaps = events
      .slice(1)
      .map((e, i) => ({ ms: at(e) - at(events[i]!), from: type(events[i]!), to: type(e) }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, 3);
    const span = events.length > 1 ? at(events[events.length - 1]!) - at(events[0]!) : 0;
    say(
      `  slow order ${o.workflowId}: ${Math.round(o.ms)} ms at the client, ${span} ms in its history; ` +
        `longest gaps: ${gaps.map((g) => `${g.from} -> ${g.to} ${g.ms} ms`).join(', ')}`,
    );
  }
}

// ----------------------------------------------------------------------- main

interface LevelResult {
  orders: number;
  ordersPerSec: number;
  p50Ms: number;
  p99Ms: number;
  serverP50Ms: number;
  serverP99Ms: number;
  notCompleted: number;
  baselineWorkflows: number;
  baselineOrdersPerSec: number;
  baselineP50Ms: number;
  baselineP99Ms: number;
  ratio: number;
  cpuPerOrderSec: number;
  postgresCpuPerOrderSec: number;
  cpuPerBaselineSec: number;
  /** CPU seconds per order of each process group (temporal, api, worker, sandbox). */
  cpuPerOrderByProcessSec: Record<string, number>;
  cpuPerBaselineByProcessSec: Record<string, number>;
}

/** CPU seconds this process has used since `start` (process.cpuUsage). */
function cpuSince(start: NodeJS.CpuUsage): number {
  const d = process.cpuUsage(start);
  return (d.user + d.system) / 1e6;
}

function perOrderSec(byGroup: Record<string, number>, n: number): Record<string, number> {
  return Object.fromEntries(Object.entries(byGroup).map(([k, v]) => [k, round(v / n, 4)]));
}

async function main(): Promise<void> {
  const config = loadConfig(process.env, root);
  const runDir = path.join(config.dataDir, 'bench', runId);
  fs.mkdirSync(runDir, { recursive: true });
  say(`run ${runId}; logs in ${path.relative(process.cwd(), runDir)}`);

  const dbName = `onceflow_bench_e2e_${runId}`;
  const database = await createThrowawayDatabase(config.databaseUrl, dbName);
  dropDatabase = database.drop;
  const seedPool = createPool(database.url, { max: 1 });
  try {
    await seedDemoData(seedPool, '127.0.0.1');
  } finally {
    await seedPool.end();
  }
  say(`database ${dbName} created, migrated and seeded`);

  const temporalDbNames = [`${dbName}_temporal`, `${dbName}_temporal_vis`];
  if (BACKEND === 'postgres') {
    if (args.sqlite !== 'wal') say('--sqlite has no effect with --backend=postgres');
    const tools = await ensureTemporalServerTools({ toolsDir: config.toolsDir, log: say });
    const temporalDatabases = {
      postgresUrl: config.temporal.postgres.url,
      database: temporalDbNames[0]!,
      visibilityDatabase: temporalDbNames[1]!,
    };
    dropTemporalDbs = () => dropTemporalDatabases(temporalDatabases);
    if (Object.keys(SERVER.db).length > 0) {
      // Per-database settings apply to every session opened afterwards: set before the server connects.
      const admin = new pg.Client({
        connectionString: withDatabase(temporalDatabases.postgresUrl, 'postgres'),
      });
      await admin.connect();
      try {
        for (const name of temporalDbNames) {
          await ensureDatabase(withDatabase(temporalDatabases.postgresUrl, name));
          for (const [key, value] of Object.entries(SERVER.db)) {
            await admin.query(
              `ALTER DATABASE ${pg.escapeIdentifier(name)} SET ${pg.escapeIdentifier(key)} = ${pg.escapeLiteral(value)}`,
            );
          }
        }
      } finally {
        await admin.end();
      }
      say(`Temporal databases: ${JSON.stringify(SERVER.db)}`);
    }
    const dynamicConfig = {
      ...TEMPORAL_SERVER_DYNAMIC_CONFIG,
      ...(args.eager === 'off' ? { 'system.enableActivityEagerExecution': false } : {}),
      ...SERVER.dynamic,
    };
    const observability = SERVER.observe
      ? { metricsPort: await freePort(), pprofPort: await freePort() }
      : undefined;
    devServer = await startTemporalServerOnFreePorts({
      tools,
      databases: temporalDatabases,
      dataDir: runDir,
      ui: false,
      log: say,
      ...(args.eager === 'off' || Object.keys(SERVER.dynamic).length > 0 ? { dynamicConfig } : {}),
      ...(SERVER.shards !== undefined ? { historyShards: SERVER.shards } : {}),
      ...(SERVER.persistence ? { persistence: SERVER.persistence } : {}),
      ...(observability ? { observability } : {}),
    });
    if (SERVER_TWEAKED) {
      say(
        `server levers: dynamic ${JSON.stringify(SERVER.dynamic)}, shards ${SERVER.shards ?? 'default'}, persistence ${JSON.stringify(SERVER.persistence ?? 'default')}`,
      );
    }
    if (observability) {
      say(
        `server metrics at http://127.0.0.1:${observability.metricsPort}/metrics, pprof at http://127.0.0.1:${observability.pprofPort}/debug/pprof/ (pid ${devServer.process.pid})`,
      );
    }
  } else {
    const cli = await ensureTemporalCli({ toolsDir: config.toolsDir, log: say });
    devServer = await startDevServerOnFreePorts({
      cli,
      ui: false,
      dbFile: path.join(runDir, 'temporal.sqlite'),
      logFile: path.join(runDir, 'temporal.log'),
      log: say,
      ...(args.sqlite === 'default' ? { sqlitePragmas: {} } : {}),
      ...(args.eager === 'off' ? { dynamicConfig: { 'system.enableActivityEagerExecution': 'false' } } : {}),
    });
  }
  const address = devServer.address;
  say(`Temporal ${BACKEND === 'postgres' ? 'server on Postgres' : 'dev server'} at ${address}`);

  // The product worker finds this bundle itself (by hash); building it here shows the cost once.
  const bundle = await ensureWorkflowBundle({ log: say, smoke: true });
  say(`workflow bundle ${bundle.built ? 'built' : 'up to date'}`);

  const ports = {
    api: await freePort(),
    // The API's metrics listener (under --api-processes, the cluster primary's).
    apiMetrics: await freePort(),
    sandbox: await freePort(),
    // Each worker process gets its own pair of metrics ports.
    workers: await Promise.all(
      Array.from({ length: WORKERS }, async () => ({ metrics: await freePort(), sdk: await freePort() })),
    ),
  };
  const taskQueue = `bench-orders-${runId}`;
  const baselineQueue = `bench-baseline-${runId}`;
  const api = `http://127.0.0.1:${ports.api}`;
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    HOME: process.env.HOME,
    DATABASE_URL: database.url,
    TEMPORAL_ADDRESS: address,
    TEMPORAL_TASK_QUEUE: taskQueue,
    API_PORT: String(ports.api),
    API_METRICS_PORT: String(ports.apiMetrics),
    SANDBOX_PORT: String(ports.sandbox),
    SANDBOX_URL: `http://127.0.0.1:${ports.sandbox}`,
    WEBHOOK_URL: `${api}/v1/webhooks/payments`,
    ONCEFLOW_DATA_DIR: runDir,
    API_RATE_LIMIT_MAX: '100000000',
    LOG_LEVEL: 'warn',
    ...(process.env.WEBHOOK_CHARGE_WAIT_MS
      ? { WEBHOOK_CHARGE_WAIT_MS: process.env.WEBHOOK_CHARGE_WAIT_MS }
      : {}),
  };
  const sandbox = startChild('sandbox', ['dev/sandbox/main.ts'], env, runDir);
  await waitForHttp(`${env.SANDBOX_URL}/healthz`, 60_000);
  const connection = await Connection.connect({ address });
  const client = new Client({ connection });
  // Worker start-up, measured alone: spawn -> the smoke workflow has run on it (as `npm start`
  // checks). Includes Node + tsx start, finding the bundle by hash, connecting and polling.
  const workerSpawned = performance.now();
  const workers = ports.workers.map((p, i) =>
    startChild(
      WORKERS > 1 ? `worker-${i + 1}` : 'worker',
      ['src/worker/main.ts'],
      {
        ...env,
        WORKER_SMOKE_WORKFLOW: 'on', // start-up is timed by the smoke workflow, as `npm start` checks
        WORKER_METRICS_PORT: String(p.metrics),
        WORKER_SDK_METRICS_PORT: String(p.sdk),
        ...(WORKERS > 1 ? { ONCEFLOW_PROCESS: `worker-${i + 1}` } : {}),
      },
      runDir,
    ),
  );
  await client.workflow.execute('smokeWorkflow', {
    taskQueue,
    workflowId: `bench-smoke-${runId}`,
    args: [],
    workflowExecutionTimeout: '3 minutes',
  });
  const workerReadySec = round((performance.now() - workerSpawned) / 1000, 1);
  say(`worker ran its first workflow ${workerReadySec} s after spawn`);
  const apiProc =
    API_PROCESSES > 1
      ? startChild('api', ['src/api/cluster.ts'], { ...env, API_PROCESSES: String(API_PROCESSES) }, runDir)
      : startChild('api', ['src/api/main.ts'], env, runDir);
  await waitForHttp(`${api}/healthz`, 60_000);
  let baselineReady!: () => void;
  const baselineStarted = new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('baseline worker did not start')), 120_000);
    baselineReady = () => {
      clearTimeout(timer);
      resolve();
    };
  });
  const baselineWorker = startChild(
    'baseline-worker',
    ['bench/baseline/worker.ts', address, baselineQueue, ...(args['sdk-defaults'] ? ['sdk-defaults'] : [])],
    env,
    runDir,
    (line) => {
      if (line.trim() === 'ready') baselineReady();
    },
  );
  await baselineStarted;

  const pool = createPool(database.url, { max: 2 });
  try {
    say(
      `stack is up: sandbox, ${WORKERS} worker process(es), ${API_PROCESSES} API process(es), baseline worker`,
    );

    // The API cluster's processes are children of its primary: counted one by one (a live
    // child's CPU is not in its parent's /proc stat until it is reaped).
    const stackPids = () => ({
      temporal: [devServer?.process.pid],
      api: [apiProc.pid, ...(API_PROCESSES > 1 && apiProc.pid ? childPids(apiProc.pid) : [])],
      worker: workers.map((w) => w.pid),
      sandbox: [sandbox.pid],
    });
    const pgBackends = async () =>
      (
        await pool.query<{ pid: number }>(
          'select pid from pg_stat_activity where datname = any($1) and pid <> pg_backend_pid()',
          [[dbName, ...(BACKEND === 'postgres' ? temporalDbNames : [])]],
        )
      ).rows.map((r) => r.pid);
    const orderCpu = cpuMeter(stackPids, pgBackends);
    const baselineCpu = cpuMeter(
      () => ({ temporal: [devServer?.process.pid], worker: [baselineWorker.pid] }),
      async () => [],
    );

    let seq = 0;
    /** The last baseline workflow started (its history is counted at the end). */
    let lastBaselineId = '';
    const completedIds: string[] = [];
    /** Every order's latency at the current level, to explain the slowest ones (see slowestReport). */
    let slowest: { workflowId: string; ms: number }[] = [];
    /** With --prefer-wait: orders whose POST answered the outcome (200), and those that needed a GET. */
    const preferAnswers = { outcome: 0, accepted: 0 };
    async function order(latencies: number[], serverLatencies: number[], failures: string[]): Promise<void> {
      const i = seq++;
      const wall0 = Date.now();
      const t0 = performance.now();
      const headers = { authorization: `Bearer ${API_KEY}` };
      const res = await fetch(`${api}/v1/orders`, {
        method: 'POST',
        headers: {
          ...headers,
          'content-type': 'application/json',
          'idempotency-key': `e2e-${runId}-${i}`,
          ...(PREFER_WAIT !== undefined ? { prefer: `wait=${PREFER_WAIT}` } : {}),
        },
        body: JSON.stringify({
          customer: { id: `cus_${i % 17}`, email: `customer${i}@example.com` },
          currency: 'usd',
          items: [{ sku: `SKU-${i % 5}`, quantity: 1 + (i % 3), unitAmount: 1000 + (i % 7) * 250 }],
          paymentMethod: 'pm_card_visa',
        }),
      });
      type View = { id?: string; workflowId?: string; status: string; updatedAt: string };
      const created = (await res.json()) as View;
      // With Prefer: wait, a 200 is the terminal order as GET returns it: no GET needed.
      const answered = PREFER_WAIT !== undefined && res.status === 200;
      if (PREFER_WAIT !== undefined) preferAnswers[answered ? 'outcome' : 'accepted']++;
      if ((res.status !== 202 && !answered) || !created.id) throw new Error(`POST /v1/orders: ${res.status}`);
      let view = created;
      if (!answered) {
        do {
          const r = await fetch(`${api}/v1/orders/${encodeURIComponent(created.id)}?wait=30`, { headers });
          view = (await r.json()) as View;
          if (!r.ok) throw new Error(`GET order: ${r.status}`);
        } while (!(TERMINAL_STATUSES as readonly string[]).includes(view.status));
      }
      latencies.push(performance.now() - t0);
      serverLatencies.push(Date.parse(view.updatedAt) - wall0);
      if (view.status === 'completed') completedIds.push(created.workflowId ?? '');
      if (created.workflowId) slowest.push({ workflowId: created.workflowId, ms: performance.now() - t0 });
      else failures.push(view.status);
    }
    async function baseline(latencies: number[]): Promise<void> {
      const i = seq++;
      const t0 = performance.now();
      const handle = await client.workflow.start('baselineWorkflow', {
        taskQueue: baselineQueue,
        workflowId: (lastBaselineId = `bench-baseline-${runId}-${i}`),
        args: [],
      });
      await handle.result();
      latencies.push(performance.now() - t0);
    }

    say('warm-up: 8 orders and 8 baseline workflows');
    if (!BASELINE_ONLY) await closedLoop('warm-up orders', 8, 4, () => order([], [], []));
    await closedLoop('warm-up baseline', 8, 4, () => baseline([]));
    completedIds.length = 0;
    preferAnswers.outcome = preferAnswers.accepted = 0;

    const results: Record<string, LevelResult> = {};
    const maxLevel = Math.max(...LEVELS);
    for (const c of LEVELS) {
      const n = c === maxLevel ? ORDERS : Math.min(ORDERS, PER_CLIENT_AT_LOW_LEVELS * c);
      // Orders and baseline in ABBA order (half the orders, half the baseline, the other half of
      // the baseline, the other half of the orders): a drift over the level (the machine's speed,
      // the server's growing state) weighs on both sides alike instead of on whichever ran second.
      const halves = [Math.ceil(n / 2), Math.floor(n / 2)] as const;
      /** This process's own CPU (the load generator), per side: not part of the stack's figures. */
      const clientCpu = { orders: 0, baseline: 0 };
      say(
        `concurrency ${c}: ${n} orders and ${n} baseline workflows, in halves (orders, baseline, baseline, orders)`,
      );
      const lat: number[] = [];
      const serverLat: number[] = [];
      const failures: string[] = [];
      const bLat: number[] = [];
      slowest = [];
      let orderSecs = 0;
      let baselineSecs = 0;
      const oCpu = { stack: 0, postgres: 0, byGroup: {} as Record<string, number> };
      const bCpu = { stack: 0, postgres: 0, byGroup: {} as Record<string, number> };
      const add = (into: typeof oCpu, part: typeof oCpu) => {
        into.stack += part.stack;
        into.postgres += part.postgres;
        for (const [k, v] of Object.entries(part.byGroup)) into.byGroup[k] = (into.byGroup[k] ?? 0) + v;
      };
      const runOrders = async (count: number, label: string) => {
        if (BASELINE_ONLY || count === 0) return;
        const stop = await orderCpu();
        const client0 = process.cpuUsage();
        orderSecs += await closedLoop(`orders c=${c} (${label})`, count, c, () =>
          order(lat, serverLat, failures),
        );
        add(oCpu, await stop());
        clientCpu.orders += cpuSince(client0);
      };
      const runBaseline = async (count: number, label: string) => {
        if (count === 0) return;
        const stop = await baselineCpu();
        const client0 = process.cpuUsage();
        baselineSecs += await closedLoop(`baseline c=${c} (${label})`, count, c, () => baseline(bLat));
        add(bCpu, await stop());
        clientCpu.baseline += cpuSince(client0);
      };
      await runOrders(halves[0], 'first half');
      await runBaseline(halves[0], 'first half');
      await runBaseline(halves[1], 'second half');
      await runOrders(halves[1], 'second half');
      if (BASELINE_ONLY) orderSecs = Number.NaN;

      if (!BASELINE_ONLY) await slowestReport(client, slowest, SLOWEST_SHOWN);
      lat.sort((a, b) => a - b);
      serverLat.sort((a, b) => a - b);
      bLat.sort((a, b) => a - b);
      const ordersPerSec = n / orderSecs;
      const baselineOrdersPerSec = n / baselineSecs;
      results[String(c)] = {
        orders: n,
        ordersPerSec: round(ordersPerSec, 2),
        p50Ms: round(percentile(lat, 50), 0),
        p99Ms: round(percentile(lat, 99), 0),
        serverP50Ms: round(percentile(serverLat, 50), 0),
        serverP99Ms: round(percentile(serverLat, 99), 0),
        notCompleted: failures.length,
        baselineWorkflows: n,
        baselineOrdersPerSec: round(baselineOrdersPerSec, 2),
        baselineP50Ms: round(percentile(bLat, 50), 0),
        baselineP99Ms: round(percentile(bLat, 99), 0),
        ratio: round(ordersPerSec / baselineOrdersPerSec, 3),
        cpuPerOrderSec: round(oCpu.stack / n, 3),
        postgresCpuPerOrderSec: round(oCpu.postgres / n, 3),
        cpuPerBaselineSec: round(bCpu.stack / n, 3),
        cpuPerOrderByProcessSec: perOrderSec({ ...oCpu.byGroup, loadGenerator: clientCpu.orders }, n),
        cpuPerBaselineByProcessSec: perOrderSec({ ...bCpu.byGroup, loadGenerator: clientCpu.baseline }, n),
      };
      const r = results[String(c)]!;
      say(
        `concurrency ${c}: ${r.ordersPerSec} orders/s (p50 ${r.p50Ms} ms, p99 ${r.p99Ms} ms), ` +
          `baseline ${r.baselineOrdersPerSec}/s, ratio ${r.ratio}, CPU ${r.cpuPerOrderSec} s/order ` +
          `(+ Postgres ${r.postgresCpuPerOrderSec})${failures.length ? `, ${failures.length} not completed` : ''}`,
      );
      say(
        `  CPU s/order by process: ${Object.entries(r.cpuPerOrderByProcessSec)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}; baseline: ${Object.entries(r.cpuPerBaselineByProcessSec)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ')}`,
      );
    }

    // History events: what each order costs the Temporal server, by event type.
    const sample = completedIds.filter(Boolean).slice(0, HISTORY_SAMPLES);
    const typeCounts: Record<string, number> = {};
    let events = 0;
    for (const workflowId of sample) {
      const history = await client.workflow.getHandle(workflowId).fetchHistory();
      for (const e of history.events ?? []) {
        // The event's type, from the one `...EventAttributes` field it carries.
        const attrs = Object.keys(e).find((k) => k.endsWith('EventAttributes') && e[k as keyof typeof e]);
        const short = attrs ? attrs.replace(/EventAttributes$/, '') : String(e.eventType);
        typeCounts[short] = (typeCounts[short] ?? 0) + 1;
        events++;
      }
    }
    const baselineHistory = await client.workflow.getHandle(lastBaselineId).fetchHistory();
    // What the provider's webhook events did, over every order of the run (warm-up included):
    // `signalled` ones cost a signal, a history write and a workflow task each.
    const webhookRows = await pool.query<{ outcome: string; n: number }>(
      'select outcome, count(*)::int as n from webhook_events group by outcome order by outcome',
    );
    const orderCount =
      (await pool.query<{ n: number }>('select count(*)::int as n from orders')).rows[0]?.n ?? 0;
    const webhookOutcomesPerOrder = Object.fromEntries(
      webhookRows.rows.map((r) => [r.outcome, round(r.n / Math.max(1, orderCount), 3)]),
    );
    const perOrder = Object.fromEntries(
      Object.entries(typeCounts)
        .sort((a, b) => b[1] - a[1])
        .map(([k, v]) => [k, round(v / Math.max(1, sample.length), 1)]),
    );

    const top = results[String(maxLevel)]!;
    const c1 = results['1'];
    const report = {
      generatedAt: new Date().toISOString(),
      machine: {
        cpus: os.cpus().length,
        cpuModel: os.cpus()[0]?.model ?? 'unknown',
        loadAverage1m: round(os.loadavg()[0] ?? 0, 2),
        node: process.version,
      },
      options: {
        orders: ORDERS,
        concurrency: LEVELS,
        quick: Boolean(args.quick),
        baselineOnly: BASELINE_ONLY,
        sqlite: args.sqlite,
        eager: args.eager,
        backend: BACKEND,
        baselineWorker: args['sdk-defaults'] ? 'sdk-defaults' : 'tuned',
        workers: WORKERS,
        apiProcesses: API_PROCESSES,
        preferWait: PREFER_WAIT ?? null,
        ...(SERVER_TWEAKED
          ? {
              server: {
                dynamic: SERVER.dynamic,
                shards: SERVER.shards ?? null,
                persistence: SERVER.persistence ?? null,
                db: SERVER.db,
              },
            }
          : {}),
      },
      // With --prefer-wait: how many POSTs answered the outcome (200), and how many a 202.
      ...(PREFER_WAIT !== undefined ? { preferWaitAnswers: { ...preferAnswers } } : {}),
      workerReadySec,
      concurrency: results,
      cpuPerOrderSec: top.cpuPerOrderSec,
      postgresCpuPerOrderSec: top.postgresCpuPerOrderSec,
      historyEventsPerOrder: round(events / Math.max(1, sample.length), 1),
      historyEventTypesPerOrder: perOrder,
      baselineHistoryEvents: baselineHistory.events?.length ?? 0,
      webhookOutcomesPerOrder,
      targets: {
        ordersPerSecAt32: { target: 12, measured: results['32']?.ordersPerSec ?? null },
        ratioAt32: { target: 1.0, measured: results['32']?.ratio ?? null },
        p50MsAt1: { target: 400, measured: c1?.p50Ms ?? null },
        p99MsAt32: { target: 4000, measured: results['32']?.p99Ms ?? null },
        cpuPerOrderSec: { target: 0.15, measured: results['32']?.cpuPerOrderSec ?? null },
        // Issue #29: Prefer: wait=10 at C=1, POST to response (the outcome).
        ...(PREFER_WAIT !== undefined
          ? { preferWaitP50MsAt1: { target: 150, preferWait: PREFER_WAIT, measured: c1?.p50Ms ?? null } }
          : {}),
      },
    };
    printTable(results);
    if (PREFER_WAIT !== undefined) {
      say(
        `Prefer: wait=${PREFER_WAIT}: ${preferAnswers.outcome} POSTs answered the outcome (200), ` +
          `${preferAnswers.accepted} a 202 (then GET ?wait=)`,
      );
    }
    say(
      `history events per order: ${report.historyEventsPerOrder} (baseline ${report.baselineHistoryEvents}); ` +
        Object.entries(perOrder)
          .map(([k, v]) => `${k} ${v}`)
          .join(', '),
    );
    say(
      `webhook events per order, by outcome: ${
        Object.entries(webhookOutcomesPerOrder)
          .map(([k, v]) => `${k} ${v}`)
          .join(', ') || 'none'
      }`,
    );
    const variant = [
      BASELINE_ONLY ? 'baseline' : '',
      BACKEND === 'postgres' ? 'postgres' : '',
      args.sqlite === 'default' ? 'sqlite-default' : '',
      args.eager === 'off' ? 'eager-off' : '',
      args['sdk-defaults'] ? 'sdk-defaults' : '',
      WORKERS > 1 ? `workers${WORKERS}` : '',
      API_PROCESSES > 1 ? `api${API_PROCESSES}` : '',
      PREFER_WAIT !== undefined ? `prefer-wait${PREFER_WAIT}` : '',
      SERVER_TWEAKED ? 'server-levers' : '',
    ]
      .filter(Boolean)
      .join('-');
    // Only a full, untweaked run writes e2e.json; variants get a file of their own.
    const out = path.join(root, `bench/results/e2e${variant ? `-${variant}` : ''}.json`);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    say(`wrote ${path.relative(process.cwd(), out)} in ${Math.round((Date.now() - started) / 1000)} s`);
  } finally {
    await pool.end().catch(() => undefined);
    await connection.close().catch(() => undefined);
  }
  await cleanup();
  fs.rmSync(runDir, { recursive: true, force: true });
}

function printTable(results: Record<string, LevelResult>): void {
  const header = ['C', 'orders/s', 'p50 ms', 'p99 ms', 'server p50', 'baseline/s', 'ratio', 'CPU s/order'];
  const lines = [header];
  for (const [c, r] of Object.entries(results)) {
    lines.push([
      c,
      String(r.ordersPerSec),
      String(r.p50Ms),
      String(r.p99Ms),
      String(r.serverP50Ms),
      String(r.baselineOrdersPerSec),
      r.ratio.toFixed(2),
      String(r.cpuPerOrderSec),
    ]);
  }
  const widths = header.map((_, i) => Math.max(...lines.map((l) => (l[i] ?? '').length)));
  console.log('');
  for (const l of lines) console.log(l.map((cell, i) => cell.padStart(widths[i] ?? 0)).join('  '));
  console.log('');
}

try {
  await main();
} catch (err) {
  say(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  await cleanup();
  process.exit(1);
}
