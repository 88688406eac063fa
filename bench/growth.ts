/**
 * Growth benchmark (not a test): does the cost of an order stay flat as the
 * data grows? (issue #29, item 3)
 *
 *   npm run bench:growth [-- --preload-orders=200000] [--soak-orders=20000] [--quick] [--skip-soak]
 *
 * One run, one Temporal dev server, two product stacks (sandbox, worker, API;
 * started as bench/e2e.ts starts its stack, bench/lib/stack.ts), each on a
 * throwaway database of its own, dropped at the end:
 * - `preloaded`: a week of history made set-based (bench/lib/growth-preload.ts):
 *   by default 200,000 orders over 4 tenants and 7 days, with their ledger
 *   records (about 1.2 M), outbox rows and webhook events, copied from real
 *   orders of the stack (mostly completed; some rejected; a few
 *   needs_attention with an unknown charge);
 * - `empty`: only the demo tenants.
 * Then, alternating empty, preloaded, preloaded, empty (ABBA, so a drift of
 * the shared machine weighs on both), each phase measures:
 * - throughput: POST /v1/orders to `completed`, a closed loop of C clients;
 * - GET /v1/orders/{id} latency, one at a time, of the phase's new orders and
 *   (preloaded) of orders of the preload;
 * - the webhook route's latency: sandbox-shaped `charge.succeeded` events,
 *   signed as the sandbox signs them, for completed orders (outcome
 *   `charge_settled`, the common case), one at a time;
 * - the API's /metrics scrape (the backlog gauges' queries), one at a time.
 * Ratios are preloaded / empty. Then the soak, on the preloaded database (the
 * empty stack stopped): `--soak-warmup` orders first, reported apart, then
 * `--soak-orders` at C, with throughput, CPU per order and each process's RSS
 * per tenth. Last, retention's prune rate on the preloaded
 * database (each table's real prune function, bounded batches) against the
 * soak's insert rate. Writes bench/results/growth.json (a --quick run:
 * growth-quick.json). Progress goes to stderr; the table and the result to stdout.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { Client, Connection } from '@temporalio/client';
import { loadConfig } from '../src/config.ts';
import { createPool, type Pool } from '../src/db/index.ts';
import { DEMO_TENANTS } from '../src/api/demo-keys.ts';
import { insertTenant } from '../src/tenants/sql.ts';
import { Ledger } from 'onceflow';
import { pruneOutbox, pruneWebhookEvents } from '../src/retention/prune.ts';
import { DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCHES } from '../src/retention/schedule.ts';
import { SIGNATURE_HEADER, signWebhook } from '../src/providers/webhook-signature.ts';
import { ensureWorkflowBundle } from '../src/worker/bundle.ts';
import { createCommand, parseCli } from '../src/cli/command.ts';
import { preload, type TemplateOrder } from './lib/growth-preload.ts';
import {
  BenchProcesses,
  ROOT,
  childPids,
  closedLoop,
  cpuMeter,
  createSeededDatabase,
  intInRange,
  orderToTerminal,
  percentile,
  positiveInt,
  printColumns,
  round,
  startOrderStack,
  startTemporal,
  type OrderStack,
} from './lib/stack.ts';
import { HostProbe, type HostProbeReading } from './lib/host-probe.ts';

const program = createCommand(
  'bench:growth',
  'Growth benchmark: a preloaded database (a week of history) against an empty one in the same run, ' +
    'then a soak (see docs/BENCHMARKS.md, "Growth").',
)
  .option(
    '--preload-orders <n>',
    'orders of history in the preloaded database (6 ledger records each)',
    '200000',
  )
  // 2,000: at 400 a phase's half lasted about 10 s, and the throughput ratio moved from 0.87 to 1.13
  // between runs; at 2,000 (about 40 s a half) it read 0.99 (docs/BENCHMARKS.md, Growth).
  .option('--orders <n>', 'orders per database in the throughput phases (C clients)', '2000')
  .option('--concurrency <n>', 'clients in the throughput phases and the soak', '32')
  // 2,000: a p99 of 400 one-at-a-time GETs is the 4th-slowest request, and read 0.34-1.69 across
  // runs on the same code; of 2,000 it is the 20th (docs/BENCHMARKS.md, Growth).
  .option('--gets <n>', 'GET /v1/orders/{id} per database and kind of order', '2000')
  .option('--webhooks <n>', 'signed webhook events per database', '300')
  .option('--scrapes <n>', '/metrics scrapes per database', '40')
  .option('--soak-orders <n>', 'orders in the soak, on the preloaded database', '20000')
  .option(
    '--soak-warmup <n>',
    'orders run before the soak starts counting, reported apart (0: none; see docs/BENCHMARKS.md, Growth)',
    '2000',
  )
  .option('--skip-soak', 'no soak', false)
  .option('--prune-batches <n>', 'retention batches (1,000 rows) per table for the prune rate', '30')
  .option('--quick', 'a smoke run: 5,000 preloaded orders, 64 per phase, a soak of 400', false)
  .option('--timeout-seconds <n>', 'give up after this long', '5400')
  .option(
    '--keep-databases',
    'leave both databases for EXPLAIN ANALYZE (their names are printed; drop them yourself)',
    false,
  )
  .addHelpText('after', '\nRun as: npm run bench:growth [-- options], e.g. npm run bench:growth -- --quick');
parseCli(program);
const opts = program.opts<{
  preloadOrders: string;
  orders: string;
  concurrency: string;
  gets: string;
  webhooks: string;
  scrapes: string;
  soakOrders: string;
  soakWarmup: string;
  skipSoak: boolean;
  pruneBatches: string;
  quick: boolean;
  timeoutSeconds: string;
  keepDatabases: boolean;
}>();
const QUICK = opts.quick;
const PRELOAD_ORDERS = QUICK ? 5_000 : positiveInt(opts.preloadOrders, '--preload-orders', 5_000_000);
const ORDERS = QUICK ? 64 : positiveInt(opts.orders, '--orders', 20_000);
const C = positiveInt(opts.concurrency, '--concurrency', 256);
const GETS = QUICK ? 100 : positiveInt(opts.gets, '--gets', 100_000);
const WEBHOOKS = QUICK ? 60 : positiveInt(opts.webhooks, '--webhooks', 100_000);
const SCRAPES = QUICK ? 10 : positiveInt(opts.scrapes, '--scrapes', 10_000);
const SOAK = opts.skipSoak ? 0 : QUICK ? 400 : positiveInt(opts.soakOrders, '--soak-orders', 1_000_000);
const SOAK_WARMUP = SOAK === 0 ? 0 : QUICK ? 40 : intInRange(opts.soakWarmup, '--soak-warmup', 0, 1_000_000);
const PRUNE_BATCHES = QUICK ? 3 : positiveInt(opts.pruneBatches, '--prune-batches', 500);
const TIMEOUT_MS = positiveInt(opts.timeoutSeconds, '--timeout-seconds', 14_400) * 1000;
/** The preload's tenants: the demo tenants (whose keys the API knows) and two more. */
const TENANTS = ['acme', 'globex', 'growth_c', 'growth_d'] as const;
const KEYS: Record<string, string> = Object.fromEntries(DEMO_TENANTS.map((t) => [t.id, t.key]));
const API_KEY = DEMO_TENANTS[0].key;
const runId = `${process.pid}_${randomBytes(3).toString('hex')}`;
const started = Date.now();
const deadline = started + TIMEOUT_MS;

/** Progress on stderr: stdout carries the table. */
const say = (line: string) => console.error(`[growth] ${line}`);
const procs = new BenchProcesses(say);

// -------------------------------------------------------------- measurements

type DbName = 'empty' | 'preloaded';

interface Side {
  name: DbName;
  url: string;
  pool: Pool;
  stack: OrderStack;
  /** Orders this run created on this side, completed (for GETs and webhooks). */
  completed: { id: string; tenantId: string }[];
  samples: {
    orderSecs: number;
    orders: number;
    notCompleted: number;
    orderMs: number[];
    getNewMs: number[];
    getPreloadedMs: number[];
    webhookMs: number[];
    webhookOutcomes: Record<string, number>;
    scrapeMs: number[];
  };
}

async function timed(what: string, f: () => Promise<Response>): Promise<number> {
  const t0 = performance.now();
  const res = await f();
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`${what}: ${res.status}`);
  return performance.now() - t0;
}

let seq = 0;
async function throughput(side: Side, n: number): Promise<void> {
  side.samples.orderSecs += await closedLoop(
    `${side.name}: orders c=${C}`,
    n,
    C,
    async () => {
      const i = seq++;
      const o = await orderToTerminal(side.stack.api, {
        apiKey: API_KEY,
        idempotencyKey: `growth-${runId}-${i}`,
        i,
      });
      side.samples.orderMs.push(o.ms);
      if (o.status === 'completed') side.completed.push({ id: o.id, tenantId: 'acme' });
      else side.samples.notCompleted++;
    },
    { say, deadline },
  );
  side.samples.orders += n;
}

/** Orders of the preload, of the tenants whose keys the API knows, picked at random. */
async function preloadedSample(pool: Pool, n: number): Promise<{ id: string; tenantId: string }[]> {
  const { rows } = await pool.query<{ id: string; tenant_id: string }>(
    `select id, tenant_id from orders tablesample system (5)
      where tenant_id = any($1) and status = 'completed' limit $2`,
    [Object.keys(KEYS), n],
  );
  return rows.map((r) => ({ id: r.id, tenantId: r.tenant_id }));
}

async function gets(side: Side, orders: { id: string; tenantId: string }[], into: number[]): Promise<void> {
  for (const o of orders) {
    if (Date.now() > deadline) throw new Error('--timeout-seconds exceeded during the GETs');
    into.push(
      await timed('GET /v1/orders/{id}', () =>
        fetch(`${side.stack.api}/v1/orders/${o.id}`, {
          headers: { authorization: `Bearer ${KEYS[o.tenantId]}` },
        }),
      ),
    );
  }
}

/**
 * Signed `charge.succeeded` events for completed orders, as the sandbox sends
 * them (its stored event of a template order, with this order's charge: id,
 * amount, currency, downstream key, metadata), each with a new event ID: the
 * common case of a webhook that arrives after the charge's own answer.
 */
async function webhooks(side: Side, orders: { id: string; tenantId: string }[]): Promise<void> {
  const { rows } = await side.pool.query<{ id: string; type: string; object: Record<string, unknown> }>(
    `with template as (
       select object from sandbox.webhook_events where type = 'charge.succeeded' order by created_at limit 1)
     select 'evt_growth_' || md5(random()::text) as id, 'charge.succeeded' as type,
            t.object || jsonb_build_object('id', o.charge_id, 'amount', o.amount, 'currency', o.currency,
                          'idempotency_key', op.downstream_key,
                          'metadata', coalesce(t.object->'metadata', '{}') ||
                                      jsonb_build_object('order_id', o.id, 'tenant_id', o.tenant_id)) as object
       from template t, unnest($1::text[], $2::text[]) as w(tenant_id, id)
       join orders o on o.tenant_id = w.tenant_id and o.id = w.id
       join operations op on op.tenant_id = o.tenant_id and op.operation_type = 'payment.charge'
                         and op.key = o.workflow_id || '/charge'`,
    [orders.map((o) => o.tenantId), orders.map((o) => o.id)],
  );
  if (rows.length === 0) throw new Error(`${side.name}: no webhook event to send`);
  const secret = loadConfig(side.stack.env, ROOT).webhookSecret;
  for (const e of rows) {
    if (Date.now() > deadline) throw new Error('--timeout-seconds exceeded during the webhooks');
    const body = JSON.stringify({
      id: e.id,
      object: 'event',
      type: e.type,
      created: Math.floor(Date.now() / 1000),
      data: { object: e.object },
    });
    const t0 = performance.now();
    const res = await fetch(`${side.stack.api}/v1/webhooks/payments`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        [SIGNATURE_HEADER]: signWebhook(secret, body, Math.floor(Date.now() / 1000)),
      },
      body,
    });
    const ack = (await res.json()) as { outcome?: string };
    side.samples.webhookMs.push(performance.now() - t0);
    const outcome = res.ok ? (ack.outcome ?? '?') : `http_${res.status}`;
    side.samples.webhookOutcomes[outcome] = (side.samples.webhookOutcomes[outcome] ?? 0) + 1;
  }
}

async function scrapes(side: Side, n: number): Promise<void> {
  for (let i = 0; i < n; i++) {
    side.samples.scrapeMs.push(await timed('GET /metrics', () => fetch(`${side.stack.apiMetrics}/metrics`)));
  }
}

/** One phase of one side: throughput, then the latencies, one request at a time. */
async function phase(side: Side, part: 0 | 1): Promise<void> {
  const half = (n: number) => (part === 0 ? Math.ceil(n / 2) : Math.floor(n / 2));
  say(
    `phase: ${side.name} (${part === 0 ? 'first' : 'second'} half), load average ${os.loadavg()[0]?.toFixed(2)}`,
  );
  const before = side.completed.length;
  await throughput(side, half(ORDERS));
  const fresh = side.completed.slice(before);
  const pick = (n: number) => Array.from({ length: n }, (_, i) => fresh[i % fresh.length]!);
  await gets(side, pick(half(GETS)), side.samples.getNewMs);
  if (side.name === 'preloaded') {
    await gets(side, await preloadedSample(side.pool, half(GETS)), side.samples.getPreloadedMs);
  }
  // Half the events for new orders, half (preloaded) for orders of the preload.
  const events = half(WEBHOOKS);
  const old = side.name === 'preloaded' ? await preloadedSample(side.pool, Math.floor(events / 2)) : [];
  await webhooks(side, [...pick(events - old.length), ...old]);
  await scrapes(side, half(SCRAPES));
}

function stats(ms: number[]) {
  const s = [...ms].sort((a, b) => a - b);
  return { n: s.length, p50Ms: round(percentile(s, 50), 1), p99Ms: round(percentile(s, 99), 1) };
}

// ---------------------------------------------------------------------- soak

/** Resident memory of a process (VmRSS) and its private part (RssAnon), in MiB; 0 once gone. */
function rssMb(pid: number | undefined): { rss: number; anon: number } {
  if (!pid) return { rss: 0, anon: 0 };
  try {
    const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? 0);
    return { rss: round(kb('VmRSS') / 1024, 1), anon: round(kb('RssAnon') / 1024, 1) };
  } catch {
    return { rss: 0, anon: 0 };
  }
}

interface Tenth {
  orders: number;
  ordersPerSec: number;
  loadAverage1m: number;
  /**
   * VmRSS in MiB per process, the mean of samples every RSS_SAMPLE_MS over the tenth; Postgres:
   * the RssAnon sum of the database's backends (shared buffers excluded). A Node process's RSS
   * moves by up to a quarter with its garbage collector's cycle, so one reading per tenth says
   * more about where the collector was than about growth.
   */
  rssMb: Record<string, number>;
  /** The same, read once at the tenth's end (what rounds before round 10 reported as rssMb). */
  rssEndMb: Record<string, number>;
  /** How many samples the mean has. */
  rssSamples: number;
  /**
   * CPU seconds (user + system) per order over the tenth, by process and in all (`total`,
   * Postgres backends included): where a change in orders/s went. CPU time taken by the host's
   * other tenants lowers orders/s and not this; a host whose CPU-seconds run faster lowers both
   * (the machine is CPU-bound, so orders/s times this stays near two cores' worth).
   */
  cpuSecPerOrder: Record<string, number>;
  /**
   * The host over the tenth (bench/lib/host-probe.ts): the mean CPU time of one fixed unit of
   * work (how fast a CPU-second was), and the machine's idle and steal shares.
   */
  hostProbe: HostProbeReading;
}

interface Soak {
  /** The orders run before the first tenth, with their rate and the memory at their end. */
  warmup: {
    orders: number;
    ordersPerSec: number;
    rssEndMb: Record<string, number>;
    hostProbe: HostProbeReading;
  } | null;
  tenths: Tenth[];
  /** The counted orders' time, the warm-up's not included. */
  seconds: number;
}

/** A tenth with more of the machine idle than this was not CPU-bound (bench/lib/host-probe.ts). */
const MAX_IDLE_PCT_CPU_BOUND = 10;

/** How often the soak reads each process's memory. */
const RSS_SAMPLE_MS = 2_000;

async function soak(side: Side, temporalPid: () => number | undefined, probe: HostProbe): Promise<Soak> {
  const tenths: Tenth[] = [];
  // The database's backends, as the last memory sample found them (the pools keep theirs).
  let backends: number[] = [];
  const memory = async (): Promise<Record<string, number>> => {
    const api = side.stack.apiProc.pid;
    backends = (
      await side.pool.query<{ pid: number }>(
        'select pid from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()',
      )
    ).rows.map((r) => r.pid);
    return {
      api: round(
        [api, ...(api ? childPids(api) : [])].reduce<number>((s, p) => s + rssMb(p).rss, 0),
        1,
      ),
      worker: round(
        side.stack.workers.reduce((s, w) => s + rssMb(w.pid).rss, 0),
        1,
      ),
      temporal: rssMb(temporalPid()).rss,
      sandbox: rssMb(side.stack.sandbox.pid).rss,
      postgresBackends: round(
        backends.reduce((s, p) => s + rssMb(p).anon, 0),
        1,
      ),
      postgresBackendCount: backends.length,
    };
  };
  // CPU per tenth: a meter started at each tenth's boundary and read at the next.
  const meter = cpuMeter(
    () => {
      const api = side.stack.apiProc.pid;
      return {
        api: [api, ...(api ? childPids(api) : [])],
        worker: side.stack.workers.map((w) => w.pid),
        temporal: [temporalPid()],
        sandbox: [side.stack.sandbox.pid],
      };
    },
    () => Promise.resolve(backends),
  );
  const order = async () => {
    const i = seq++;
    const o = await orderToTerminal(side.stack.api, {
      apiKey: API_KEY,
      idempotencyKey: `growth-${runId}-${i}`,
      i,
    });
    if (o.status !== 'completed') side.samples.notCompleted++;
  };

  await memory();
  let warmup: Soak['warmup'] = null;
  if (SOAK_WARMUP > 0) {
    // The processes size their heaps and caches to the load over the first few thousand orders
    // (docs/BENCHMARKS.md, Growth): run those first, so that the first tenth compares like with like.
    const secs = await closedLoop(`soak warm-up c=${C}`, SOAK_WARMUP, C, order, { say, deadline });
    warmup = {
      orders: SOAK_WARMUP,
      ordersPerSec: round(SOAK_WARMUP / secs, 2),
      rssEndMb: await memory(),
      hostProbe: probe.take(),
    };
    say(`  soak warm-up: ${SOAK_WARMUP} orders, ${warmup.ordersPerSec} orders/s (not counted in the tenths)`);
  }

  let last = { t: performance.now(), done: 0 };
  let cpuSince = meter();
  probe.take(); // the first tenth's probe samples start with its orders
  let pending: Promise<void> = Promise.resolve();
  // The current tenth's samples: summed per process, averaged when the tenth ends.
  let samples = { n: 0, sum: {} as Record<string, number> };
  let sampling: Promise<void> = Promise.resolve();
  const sampler = setInterval(() => {
    sampling = sampling
      .then(async () => {
        const m = await memory();
        for (const [k, v] of Object.entries(m)) samples.sum[k] = (samples.sum[k] ?? 0) + v;
        samples.n++;
      })
      .catch((err: unknown) => say(`  soak: a memory sample failed (${String(err)}); skipped`));
  }, RSS_SAMPLE_MS);
  let secs: number;
  try {
    secs = await closedLoop(`soak c=${C}`, SOAK, C, order, {
      say,
      deadline,
      onTenth: (done) => {
        const now = performance.now();
        const used = cpuSince.then((read) => read());
        cpuSince = meter();
        const n = done - last.done;
        const rate = n / ((now - last.t) / 1000);
        last = { t: now, done };
        const hostProbe = probe.take();
        pending = pending.then(async () => {
          const { stack, postgres, byGroup } = await used;
          const cpuSecPerOrder = Object.fromEntries(
            Object.entries({ total: stack + postgres, ...byGroup, postgres }).map(([k, v]) => [
              k,
              round(v / n, 4),
            ]),
          );
          await sampling;
          const rssEndMb = await memory();
          const taken = samples;
          samples = { n: 0, sum: {} };
          const tenth: Tenth = {
            orders: done,
            ordersPerSec: round(rate, 2),
            loadAverage1m: round(os.loadavg()[0] ?? 0, 2),
            rssMb:
              taken.n === 0
                ? rssEndMb
                : Object.fromEntries(Object.entries(taken.sum).map(([k, v]) => [k, round(v / taken.n, 1)])),
            rssEndMb,
            rssSamples: taken.n,
            cpuSecPerOrder,
            hostProbe,
          };
          tenths.push(tenth);
          say(
            `  soak: ${done}/${SOAK}, ${tenth.ordersPerSec} orders/s, CPU ${cpuSecPerOrder.total} s/order, probe ${hostProbe.cpuMsPerUnit} ms, idle ${hostProbe.idlePct} %, mean RSS MiB ${Object.entries(
              tenth.rssMb,
            )
              .map(([k, v]) => `${k} ${v}`)
              .join(', ')}`,
          );
        });
      },
    });
  } finally {
    clearInterval(sampler);
  }
  await sampling;
  await pending;
  say(`soak: ${SOAK} orders in ${round(secs, 1)} s`);
  return { warmup, tenths, seconds: secs };
}

// ----------------------------------------------------------------- retention

/**
 * Retention's own prune functions on the preloaded database, bounded: rows
 * older than a day (most of the preload), `PRUNE_BATCHES` batches of 1,000
 * per table. Rows per second each.
 */
async function pruneRate(pool: Pool): Promise<Record<string, { deleted: number; rowsPerSec: number }>> {
  const olderThanMs = 24 * 3600 * 1000;
  const o = { olderThanMs, batchSize: 1000, maxBatches: PRUNE_BATCHES };
  const out: Record<string, { deleted: number; rowsPerSec: number }> = {};
  const ledger = new Ledger(pool);
  for (const [table, run] of [
    ['operations', () => ledger.reap(o)],
    ['workflow_outbox', () => pruneOutbox(pool, o)],
    ['webhook_events', () => pruneWebhookEvents(pool, o)],
  ] as const) {
    const t0 = performance.now();
    const r = await run();
    const secs = (performance.now() - t0) / 1000;
    out[table] = { deleted: r.deleted, rowsPerSec: Math.round(r.deleted / secs) };
    say(`retention: ${table} ${r.deleted} rows in ${round(secs, 2)} s`);
  }
  return out;
}

// ----------------------------------------------------------------------- main

async function main(): Promise<void> {
  const config = loadConfig(process.env, ROOT);
  const runDir = path.join(config.dataDir, 'bench', `growth-${runId}`);
  fs.mkdirSync(runDir, { recursive: true });
  say(
    `run ${runId}; logs in ${path.relative(process.cwd(), runDir)}; load average ${os.loadavg().join(' ')}`,
  );
  const loadAtStart = round(os.loadavg()[0] ?? 0, 2);

  const dbBase = `onceflow_bench_growth_${runId}`;
  const urls = {
    empty: await createSeededDatabase(config, `${dbBase}_empty`, procs, opts.keepDatabases),
    preloaded: await createSeededDatabase(config, `${dbBase}_preloaded`, procs, opts.keepDatabases),
  };
  if (opts.keepDatabases) say(`keeping the databases ${dbBase}_empty and ${dbBase}_preloaded`);
  for (const url of Object.values(urls)) {
    const pool = createPool(url, { max: 1 });
    try {
      for (const id of TENANTS) await insertTenant(pool, { id, name: `${id} (growth bench)` });
    } finally {
      await pool.end();
    }
  }
  say('databases created, migrated and seeded');

  const temporal = await startTemporal(config, { backend: 'dev', dbName: dbBase, runDir }, procs, say);
  const bundle = await ensureWorkflowBundle({ log: say, smoke: true });
  say(`Temporal dev server at ${temporal.address}; workflow bundle ${bundle.built ? 'built' : 'up to date'}`);
  const connection = await Connection.connect({ address: temporal.address });
  const client = new Client({ connection });
  const sides: Record<DbName, Side> = {} as Record<DbName, Side>;
  try {
    for (const name of ['empty', 'preloaded'] as const) {
      const stack = await startOrderStack(
        {
          databaseUrl: urls[name],
          address: temporal.address,
          runDir,
          taskQueue: `bench-growth-${name}-${runId}`,
          workers: 1,
          apiProcesses: 1,
          name,
          client,
        },
        procs,
      );
      sides[name] = {
        name,
        url: urls[name],
        // No client-side query timeout: the preload lifts statement_timeout for minutes-long statements.
        pool: createPool(urls[name], { max: 2, query_timeout: 0 }),
        stack,
        completed: [],
        samples: {
          orderSecs: 0,
          orders: 0,
          notCompleted: 0,
          orderMs: [],
          getNewMs: [],
          getPreloadedMs: [],
          webhookMs: [],
          webhookOutcomes: {},
          scrapeMs: [],
        },
      };
      say(`${name} stack is up (worker ready in ${stack.workerReadySec} s)`);
    }
    const { empty, preloaded } = sides;

    // Templates: real orders through the preloaded side's stack, which the preload copies. The same
    // orders on the empty side, so both have warmed up alike.
    const kinds = ['completed', 'completed', 'completed', 'completed', 'rejected', 'rejected'] as const;
    const templates: TemplateOrder[] = [];
    for (const side of [empty, preloaded]) {
      for (const [k, kind] of kinds.entries()) {
        const idempotencyKey = `growth-template-${runId}-${k}`;
        const o = await orderToTerminal(side.stack.api, {
          apiKey: API_KEY,
          idempotencyKey,
          i: k,
          ...(kind === 'rejected' ? { paymentMethod: 'pm_card_chargeDeclined' } : {}),
        });
        const expected = kind === 'completed' ? 'completed' : 'rejected';
        if (o.status !== expected) throw new Error(`template order ${k}: ${o.status}, expected ${expected}`);
        if (side === preloaded) templates.push({ tenantId: 'acme', orderId: o.id, idempotencyKey, kind });
      }
    }
    // Their webhook events (the sandbox sends each right after the charge) must be recorded too.
    const completedTemplates = templates.filter((t) => t.kind === 'completed');
    for (let tries = 0; ; tries++) {
      const { rows } = await preloaded.pool.query<{ n: number }>(
        'select count(distinct order_id)::int as n from webhook_events where order_id = any($1)',
        [completedTemplates.map((t) => t.orderId)],
      );
      if (rows[0]?.n === completedTemplates.length) break;
      if (tries > 100) throw new Error('the template orders webhook events did not arrive');
      await new Promise((r) => setTimeout(r, 300));
    }

    say(`preloading ${PRELOAD_ORDERS} orders over ${TENANTS.length} tenants and 7 days`);
    const preloadClient = await preloaded.pool.connect();
    let preloadResult;
    try {
      preloadResult = await preload(
        preloadClient,
        templates,
        {
          orders: PRELOAD_ORDERS,
          tenants: TENANTS,
          perMille: { rejected: 40, needsAttention: 2 },
          chunk: Math.min(20_000, PRELOAD_ORDERS),
          days: 7,
        },
        say,
      );
    } finally {
      preloadClient.release();
    }
    say(
      `preloaded in ${Math.round(preloadResult.seconds)} s: ${Object.entries(preloadResult.rows)
        .map(([k, v]) => `${k} ${v}`)
        .join(', ')}`,
    );

    // ABBA: empty, preloaded, preloaded, empty.
    await phase(empty, 0);
    await phase(preloaded, 0);
    await phase(preloaded, 1);
    await phase(empty, 1);

    const summary = (s: Side) => ({
      orders: s.samples.orders,
      notCompleted: s.samples.notCompleted,
      ordersPerSec: round(s.samples.orders / s.samples.orderSecs, 2),
      order: stats(s.samples.orderMs),
      getNewOrder: stats(s.samples.getNewMs),
      ...(s.name === 'preloaded' ? { getPreloadedOrder: stats(s.samples.getPreloadedMs) } : {}),
      webhook: { ...stats(s.samples.webhookMs), outcomes: s.samples.webhookOutcomes },
      metricsScrape: stats(s.samples.scrapeMs),
    });
    const e = summary(empty);
    const p = summary(preloaded);
    const ratio = (a: number, b: number) => round(a / b, 2);
    const ratios = {
      throughput: ratio(p.ordersPerSec, e.ordersPerSec),
      getNewOrderP50: ratio(p.getNewOrder.p50Ms, e.getNewOrder.p50Ms),
      getNewOrderP99: ratio(p.getNewOrder.p99Ms, e.getNewOrder.p99Ms),
      getPreloadedOrderP99: ratio(p.getPreloadedOrder?.p99Ms ?? NaN, e.getNewOrder.p99Ms),
      webhookP50: ratio(p.webhook.p50Ms, e.webhook.p50Ms),
      webhookP99: ratio(p.webhook.p99Ms, e.webhook.p99Ms),
      metricsScrapeP50: ratio(p.metricsScrape.p50Ms, e.metricsScrape.p50Ms),
      metricsScrapeP99: ratio(p.metricsScrape.p99Ms, e.metricsScrape.p99Ms),
    };
    printColumns([
      [
        'database',
        'orders/s',
        'GET new p50/p99',
        'GET preloaded p50/p99',
        'webhook p50/p99',
        'scrape p50/p99',
      ],
      ...[e, p].map((r, i) => [
        i === 0 ? 'empty' : 'preloaded',
        String(r.ordersPerSec),
        `${r.getNewOrder.p50Ms}/${r.getNewOrder.p99Ms}`,
        'getPreloadedOrder' in r && r.getPreloadedOrder
          ? `${r.getPreloadedOrder.p50Ms}/${r.getPreloadedOrder.p99Ms}`
          : '-',
        `${r.webhook.p50Ms}/${r.webhook.p99Ms}`,
        `${r.metricsScrape.p50Ms}/${r.metricsScrape.p99Ms}`,
      ]),
      [
        'ratio',
        String(ratios.throughput),
        `${ratios.getNewOrderP50}/${ratios.getNewOrderP99}`,
        `-/${ratios.getPreloadedOrderP99}`,
        `${ratios.webhookP50}/${ratios.webhookP99}`,
        `${ratios.metricsScrapeP50}/${ratios.metricsScrapeP99}`,
      ],
    ]);

    // The soak, on the preloaded database alone: the empty side's stack is stopped first.
    await procs.stop([empty.stack.sandbox, ...empty.stack.workers, empty.stack.apiProc]);
    let soakReport = null;
    if (SOAK > 0) {
      const before = (
        await preloaded.pool.query<{ ops: number; orders: number }>(
          'select (select count(*) from operations)::int as ops, (select count(*) from orders)::int as orders',
        )
      ).rows[0]!;
      const probe = await HostProbe.start(procs, runDir, say);
      const {
        warmup,
        tenths,
        seconds: secs,
      } = await soak(preloaded, temporal.pid, probe).finally(() => probe.stop());
      const after = (
        await preloaded.pool.query<{ ops: number; orders: number }>(
          'select (select count(*) from operations)::int as ops, (select count(*) from orders)::int as orders',
        )
      ).rows[0]!;
      const first = tenths[0]!;
      const lastTenth = tenths[tenths.length - 1]!;
      // CPU per order in the probe's units, last tenth over first: the order's cost, host's speed out.
      const costRatio =
        (lastTenth.cpuSecPerOrder.total ?? NaN) /
        lastTenth.hostProbe.cpuMsPerUnit /
        ((first.cpuSecPerOrder.total ?? NaN) / first.hostProbe.cpuMsPerUnit);
      const cpuBound = [first, lastTenth].every((t) => t.hostProbe.idlePct < MAX_IDLE_PCT_CPU_BOUND);
      if (!cpuBound)
        say(
          `soak: the first or the last tenth was not CPU-bound (idle ${first.hostProbe.idlePct} %, ${lastTenth.hostProbe.idlePct} %); no orders/s at the first tenth's host`,
        );
      soakReport = {
        orders: SOAK,
        seconds: round(secs, 1),
        ordersPerSec: round(SOAK / secs, 2),
        ledgerRecordsPerOrder: round((after.ops - before.ops) / Math.max(1, after.orders - before.orders), 2),
        warmup,
        tenths,
        lastVsFirst: {
          ordersPerSec: ratio(lastTenth.ordersPerSec, first.ordersPerSec),
          cpuSecPerOrder: ratio(lastTenth.cpuSecPerOrder.total ?? NaN, first.cpuSecPerOrder.total ?? NaN),
          // How much slower a CPU-second of the host was (the probe's CPU time per unit), and CPU
          // per order in the probe's units: the order's cost with the host's speed taken out.
          hostProbeCpu: ratio(lastTenth.hostProbe.cpuMsPerUnit, first.hostProbe.cpuMsPerUnit),
          cpuSecPerOrderHostAdjusted: round(costRatio, 2),
          // The orders/s the last tenth would have had with the first tenth's host: the same CPU
          // for the stack, as fast. Only where both tenths were CPU-bound (a closed loop's orders/s
          // is then the CPU it gets over its CPU per order; see docs/BENCHMARKS.md, Growth).
          ordersPerSecAtFirstHost: cpuBound ? round(1 / costRatio, 2) : null,
          rss: Object.fromEntries(
            Object.keys(first.rssMb)
              .filter((k) => k !== 'postgresBackendCount')
              .map((k) => [k, ratio(lastTenth.rssMb[k] ?? NaN, first.rssMb[k] ?? NaN)]),
          ),
        },
      };
      printColumns([
        [
          'tenth',
          'orders/s',
          'CPU s/order',
          'load',
          'probe ms',
          'idle %',
          ...Object.keys(first.rssMb).map((k) => (k.endsWith('Count') ? k : `${k} MiB`)),
        ],
        ...(warmup
          ? [
              [
                'warm-up',
                String(warmup.ordersPerSec),
                '',
                '',
                String(warmup.hostProbe.cpuMsPerUnit),
                String(warmup.hostProbe.idlePct),
                ...Object.values(warmup.rssEndMb).map(String),
              ],
            ]
          : []),
        ...tenths.map((t, i) => [
          String(i + 1),
          String(t.ordersPerSec),
          String(t.cpuSecPerOrder.total),
          String(t.loadAverage1m),
          String(t.hostProbe.cpuMsPerUnit),
          String(t.hostProbe.idlePct),
          ...Object.values(t.rssMb).map(String),
        ]),
        [
          'last/first',
          String(soakReport.lastVsFirst.ordersPerSec),
          String(soakReport.lastVsFirst.cpuSecPerOrder),
          '',
          String(soakReport.lastVsFirst.hostProbeCpu),
          '',
          ...Object.values(soakReport.lastVsFirst.rss).map(String),
        ],
        [
          'at the first host',
          String(soakReport.lastVsFirst.ordersPerSecAtFirstHost ?? '-'),
          String(soakReport.lastVsFirst.cpuSecPerOrderHostAdjusted),
        ],
      ]);
    }

    const prune = await pruneRate(preloaded.pool);
    const soakRate = soakReport?.ordersPerSec ?? p.ordersPerSec;
    const perOrder = {
      operations: soakReport?.ledgerRecordsPerOrder ?? 6,
      workflow_outbox: 1,
      webhook_events: 1,
    };
    // The schedule a worker of this release creates: a run every RETENTION_INTERVAL_MS, at most
    // DEFAULT_MAX_BATCHES batches of DEFAULT_BATCH_SIZE rows per table and run.
    const intervalSec = config.retention.intervalMs / 1000;
    const capPerRun = DEFAULT_BATCH_SIZE * DEFAULT_MAX_BATCHES;
    const retention = Object.fromEntries(
      Object.entries(prune).map(([table, r]) => {
        const insertsPerSec = soakRate * perOrder[table as keyof typeof perOrder];
        const perRun = insertsPerSec * intervalSec;
        return [
          table,
          {
            ...r,
            insertsPerSec: round(insertsPerSec, 1),
            // What the prune can do against what the load adds, both per second.
            pruneOverInsert: round(r.rowsPerSec / insertsPerSec, 1),
            // Per scheduled run: the rows the load adds, the run's cap over them, and the seconds
            // the run takes at the measured prune rate.
            rowsPerRun: Math.round(perRun),
            runCapOverRows: round(capPerRun / perRun, 1),
            runSecondsAtMeasuredRate: round(perRun / r.rowsPerSec, 1),
          },
        ];
      }),
    );
    say(
      `retention vs the load: ${Object.entries(retention)
        .map(
          ([t, r]) =>
            `${t} prunes ${r.rowsPerSec}/s, inserts ${r.insertsPerSec}/s (x${r.pruneOverInsert}); ` +
            `a run clears ${r.rowsPerRun} in ${r.runSecondsAtMeasuredRate} s (cap x${r.runCapOverRows})`,
        )
        .join('; ')}`,
    );

    const report = {
      generatedAt: new Date().toISOString(),
      machine: {
        cpus: os.cpus().length,
        cpuModel: os.cpus()[0]?.model ?? 'unknown',
        loadAverage1mAtStart: loadAtStart,
        loadAverage1mAtEnd: round(os.loadavg()[0] ?? 0, 2),
        node: process.version,
      },
      options: {
        quick: QUICK,
        preloadOrders: PRELOAD_ORDERS,
        ordersPerDatabase: ORDERS,
        concurrency: C,
        gets: GETS,
        webhooks: WEBHOOKS,
        scrapes: SCRAPES,
        soakOrders: SOAK,
        soakWarmup: SOAK_WARMUP,
        pruneBatches: PRUNE_BATCHES,
        tenants: TENANTS,
      },
      preload: { seconds: Math.round(preloadResult.seconds), rows: preloadResult.rows },
      empty: e,
      preloaded: p,
      ratios,
      soak: soakReport,
      retention: { intervalSec, capPerRun, byTable: retention },
      targets: {
        throughputRatio: { target: 0.9, measured: ratios.throughput },
        getP99Ratio: {
          target: 1.2,
          measured: ratios.getNewOrderP99,
          preloadedOrders: ratios.getPreloadedOrderP99,
        },
        soakLastVsFirstThroughput: {
          target: '0.9-1.1',
          measured: soakReport?.lastVsFirst.ordersPerSec ?? null,
          // With the host's change taken out (bench/lib/host-probe.ts; docs/BENCHMARKS.md, Growth).
          measuredAtFirstHost: soakReport?.lastVsFirst.ordersPerSecAtFirstHost ?? null,
        },
        soakLastVsFirstRss: { target: '0.9-1.1', measured: soakReport?.lastVsFirst.rss ?? null },
        // Not one of issue 29's targets: the same comparison in CPU per order (see Tenth).
        soakLastVsFirstCpuPerOrder: {
          target: null,
          measured: soakReport?.lastVsFirst.cpuSecPerOrder ?? null,
          measuredAtFirstHost: soakReport?.lastVsFirst.cpuSecPerOrderHostAdjusted ?? null,
        },
      },
    };
    const out = path.join(ROOT, `bench/results/growth${QUICK ? '-quick' : ''}.json`);
    fs.mkdirSync(path.dirname(out), { recursive: true });
    fs.writeFileSync(out, `${JSON.stringify(report, null, 2)}\n`);
    console.log(JSON.stringify({ ratios, soak: soakReport?.lastVsFirst ?? null, retention }, null, 2));
    say(`wrote ${path.relative(process.cwd(), out)} in ${Math.round((Date.now() - started) / 1000)} s`);
  } finally {
    for (const s of Object.values(sides)) await s.pool.end().catch(() => undefined);
    await connection.close().catch(() => undefined);
  }
  await procs.cleanup();
  fs.rmSync(runDir, { recursive: true, force: true });
}

try {
  await main();
} catch (err) {
  say(`failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
  await procs.cleanup();
  process.exit(1);
}
